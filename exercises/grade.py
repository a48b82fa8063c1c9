"""Grade a submission with the hidden tests.

    python -m exercises.grade                                   # grades exercises/ (all notebooks)
    python -m exercises.grade --submission path/to/exercises 02 05
    python -m exercises.grade --submission a/ --submission b/ --json report.json
    python -m exercises.grade 2.2 3.4                           # single exercises

A submission is a folder laid out like ``exercises/`` (``ex01_patch_embedding.py`` ...
``ex08_coscale.py``; missing files score zero). Prints a table of points per exercise and
writes, with ``--json``, ``{"score", "max_score", "exercises": [{"name", "score", "max_score",
"feedback", ...}]}`` (a list of such reports when several submissions are graded).

**Isolation.** The grader imports NumPy, PyTorch and the hidden tests once, then forks one
child process per exercise. The child imports the learner's module afresh and runs the hidden
test; it writes its stdout/stderr to a capped file and sends its result through a pipe. So a
submission that hangs (time limit per exercise), crashes (segfault), calls ``sys.exit`` or
``os._exit``, floods its output (more than 1 MiB), or calls ``vit_scratch``'s reference for the
function it must write, gets zero for that exercise with the reason, and grading goes on. The
grader exits 0 whenever it could grade (whatever the scores), 2 on a usage error or when the
hidden tests are missing (a student copy has none: use ``python -m exercises.check``).

This stops accidents and the obvious shortcut; it is not a security sandbox (the child runs
with the grader's permissions), so grade untrusted code on a machine or container of its own.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import select
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path

EXERCISES_DIR = Path(__file__).resolve().parent
OUTPUT_CAP = 1 << 20          # bytes of stdout + stderr an exercise may print
DEFAULT_TIME_LIMIT = 30.0     # seconds per exercise (a correct one takes well under 1 s)
EXTRA_MEMORY = 4 << 30        # bytes of address space a child may add to the grader's


def load_registry():
    """The hidden tests, or None in a student copy."""
    if not (EXERCISES_DIR / "hidden" / "__init__.py").is_file():
        return None
    import torch

    torch.set_num_threads(1)  # no thread pool in the parent: fork-safe, and fair to a shared machine
    import exercises.hidden  # noqa: F401 - registers every exercise
    from exercises.harness import REGISTRY

    return REGISTRY


def select_exercises(registry, selectors) -> list[str]:
    """Selectors: notebook numbers ('02', '2') or exercise IDs ('2.2', '2.4')."""
    from exercises.harness import sort_key

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
            raise SystemExit(f"grade: no exercise matches {sel!r} (notebooks 01-08, or IDs like 2.2)")
        chosen.extend(m for m in match if m not in chosen)
    return sorted(chosen, key=sort_key)


# ---- the child process --------------------------------------------------------------------------

class ImportProblem(Exception):
    pass


def import_submission(sub_dir: Path, module_name: str):
    import importlib.util

    path = sub_dir / f"{module_name}.py"
    if not path.is_file():
        raise ImportProblem(f"{module_name}.py is missing from the submission")
    if str(sub_dir) not in sys.path:
        sys.path.insert(0, str(sub_dir))
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except SyntaxError as err:
        raise ImportProblem(f"{module_name}.py does not compile: SyntaxError at line {err.lineno}: "
                            f"{err.msg}") from None
    except SystemExit as err:
        raise ImportProblem(f"{module_name}.py calls sys.exit({err.code!r}) when imported") from None
    except BaseException as err:  # noqa: BLE001 - anything at import time is the learner's
        from exercises.harness import describe_error

        raise ImportProblem(f"importing {module_name}.py failed: {describe_error(err, str(sub_dir))}") from None
    return module


def run_in_child(spec, sub_dir: Path) -> dict:
    """Import the learner's module and run one hidden test (in the forked child)."""
    import numpy as np
    import torch

    from exercises.harness import Disqualified, ExerciseRun, NotDone

    torch.set_num_threads(1)
    torch.manual_seed(0)
    np.seterr(all="ignore")
    try:
        module = import_submission(sub_dir, spec.module)
    except ImportProblem as err:
        return zero(spec, "import error", str(err))
    run = ExerciseRun(spec, module, str(sub_dir))
    try:
        spec.run(run)
    except NotDone as err:
        return zero(spec, "not done", f"not done yet: {err}")
    except Disqualified as err:
        return zero(spec, "disqualified", f"zero: {err}")
    result = run.result()
    result["status"] = "graded"
    return result


def zero(spec, status: str, feedback: str) -> dict:
    return {"score": 0, "max_score": spec.points, "feedback": feedback, "status": status, "parts": []}


def _limit_resources(time_limit: float) -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_FSIZE, (OUTPUT_CAP, OUTPUT_CAP))
    cpu = int(time_limit) + 2
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    try:
        with open("/proc/self/status") as f:
            vm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
        resource.setrlimit(resource.RLIMIT_AS, (vm + EXTRA_MEMORY, vm + EXTRA_MEMORY))
    except (OSError, StopIteration, ValueError):
        pass


