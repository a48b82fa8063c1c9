"""Grade a submission with the hidden tests (instructors).

    python -m exercises.grade                                   # grades exercises/ (all notebooks)
    python -m exercises.grade --submission path/to/exercises 02 05
    python -m exercises.grade --submission a/ --submission b/ --json report.json
    python -m exercises.grade 2.2 3.4                           # single exercises
    python -m exercises.grade --update-manifest                 # after editing the hidden tests

A submission is a folder laid out like ``exercises/`` (``ex01_patch_embedding.py`` ...
``ex08_coscale.py``; a missing file scores zero for its exercises). Prints a table of points
per exercise and writes, with ``--json``, ``{"score", "max_score", "exercises": [{"name",
"score", "max_score", "feedback", ...}]}`` (a list of such reports when several submissions
are graded).

**The trust boundary.** This process is the judge: it holds the hidden tests, the references,
the points and the report. The learner's code runs in one fresh process per exercise
(:mod:`exercises.runner`), which never imported those and, when the judge runs as root, cannot
read them: it runs under a uid of the submission's own. It receives inputs and sends back
outputs as data; the judge computes what is expected, compares, and adds up the points. See
``docs/instructors.md``. Exit status: 0 whenever the grader could grade (whatever the scores),
2 on a usage error, in a student copy (no hidden tests: use ``python -m exercises.check``), or
when the hidden tests or the grading code differ from ``exercises/hidden/manifest.json``.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import re
import stat
import sys
import tempfile
import traceback
from pathlib import Path

EXERCISES_DIR = Path(__file__).resolve().parent
HIDDEN = EXERCISES_DIR / "hidden"
SOLUTIONS = EXERCISES_DIR / "solutions"
MANIFEST = HIDDEN / "manifest.json"
JUDGE_FILES = ("judge.py", "session.py", "runner.py", "feedback.py", "grade.py")
OUTPUT_CAP = 1 << 20          # bytes of stdout + stderr an exercise may print
DEFAULT_TIME_LIMIT = 30.0     # seconds per exercise (a correct one takes well under 1 s)
EXTRA_MEMORY = 4 << 30        # bytes of address space a child may add to the runner's
MAX_SOURCE = 1 << 20          # bytes of one submitted file


def load_registry():
    """The hidden tests, or None in a student copy."""
    if not (HIDDEN / "__init__.py").is_file():
        return None
    import torch

    torch.set_num_threads(1)
    import exercises.hidden  # noqa: F401 - registers every exercise
    from exercises.judge import REGISTRY

    return REGISTRY


def select_exercises(registry, selectors) -> list[str]:
    """Selectors: notebook numbers ('02', '2') or exercise IDs ('2.2', '2.4')."""
    from exercises.visible_checks import sort_key

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


# ---- integrity -----------------------------------------------------------------------------------

def manifest_files() -> list[Path]:
    files = [p for p in sorted(HIDDEN.rglob("*")) if p.is_file() and "__pycache__" not in p.parts
             and p != MANIFEST]
    return files + [EXERCISES_DIR / f for f in JUDGE_FILES]


def current_hashes() -> dict:
    root = EXERCISES_DIR.parent
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in manifest_files()}


def write_manifest() -> Path:
    MANIFEST.write_text(json.dumps({"sha256": current_hashes()}, indent=1, sort_keys=True) + "\n")
    return MANIFEST


def manifest_problems(hashes: dict | None = None) -> list[str]:
    """What differs between the files and the manifest (empty: all as recorded)."""
    try:
        recorded = json.loads(MANIFEST.read_text())["sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        return [f"{MANIFEST.relative_to(EXERCISES_DIR.parent)} is missing or unreadable"]
    now = current_hashes() if hashes is None else hashes
    problems = [f"{f} changed" for f in sorted(set(now) & set(recorded)) if now[f] != recorded[f]]
    problems += [f"{f} is new" for f in sorted(set(now) - set(recorded))]
    problems += [f"{f} is gone" for f in sorted(set(recorded) - set(now))]
    return problems


def protect_folders() -> list[str]:
    """As root: make exercises/hidden/ and exercises/solutions/ readable by root only."""
    notes = []
    if os.geteuid() != 0:
        return notes
    for folder in (HIDDEN, SOLUTIONS):
        if folder.is_dir():
            mode = stat.S_IMODE(folder.stat().st_mode)
            if mode != 0o700 or folder.stat().st_uid != 0:
                os.chown(folder, 0, 0)
                os.chmod(folder, 0o700)
                notes.append(f"set {folder.relative_to(EXERCISES_DIR.parent)}/ to mode 0700, owner root "
                             f"(was {mode:o})")
    return notes


# ---- reading a submission ------------------------------------------------------------------------

def read_submission(folder: Path):
    """(sources, notes): the folder's Python files as {module: (path, text)}, and, for modules
    that cannot be graded, why ({module: message}); notes['*'] for the folder itself."""
    sources, notes = {}, {}
    if not folder.exists():
        return sources, {"*": f"the submission folder {folder} does not exist"}
    if not folder.is_dir():
        return sources, {"*": f"the submission {folder} is not a folder"}
    entries = sorted(folder.iterdir())
    if not entries:
        notes["*"] = "the submission folder is empty"
    skip = {"__init__.py", "check.py", "grade.py", "judge.py", "session.py", "runner.py", "feedback.py",
            "visible_checks.py", "release.py", "test_visible.py"} if folder.resolve() == EXERCISES_DIR else set()
    for path in entries:
        name = path.name
        stem = name.split(".")[0]
        if not name.endswith(".py"):
            if re.fullmatch(r"ex\d\d_\w+", stem) and path.is_file():
                notes.setdefault(stem, f"{stem}.py is missing from the submission (it holds {name}, "
                                       "which is not a Python file: save the exercise as a .py file)")
            continue
        if name in skip or not stem.isidentifier():
            continue
        try:
            st = path.lstat()
        except OSError:
            continue
        if stat.S_ISLNK(st.st_mode):
            notes[stem] = f"{name} is a symbolic link: submit the file itself"
            continue
        if not stat.S_ISREG(st.st_mode):
            continue
        if st.st_nlink > 1:
            notes[stem] = f"{name} is a hard link: submit a copy of the file"
            continue
        if st.st_size > MAX_SOURCE:
            notes[stem] = f"{name} is larger than {MAX_SOURCE >> 20} MiB"
            continue
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
            with os.fdopen(fd, "rb") as fh:
                data = fh.read(MAX_SOURCE + 1)
        except OSError as err:
            notes[stem] = f"{name} cannot be read ({err.strerror})"
            continue
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as err:
            notes[stem] = f"{name} is not UTF-8 text (byte {err.start})"
            continue
        sources[stem] = (str(folder.resolve() / name), text)
    return sources, notes


def missing_message(module: str, sources: dict, notes: dict) -> str | None:
    if module in sources:
        return None
    if module in notes:
        return notes[module]
    if "*" in notes:
        return f"{notes['*']}: {module}.py is missing"
    return f"{module}.py is missing from the submission"


# ---- grading -------------------------------------------------------------------------------------

def zero(spec, status: str, feedback: str) -> dict:
    return {"score": 0, "max_score": spec.points, "feedback": feedback, "status": status, "parts": []}


def grade_exercise(zygote, spec, sources: dict, time_limit: float, workdir: Path, uid) -> dict:
    """Spawn the exercise's process, run the hidden test against it, reap it."""
    from exercises.judge import Disqualified, ExerciseRun, NotDone, Remote, disqualification
    from exercises.session import ChildGone, describe_end

    out_path = workdir / f"{spec.id}.out"
    fd = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    cpu = int(math.ceil(time_limit)) + 2
    try:
        child = zygote.spawn(uid=uid, gid=uid, forbid=spec.forbid, allow=spec.allow,
                             limits={"cpu": cpu, "memory": EXTRA_MEMORY, "output": OUTPUT_CAP}, output_fd=fd)
    finally:
        os.close(fd)
    child.budget = time_limit
    result, ended = None, False
    try:
        remote = Remote(child)
        problem = remote.import_module(spec.module, sources)
        if problem:
            result = zero(spec, "import error", problem)
        else:
            run = ExerciseRun(spec, remote)
            spec.run(run)
            result = run.result()
            result["status"] = "graded"
    except NotDone as err:
        result = zero(spec, "not done", f"not done yet: {err}")
    except Disqualified as err:
        result = zero(spec, "disqualified", f"zero: {err}")
    except ChildGone as gone:
        if gone.status == "disqualified":
            kind, _, detail = gone.kind.partition("\0")
            result = zero(spec, "disqualified", disqualification(spec, kind, detail))
        elif gone.status == "timeout":
            result = zero(spec, "timeout", f"zero: no result within the time limit of {time_limit:g} s "
                                           "(an endless loop, or far too slow?)")
        elif gone.status == "protocol error":
            result = zero(spec, "protocol error", gone.reason)
        else:
            ended = True
    except Exception:  # noqa: BLE001 - a bug of the hidden test or the grader, not the learner's
        result = zero(spec, "grader error", "grader error:\n" + traceback.format_exc(limit=6))
    finally:
        status = child.finish()
    printed = out_path.stat().st_size if out_path.exists() else 0
    if printed >= OUTPUT_CAP:
        return zero(spec, "output flood", f"zero: printed more than {OUTPUT_CAP >> 20} MiB (output flood); "
                                          "remove the prints")
    if ended or result is None:
        kind, text = describe_end(status, time_limit, cpu)
        return zero(spec, kind, text)
    return result


