"""Grading: each exercise of each submission in a sandboxed process of its own, and the reports.

:class:`Grader` holds what one grading run shares: its private folder, the zygotes (started
once, each forking every exercise's process), the views of the library and packages
(:mod:`.views`), and whether submissions are sandboxed. :func:`grade_batch` grades a list of
submissions ``workers`` exercises at a time; :func:`grade_exercise` spawns one exercise's
process, runs its hidden test against it and reaps it. A report is checked (every score an
integer between 0 and its maximum, the totals adding up) before anyone sees it, and only the
judge's own exceptions can make a "grader error".
"""
from __future__ import annotations

import math
import os
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from exercises.grader import bubblewrap
from exercises.grader.judge import Disqualified, ExerciseRun, NotDone, disqualification
from exercises.grader.remote import Remote, clean, printable
from exercises.grader.session import ChildGone, Zygote, describe_end
from exercises.grader.submission import copy_for_sandbox, missing_message, read_submission
from exercises.grader.views import Views

OUTPUT_CAP = 1 << 20          # bytes of stdout + stderr an exercise may print
EXTRA_MEMORY = 4 << 30        # bytes of address space a child may add to the zygote's
EXERCISES_DIR = Path(__file__).resolve().parents[1]
LIBRARY = EXERCISES_DIR.parent / "vit_scratch"


class Grader:
    """One grading run: its folder (mode 0700), the zygotes, the views, the sandbox or not."""

    def __init__(self, workdir: Path, trusted: bool = False, env: dict | None = None):
        self.workdir, self.trusted, self.env = Path(workdir), trusted, env
        (self.workdir / "views").mkdir(parents=True)
        self.views = Views(self.workdir / "views", LIBRARY)
        self.zygotes = {}
        self.bwrap = None if trusted else bubblewrap.detect()["bwrap"]
        self.exclude = (str(LIBRARY.parent), str(self.workdir))

    def start(self, kinds) -> None:
        """Start the zygotes of these kinds now (they import PyTorch while the judge works)."""
        for kind in kinds:
            if kind not in self.zygotes:
                self.zygotes[kind] = Zygote(self.workdir, kind, self.env)

    def close(self) -> None:
        for zygote in self.zygotes.values():
            zygote.close()

    def prepare(self, specs) -> None:
        """Build every view these exercises need and start their zygotes (before grading: the
        workers share them)."""
        self.start(sorted({self.views.for_spec(spec, trusted=self.trusted)["kind"] for spec in specs}))

    def spawn(self, spec, submission: Path, limits: dict, output_fd: int):
        view = self.views.for_spec(spec, trusted=self.trusted)
        if self.trusted:
            request = {"bwrap": None, "args": [], "submission": str(submission), "library": str(view["library"])}
        else:
            args = bubblewrap.sandbox_args(library=view["library"], submission=submission,
                                           overlays=view["overlays"], exclude=self.exclude)
            request = {"bwrap": self.bwrap, "args": args, "submission": bubblewrap.SUBMISSION,
                       "library": bubblewrap.LIBRARY}
        request.update(exercise=spec.id, limits=limits)
        return self.zygotes[view["kind"]].spawn(request=request, output_fd=output_fd)


def zero(spec, status: str, feedback: str) -> dict:
    return {"score": 0, "max_score": spec.points, "feedback": printable(feedback), "status": status, "parts": []}


def grade_exercise(grader: Grader, spec, submission: Path, time_limit: float, outdir: Path) -> dict:
    """Spawn the exercise's process, run the hidden test against it, reap it."""
    out_path = outdir / f"{spec.id}.out"
    fd = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    cpu = int(math.ceil(time_limit)) + 2
    try:
        child = grader.spawn(spec, submission, {"cpu": cpu, "memory": EXTRA_MEMORY, "output": OUTPUT_CAP}, fd)
    finally:
        os.close(fd)
    child.budget = time_limit
    result, ended = None, False
    try:
        remote = Remote(child, spec)
        problem = remote.import_module(spec.module)
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
        lines = traceback.format_exc(limit=6).splitlines()
        result = zero(spec, "grader error", "grader error:\n" + "\n".join(clean(line, 300) for line in lines))
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


def grade_batch(grader: Grader, registry, jobs, workers: int = 2, on_report=None, before_each=None) -> list[dict]:
    """Grade [(folder, exercise IDs, time limit)] with ``workers`` exercises at a time, each in
    a process of its own; the reports come back in the jobs' order. ``before_each()`` runs
    before each exercise starts (the integrity check)."""
    tasks = []
    for j, (folder, ids, time_limit) in enumerate(jobs):
        files, notes = read_submission(folder, EXERCISES_DIR)
        outdir = grader.workdir / f"submission{j}"
        outdir.mkdir(mode=0o700)
        copy = copy_for_sandbox(files, outdir / "files")
        for ex_id in ids:
            tasks.append((j, registry[ex_id], files, notes, copy, time_limit, outdir))

    def run(task):
        j, spec, files, notes, copy, time_limit, outdir = task
        if before_each is not None:
            before_each()
        missing = missing_message(spec.module, files, notes)
        if missing:
            return zero(spec, "import error", missing)
        return grade_exercise(grader, spec, copy, time_limit, outdir)

    results = [[] for _ in jobs]
    pending = {j: len(ids) for j, (_, ids, _) in enumerate(jobs)}
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