def run_isolated(spec, sub_dir: Path, time_limit: float, workdir: Path) -> dict:
    """Fork, run one exercise in the child, and collect its result (or the reason there is none)."""
    out_path = workdir / f"{spec.id}.out"
    read_end, write_end = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        status = 0
        try:
            os.close(read_end)
            os.setpgid(0, 0)
            fd = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            os.close(fd)
            _limit_resources(time_limit)
            try:
                result = run_in_child(spec, sub_dir)
            except BaseException:  # noqa: BLE001 - a bug of the harness, not the learner's
                result = zero(spec, "harness error", "harness error:\n" + traceback.format_exc(limit=6))
            data = json.dumps(result).encode()
            view = memoryview(data)
            while view:
                view = view[os.write(write_end, view):]
        except BaseException:  # noqa: BLE001
            status = 70
        finally:
            os._exit(status)

    os.close(write_end)
    chunks, timed_out, exited, status = [], False, False, 0
    deadline = time.monotonic() + time_limit
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            ready, _, _ = select.select([read_end], [], [], min(remaining, 0.25))
            if ready:
                data = os.read(read_end, 1 << 16)
                if not data:
                    break
                chunks.append(data)
            elif not exited:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:  # the child is gone; a grandchild may still hold the pipe open
                    exited = True
                    deadline = min(deadline, time.monotonic() + 1.0)
    finally:
        os.close(read_end)
        for kill in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
            if timed_out or exited:
                try:
                    kill()
                except (ProcessLookupError, PermissionError):
                    pass
        if not exited:
            _, status = os.waitpid(pid, 0)
        try:
            os.killpg(pid, signal.SIGKILL)  # anything the learner's code left running
        except (ProcessLookupError, PermissionError):
            pass

    printed = out_path.stat().st_size if out_path.exists() else 0
    if printed >= OUTPUT_CAP:
        return zero(spec, "output flood", f"zero: printed more than {OUTPUT_CAP >> 20} MiB "
                                          "(output flood); remove the prints")
    if timed_out:
        return zero(spec, "timeout", f"zero: no result within the time limit of {time_limit:g} s "
                                     "(an endless loop, or far too slow?)")
    try:
        return json.loads(b"".join(chunks).decode())
    except (ValueError, UnicodeDecodeError):
        pass
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
        if sig == signal.SIGXCPU:
            return zero(spec, "timeout", f"zero: used more than {int(time_limit) + 2} s of CPU time")
        return zero(spec, "crashed", f"zero: the process crashed (killed by {name})"
                                     + _tail(out_path))
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else status
    return zero(spec, "exited", f"zero: the process ended with exit status {code} before the tests "
                                "finished (os._exit()? never exit from an exercise function)")


def _tail(path: Path) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return f"; last output: {text[-1][:120]!r}" if text else ""


# ---- reports -------------------------------------------------------------------------------------

def grade_submission(registry, sub_dir: Path, ids, time_limit: float, workdir: Path) -> dict:
    exercises = []
    for ex_id in ids:
        spec = registry[ex_id]
        result = run_isolated(spec, sub_dir, time_limit, workdir)
        exercises.append({"id": spec.id, "name": f"{spec.id} {spec.name}", "notebook": spec.notebook,
                          "score": result["score"], "max_score": result["max_score"],
                          "feedback": result["feedback"], "status": result.get("status", "graded"),
                          "parts": result.get("parts", [])})
    return {"submission": str(sub_dir), "score": sum(e["score"] for e in exercises),
            "max_score": sum(e["max_score"] for e in exercises), "exercises": exercises}


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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m exercises.grade",
        description="Grade exercises with the hidden tests (instructors). Each exercise runs in a "
                    "process of its own with a time limit.")
    parser.add_argument("selectors", nargs="*", metavar="NN",
                        help="notebooks (01 ... 08) or exercise IDs (2.2); default: all")
    parser.add_argument("--submission", action="append", metavar="DIR",
                        help="a folder laid out like exercises/ (default: exercises/); repeat to "
                             "grade several")
    parser.add_argument("--json", metavar="FILE", help="write the report(s) as JSON")
    parser.add_argument("--time-limit", type=float, default=DEFAULT_TIME_LIMIT, metavar="S",
                        help=f"seconds per exercise (default {DEFAULT_TIME_LIMIT:g})")
    parser.add_argument("--batch", metavar="FILE",
                        help="a JSON list of {\"submission\": DIR, \"exercises\": [IDs] or null, "
                             "\"time_limit\": S}: grade them all in one run (used by the tests)")
    args = parser.parse_args(argv)

    registry = load_registry()
    if registry is None:
        print("grade: the hidden tests (exercises/hidden/) are not here -- this is a student copy. "
              "Check your work with: python -m exercises.check", file=sys.stderr)
        return 2
    if args.batch:
        jobs = json.loads(Path(args.batch).read_text())
    else:
        subs = args.submission or [str(EXERCISES_DIR)]
        jobs = [{"submission": s, "exercises": None} for s in subs]
    ids_all = select_exercises(registry, args.selectors)
    for job in jobs:
        if not Path(job["submission"]).is_dir():
            print(f"grade: submission folder {job['submission']} not found", file=sys.stderr)
            return 2

    reports = []
    with tempfile.TemporaryDirectory(prefix="vit-scratch-grade-") as tmp:
        for n, job in enumerate(jobs):
            ids = job.get("exercises") or ids_all
            workdir = Path(tmp) / str(n)
            workdir.mkdir()
            report = grade_submission(registry, Path(job["submission"]).resolve(), ids,
                                      float(job.get("time_limit") or args.time_limit), workdir)
            reports.append(report)
            if args.batch:
                print(f"{report['score']:>4}/{report['max_score']:<4} {job['submission']}")
            else:
                print_report(report)
                if n < len(jobs) - 1:
                    print()
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