def grade_submission(zygote, registry, sub_dir: Path, ids, time_limit: float, workdir: Path, uid) -> dict:
    """Grade one submission (one exercise at a time)."""
    return grade_batch(zygote, registry, [(sub_dir, ids, time_limit, workdir, uid)], workers=1)[0]


def grade_batch(zygote, registry, jobs, workers: int = 2, on_report=None, before_each=None) -> list[dict]:
    """Grade [(folder, exercise IDs, time limit, workdir, uid)] with ``workers`` exercises at a
    time, each in a process of its own; the reports come back in the jobs' order.
    ``before_each()`` runs before each exercise starts (the integrity check)."""
    from concurrent.futures import ThreadPoolExecutor

    tasks = []
    for j, (sub_dir, ids, time_limit, workdir, uid) in enumerate(jobs):
        sources, notes = read_submission(sub_dir)
        for ex_id in ids:
            tasks.append((j, registry[ex_id], sources, notes, time_limit, workdir, uid))

    def run(task):
        j, spec, sources, notes, time_limit, workdir, uid = task
        if before_each is not None:
            before_each()
        missing = missing_message(spec.module, sources, notes)
        if missing:
            return zero(spec, "import error", missing)
        return grade_exercise(zygote, spec, sources, time_limit, workdir, uid)

    results = [[] for _ in jobs]
    pending = {j: len(ids) for j, (_, ids, *_rest) in enumerate(jobs)}
    reports = [None] * len(jobs)
    next_out = 0
    with ThreadPoolExecutor(max(1, workers)) as pool:
        for task, result in zip(tasks, pool.map(run, tasks)):
            j, spec = task[0], task[1]
            results[j].append({"id": spec.id, "name": f"{spec.id} {spec.name}", "notebook": spec.notebook,
                               "score": result["score"], "max_score": result["max_score"],
                               "feedback": result["feedback"], "status": result["status"],
                               "parts": result.get("parts", [])})
            pending[j] -= 1
            while next_out < len(jobs) and pending[next_out] == 0:
                exercises = results[next_out]
                reports[next_out] = {"submission": str(jobs[next_out][0]),
                                     "score": sum(e["score"] for e in exercises),
                                     "max_score": sum(e["max_score"] for e in exercises), "exercises": exercises}
                check_report(reports[next_out], registry)
                if on_report is not None:
                    on_report(next_out, reports[next_out])
                next_out += 1
    return reports


