"""Check your exercises:  python -m exercises.check [NN ...]

    python -m exercises.check          # every notebook's exercises
    python -m exercises.check 02       # notebook 02's
    python -m exercises.check 2.2      # one exercise

Runs the visible checks (shapes and one worked example per exercise) on your files in
``exercises/`` and says, for each exercise, ok / not done yet / wrong (what differs, and a hint).
Exit status 1 when something is wrong, 0 otherwise (exercises not done yet are not an error).
"""
from __future__ import annotations

import argparse
import importlib
import re
import sys

from exercises.feedback import describe_error
from exercises.visible_checks import CHECKS, TOPICS, run_check, sort_key

MARK = {"ok": "ok", "not done": "not done yet", "wrong": "WRONG", "error": "ERROR"}


def selected(selectors) -> list[str]:
    ids = sorted(CHECKS, key=sort_key)
    if not selectors:
        return ids
    chosen = []
    for sel in selectors:
        if re.fullmatch(r"\d+", sel):
            match = [i for i in ids if CHECKS[i].notebook == f"{int(sel):02d}"]
        else:
            match = [i for i in ids if i == sel]
        if not match:
            raise SystemExit(f"check: no exercise matches {sel!r} (notebooks 01-08, 10 and 11, or IDs like 2.2)")
        chosen.extend(m for m in match if m not in chosen)
    return sorted(chosen, key=sort_key)


def load(notebook: str, package: str = "exercises"):
    """Import a notebook's exercise module afresh; (module, None) or (None, error text)."""
    name = f"{package}.{TOPICS[notebook][0]}"
    try:
        if name in sys.modules:
            return importlib.reload(sys.modules[name]), None
        return importlib.import_module(name), None
    except Exception as err:  # noqa: BLE001 - a syntax error or a crash at import time
        return None, describe_error(err, ".")


def main(argv=None, package: str = "exercises") -> int:
    parser = argparse.ArgumentParser(prog="python -m exercises.check", description=__doc__.split("\n")[0])
    parser.add_argument("selectors", nargs="*", metavar="NN",
                        help="notebooks (01 ... 08, 10, 11) or exercise IDs (2.2)")
    args = parser.parse_args(argv)
    ids = selected(args.selectors)
    counts = {"ok": 0, "not done": 0, "wrong": 0, "error": 0}
    for notebook in sorted({CHECKS[i].notebook for i in ids}):
        module_name, topic = TOPICS[notebook]
        print(f"Notebook {notebook} -- {topic}   (exercises/{module_name}.py)")
        module, problem = load(notebook, package)
        for ex_id in (i for i in ids if CHECKS[i].notebook == notebook):
            label = f"{ex_id} {CHECKS[ex_id].name}"
            if module is None:
                print(f"  {label:<42} ERROR   the file does not import: {problem}")
                counts["error"] += 1
                continue
            out = run_check(ex_id, module)
            counts[out.status] += 1
            print(f"  {label:<42} {MARK[out.status]}")
            if out.status in ("wrong", "error"):
                print(f"      {out.message}")
                if out.hint:
                    print(f"      hint: {out.hint}")
        print()
    done = counts["ok"] + counts["wrong"] + counts["error"]
    print(f"{counts['ok']} of {len(ids)} ok, {counts['not done']} not done yet"
          + (f", {done - counts['ok']} to fix" if done > counts["ok"] else ""))
    if counts["ok"] and not (counts["wrong"] or counts["error"]):
        print("The grader's hidden tests go further: random shapes, float32, edge cases, no Python "
              "loops, no calls to the library's versions.")
    return 1 if counts["wrong"] or counts["error"] else 0


if __name__ == "__main__":
    sys.exit(main())
