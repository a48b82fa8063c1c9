"""Grade submissions with the hidden tests (instructors): ``python -m exercises.grade``.

    python -m exercises.grade                                   # grades exercises/ (all notebooks)
    python -m exercises.grade --submission path/to/exercises 02 05
    python -m exercises.grade --submission a/ --submission b/ --json report.json
    python -m exercises.grade 2.2 3.4                           # single exercises
    python -m exercises.grade --update-manifest                 # after editing the grader's files

A submission is a folder laid out like ``exercises/`` (``ex01_patch_embedding.py`` ...
``ex10_backprop.py``; a missing file scores zero for its exercises). Prints a table of points
per exercise and writes, with ``--json``, ``{"score", "max_score", "exercises": [{"name",
"score", "max_score", "feedback", ...}]}`` (a list of such reports when several submissions
are graded).

**The trust boundary.** This process is the judge: it holds the hidden tests, the references,
the points and the report. The learner's code runs in one process per exercise, inside a
bubblewrap sandbox (:mod:`.bubblewrap`) that holds neither those nor the repository; it
receives inputs and sends back outputs as data; the judge computes what is expected, compares,
and adds up the points. See ``docs/instructors.md``. Exit status: 0 whenever the grader could
grade (whatever the scores); 2 on a usage error, in a student copy (no hidden tests: use
``python -m exercises.check``), without a sandbox (unless ``--trust-submissions``), or when the
grader's files differ from ``exercises/grader/hidden/manifest.json``.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import tempfile
from pathlib import Path

from exercises.grader import bubblewrap, integrity
from exercises.grader.grading import Grader, grade_batch
from exercises.visible_checks import sort_key

EXERCISES_DIR = integrity.EXERCISES_DIR
DEFAULT_TIME_LIMIT = 30.0     # seconds per exercise (a correct one takes well under 1 s)


def load_registry(bytecode):
    """The hidden tests (imported from their source, see :func:`integrity.private_bytecode`),
    or None in a student copy."""
    if not (integrity.HIDDEN / "__init__.py").is_file():
        return None
    import einops  # noqa: F401 - the libraries the hidden tests use, from their own bytecode
    import scipy.special  # noqa: F401
    import torch
    import torch.nn.functional  # noqa: F401

    torch.set_num_threads(1)
    with integrity.private_bytecode(bytecode):
        import exercises.grader.hidden  # noqa: F401 - registers every exercise
        from exercises.grader.judge import REGISTRY
    return REGISTRY


def select_exercises(registry, selectors) -> list[str]:
    """Selectors: notebook numbers ('02', '2') or exercise IDs ('2.2', '2.4')."""
    ids = sorted(registry, key=sort_key)
    if not selectors:
        return ids
    chosen = []
    for sel in selectors:
        if re.fullmatch(r"\d+", sel):
            match = [i for i in ids if registry[i].notebook == f"{int(sel):02d}"]
        else:
            match = [i for i in ids if i == sel]
        if not match:
            raise SystemExit(f"grade: no exercise matches {sel!r} (notebooks 01-08 and 10, or IDs like 2.2)")
        chosen.extend(m for m in match if m not in chosen)
    return sorted(chosen, key=sort_key)


def print_report(report: dict, width: int = 100) -> None:
    print(f"Hidden tests -- submission {report['submission']}")
    print(f"  {'exercise':<44} {'points':>7}")
    for ex in report["exercises"]:
        print(f"  {ex['name']:<44} {ex['score']:>3}/{ex['max_score']:<3}")
        if ex["score"] < ex["max_score"]:
            for line in ex["feedback"].splitlines()[:6]:
                text = "- " + line
                print("      " + (text if len(text) <= width - 6 else text[: width - 9] + "..."))
    print(f"  {'total':<44} {report['score']:>3}/{report['max_score']:<3}")


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"the time limit must be a positive number of seconds, got {text}")
    return value


def read_jobs(args, parser) -> list[dict]:
    if not args.batch:
        return [{"submission": s, "exercises": None, "time_limit": None}
                for s in (args.submission or [str(EXERCISES_DIR)])]
    try:
        jobs = json.loads(Path(args.batch).read_text())
    except (OSError, ValueError) as err:
        parser.error(f"--batch {args.batch}: {err}")
    if not isinstance(jobs, list) or not all(isinstance(j, dict) and isinstance(j.get("submission"), str)
                                             for j in jobs):
        parser.error("--batch: expected a JSON list of {\"submission\": DIR, ...}")
    for job in jobs:
        limit = job.get("time_limit")
        if limit is not None and not (isinstance(limit, (int, float)) and math.isfinite(limit) and limit > 0):
            parser.error(f"--batch: time_limit must be a positive number of seconds, got {limit!r}")
    return jobs


def write_report(path: Path, payload) -> None:
    """Write the JSON report next to ``path`` and move it there: a link at ``path`` is replaced,
    never followed."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(json.dumps(payload, indent=2) + "\n")
        os.chmod(tmp, 0o644 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _epilog() -> str:
    import textwrap

    have, lack = bubblewrap.protections()
    lines = ["protections on this machine:"]
    for mark, items in (("+", have), ("-", lack)):
        lines += [textwrap.fill(item, 96, initial_indent=f"  {mark} ", subsequent_indent="    ") for item in items]
    return "\n".join(lines) + "\nsee docs/instructors.md"


def main(argv=None, bytecode=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m exercises.grade", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Grade exercises with the hidden tests (instructors). Each exercise of a submission runs "
                    "in a sandboxed process of its own; the scores are computed here.",
        epilog=_epilog())
    parser.add_argument("selectors", nargs="*", metavar="NN",
                        help="notebooks (01 ... 08, 10) or exercise IDs (2.2); default: all")
    parser.add_argument("--submission", action="append", metavar="DIR",
                        help="a folder laid out like exercises/ (default: exercises/); repeat to grade several")
    parser.add_argument("--json", metavar="FILE", help="write the report(s) as JSON")
    parser.add_argument("--time-limit", type=_positive_seconds, default=DEFAULT_TIME_LIMIT, metavar="S",
                        help=f"seconds of the learner's time per exercise (default {DEFAULT_TIME_LIMIT:g})")
    parser.add_argument("--batch", metavar="FILE",
                        help="a JSON list of {\"submission\": DIR, \"exercises\": [IDs] or null, "
                             "\"time_limit\": S}: grade them all in one run (used by the tests)")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), metavar="N",
                        help="exercises graded at the same time (default: 2, or 1 on one core)")
    parser.add_argument("--trust-submissions", action="store_true",
                        help="grade without the sandbox (no bubblewrap here): for your own solutions only")
    parser.add_argument("--update-manifest", action="store_true",
                        help="record the hashes of the grader's files, then exit")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs must be at least 1, got {args.jobs}")
    if args.json and not Path(args.json).absolute().parent.is_dir():
        parser.error(f"--json {args.json}: the folder {Path(args.json).absolute().parent} does not exist")
    jobs = read_jobs(args, parser)

    if not (integrity.HIDDEN / "__init__.py").is_file():
        print("grade: the hidden tests (exercises/grader/hidden/) are not here -- this is a student copy. "
              "Check your work with: python -m exercises.check", file=sys.stderr)
        return 2
    if args.update_manifest:
        print(f"wrote {integrity.write_manifest().relative_to(integrity.ROOT)} "
              f"({len(integrity.manifest_files())} files)")
        return 0
    problems = integrity.manifest_problems() + integrity.bytecode_problems()
    if problems:
        print("grade: refusing to grade: the grader's files are not as recorded in "
              "exercises/grader/hidden/manifest.json:\n  " + "\n  ".join(problems[:20]) +
              "\nIf you changed the grader's files yourself, record them with: "
              "python -m exercises.grade --update-manifest", file=sys.stderr)
        return 2
    box = bubblewrap.detect()
    if box["problem"] and not args.trust_submissions:
        print(f"grade: refusing to grade untrusted submissions without a sandbox: {box['problem']}.\n"
              "To grade your own solutions anyway: --trust-submissions", file=sys.stderr)
        return 2
    hashes = integrity.current_hashes()
    for line in bubblewrap.protections(args.trust_submissions)[1]:
        print(f"grade: missing protection: {line}", file=sys.stderr)

    class Changed(Exception):
        pass

    def before_each():
        if integrity.current_hashes() != hashes:
            raise Changed()

    def show(n, report):
        if args.batch:
            print(f"{report['score']:>4}/{report['max_score']:<4} {jobs[n]['submission']}", flush=True)
        else:
            if n:
                print()
            print_report(report)

    with tempfile.TemporaryDirectory(prefix="vit-scratch-grade-") as tmp:
        os.chmod(tmp, 0o700)
        own_bytecode = bytecode or Path(tmp) / "bytecode"
        tag = os.environ.get("VIT_SCRATCH_GRADER_RUN")       # every process of the run carries it
        grader = Grader(Path(tmp) / "run", trusted=args.trust_submissions,
                        env={"VIT_SCRATCH_GRADER_RUN": tag} if tag else None)
        try:
            grader.start(["torch"] if args.trust_submissions else ["torch", "scipy", "numpy"])
            registry = load_registry(own_bytecode)
            ids_all = select_exercises(registry, args.selectors)
            batch = []
            for job in jobs:
                ids = job.get("exercises") or ids_all
                unknown = [i for i in ids if i not in registry]
                if unknown:
                    parser.error(f"--batch: unknown exercise {unknown[0]!r}")
                batch.append((Path(job["submission"]).absolute(), ids,
                              float(job.get("time_limit") or args.time_limit)))
            with integrity.private_bytecode(own_bytecode):
                grader.prepare([registry[i] for _, ids, _ in batch for i in ids])
            try:
                reports = grade_batch(grader, registry, batch, workers=args.jobs, on_report=show,
                                      before_each=before_each)
            except Changed:
                print("grade: the grader's files changed during grading; stopping (no report written)",
                      file=sys.stderr)
                return 2
        finally:
            grader.close()
    if args.json:
        write_report(Path(args.json).absolute(), reports[0] if len(reports) == 1 and not args.batch else reports)
    return 0