def check_report(report: dict, registry) -> None:
    """Every score an int in [0, its maximum]; the totals add up (before anything is written)."""
    total = 0
    for ex in report["exercises"]:
        spec = registry[ex["id"]]
        if ex["max_score"] != spec.points or type(ex["score"]) is not int or not 0 <= ex["score"] <= spec.points:
            raise RuntimeError(f"grader bug: exercise {ex['id']} has {ex['score']}/{ex['max_score']}")
        if sum(p["points"] for p in ex["parts"]) != ex["score"] and ex["parts"]:
            raise RuntimeError(f"grader bug: exercise {ex['id']}'s parts do not add up")
        total += ex["score"]
    if total != report["score"]:
        raise RuntimeError("grader bug: the total does not add up")


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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m exercises.grade",
        description="Grade exercises with the hidden tests (instructors). The learner's code runs in "
                    "a confined process per exercise; the scores are computed here.")
    parser.add_argument("selectors", nargs="*", metavar="NN",
                        help="notebooks (01 ... 08, 10) or exercise IDs (2.2); default: all")
    parser.add_argument("--submission", action="append", metavar="DIR",
                        help="a folder laid out like exercises/ (default: exercises/); repeat to "
                             "grade several")
    parser.add_argument("--json", metavar="FILE", help="write the report(s) as JSON")
    parser.add_argument("--time-limit", type=_positive_seconds, default=DEFAULT_TIME_LIMIT, metavar="S",
                        help=f"seconds of the learner's time per exercise (default {DEFAULT_TIME_LIMIT:g})")
    parser.add_argument("--batch", metavar="FILE",
                        help="a JSON list of {\"submission\": DIR, \"exercises\": [IDs] or null, "
                             "\"time_limit\": S}: grade them all in one run (used by the tests)")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), metavar="N",
                        help="exercises graded at the same time (default: 2, or 1 on one core)")
    parser.add_argument("--update-manifest", action="store_true",
                        help="record the hashes of exercises/hidden/ and the grading code, then exit")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs must be at least 1, got {args.jobs}")
    if args.json and not Path(args.json).resolve().parent.is_dir():
        parser.error(f"--json {args.json}: the folder {Path(args.json).resolve().parent} does not exist")
    jobs = read_jobs(args, parser)

    if not (HIDDEN / "__init__.py").is_file():
        print("grade: the hidden tests (exercises/hidden/) are not here -- this is a student copy. "
              "Check your work with: python -m exercises.check", file=sys.stderr)
        return 2
    if args.update_manifest:
        print(f"wrote {write_manifest().relative_to(EXERCISES_DIR.parent)} "
              f"({len(manifest_files())} files)")
        return 0
    problems = manifest_problems()
    if problems:
        print("grade: refusing to grade: the hidden tests or the grading code differ from "
              "exercises/hidden/manifest.json:\n  " + "\n  ".join(problems[:20]) +
              "\nIf you changed them yourself, record them with: python -m exercises.grade --update-manifest",
              file=sys.stderr)
        return 2
    hashes = current_hashes()

    from exercises.session import UID_BASE, Zygote, is_root, protections

    for note in protect_folders():
        print(f"grade: {note}", file=sys.stderr)
    _, lacking = protections()
    for line in lacking:
        print(f"grade: missing protection: {line}", file=sys.stderr)

    class Changed(Exception):
        pass

    def integrity():
        if current_hashes() != hashes:
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
        zygote = Zygote(Path(tmp))
        try:
            registry = load_registry()
            ids_all = select_exercises(registry, args.selectors)
            batch = []
            for n, job in enumerate(jobs):
                ids = job.get("exercises") or ids_all
                unknown = [i for i in ids if i not in registry]
                if unknown:
                    parser.error(f"--batch: unknown exercise {unknown[0]!r}")
                workdir = Path(tmp) / str(n)
                workdir.mkdir()
                batch.append((Path(job["submission"]).absolute(), ids,
                              float(job.get("time_limit") or args.time_limit), workdir,
                              UID_BASE + n if is_root() else None))
            try:
                reports = grade_batch(zygote, registry, batch, workers=args.jobs, on_report=show,
                                      before_each=integrity)
            except Changed:
                print("grade: the hidden tests or the grading code changed during grading; stopping "
                      "(no report written)", file=sys.stderr)
                return 2
        finally:
            zygote.close()
    if args.json:
        payload = reports[0] if len(reports) == 1 and not args.batch else reports
        Path(args.json).write_text(json.dumps(payload, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # python -m exercises.grade | head
        sys.stderr.close()
        sys.exit(0)
