"""Grading: each exercise of each submission in a sandboxed process of its own, and the reports.

:class:`Grader` holds what one grading run shares: its private folder, the zygotes (started
once, each forking every exercise's process), the views of the library and packages
(:mod:`.views`), and whether submissions are sandboxed. :func:`grade_batch` first collects
every submission into the grader's folder (:mod:`.submission`), then grades them ``workers``
exercises at a time; :func:`grade_exercise` spawns one exercise's process, runs its hidden test
against it and reaps it.

Bounds: each exercise has its time limit, and each submission a wall budget for all its
exercises together (:class:`Budget`): once spent, its remaining exercises score zero with the
reason. An exercise's captured output is a file without a name (unlinked as soon as it is
opened), so it takes no disk once its process is reaped, and a submission's copy is deleted
once its report is done. A report is checked (every score an integer between 0 and its maximum,
the totals adding up) before anyone sees it, and only the judge's own exceptions can make a
"grader error".
"""
from __future__ import annotations

import math
import os
import shutil
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from exercises.grader import bubblewrap
from exercises.grader.judge import Disqualified, ExerciseRun, NotDone, disqualification
from exercises.grader.remote import Remote, clean, printable
from exercises.grader.session import ChildGone, Zygote, describe_end
from exercises.grader.submission import Collected, collect
from exercises.grader.views import Views

OUTPUT_CAP = 1 << 20          # bytes of stdout + stderr an exercise may print
EXTRA_MEMORY = 4 << 30        # bytes of address space a child may add to the zygote's
EXERCISES_DIR = Path(__file__).resolve().parents[1]
LIBRARY = EXERCISES_DIR.parent / "vit_scratch"


class Grader:
    """One grading run: its folder (mode 0700), the zygotes, the views, the sandbox or not.
    ``private``: the judge's other folders, which no submission may be (its folder always is)."""

    def __init__(self, workdir: Path, trusted: bool = False, env: dict | None = None, private=()):
        self.workdir, self.trusted, self.env = Path(workdir), trusted, env
        (self.workdir / "views").mkdir(parents=True)
        self.views = Views(self.workdir / "views", LIBRARY)
        self.zygotes = {}
        self.bwrap = None if trusted else bubblewrap.detect()["bwrap"]
        self.exclude = (str(LIBRARY.parent), str(self.workdir))
        self.private = (self.workdir, *(Path(p) for p in private))

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


class Budget:
    """A submission's wall budget: ``seconds`` from the moment its first exercise starts, for
    all its exercises together."""

    def __init__(self, seconds: float):
        self.seconds, self.deadline = float(seconds), None
        self._lock = threading.Lock()

    def start(self) -> float | None:
        """The deadline (time.monotonic), set by the first exercise; None once it has passed."""
        with self._lock:
            if self.deadline is None:
                self.deadline = time.monotonic() + self.seconds
            return self.deadline if time.monotonic() < self.deadline else None

    def spent(self, margin: float = 0.05) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline - margin


def zero(spec, status: str, feedback: str) -> dict:
    return {"score": 0, "max_score": spec.points, "feedback": printable(feedback), "status": status, "parts": []}


def over_budget(spec, budget: Budget, during: bool) -> dict:
    when = "ran out during this exercise" if during else "ran out before this exercise started"
    return zero(spec, "over budget", f"zero: the submission's wall budget of {budget.seconds:g} s (all its exercises "
                                     f"together) {when}: the code waits or runs far too long somewhere")


def grade_exercise(grader: Grader, spec, submission: Path, time_limit: float, outdir: Path,
                   budget: Budget | None = None) -> dict:
    """Spawn the exercise's process, run the hidden test against it, reap it. Its output goes
    to a file that is unlinked at once: only its size is read, and its disk is freed with the
    process."""
    budget = budget or Budget(math.inf)
    deadline = budget.start()
    if deadline is None:
        return over_budget(spec, budget, during=False)
    out_path = outdir / f"{spec.id}.out"
    fd = os.open(out_path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.unlink(out_path)
        return _run_exercise(grader, spec, submission, time_limit, deadline, budget, fd)
    finally:
        os.close(fd)


def _run_exercise(grader, spec, submission, time_limit, deadline, budget, fd) -> dict:
    cpu = int(math.ceil(time_limit)) + 2
    child = grader.spawn(spec, submission, {"cpu": cpu, "memory": EXTRA_MEMORY, "output": OUTPUT_CAP}, fd)
    child.budget, child.deadline = time_limit, deadline
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
        elif gone.status == "timeout" and budget.spent():
            result = over_budget(spec, budget, during=True)
        elif gone.status == "timeout":
            result = zero(spec, "timeout", f"zero: no result within the time limit of {time_limit:g} s "
                                           "(an endless loop, or far too slow?)")
        elif gone.status == "protocol error":
            result = zero(spec, "protocol error", gone.reason)
        else:
            ended = True
    except Exception:  # noqa: BLE001 - a bug of the hidden test or the grader, not the learner's
        result = _grader_error(spec)
    finally:
        status = child.finish()
    if os.fstat(fd).st_size >= OUTPUT_CAP:
        return zero(spec, "output flood", f"zero: printed more than {OUTPUT_CAP >> 20} MiB (output flood); "
                                          "remove the prints")
    if ended or result is None:
        kind, text = describe_end(status, time_limit, cpu)
        return zero(spec, kind, text)
    return result


def _grader_error(spec) -> dict:
    lines = traceback.format_exc(limit=6).splitlines()
    return zero(spec, "grader error", "grader error:\n" + "\n".join(clean(line, 300) for line in lines))


def grade_batch(grader: Grader, registry, jobs, workers: int = 2, on_report=None, before_each=None) -> list[dict]:
    """Grade [(folder, exercise IDs, time limit, wall budget)] with ``workers`` exercises at a
    time, each in a process of its own; the reports come back in the jobs' order. Every folder
    is collected (copied into the grader's folder) before any exercise runs; nothing about a
    folder stops the batch. ``before_each()`` runs before each exercise starts (the integrity
    check)."""
    tasks, collected = [], []
    for j, (folder, ids, time_limit, seconds) in enumerate(jobs):
        outdir = grader.workdir / f"submission{j}"
        outdir.mkdir(mode=0o700)
        found = _collect(folder, outdir / "files", grader)
        collected.append(found)
        budget = Budget(seconds)
        for ex_id in ids:
            tasks.append((j, registry[ex_id], found, outdir, time_limit, budget))

    def run(task):
        j, spec, found, outdir, time_limit, budget = task
        if before_each is not None:
            before_each()
        started = time.monotonic()
        missing = found.missing(spec.module)
        if missing:
            result = zero(spec, "import error", missing)
        else:
            try:
                result = grade_exercise(grader, spec, outdir / "files", time_limit, outdir, budget)
            except Exception:  # noqa: BLE001 - the sandbox did not start: the grader's, not the learner's
                result = _grader_error(spec)
        result["seconds"] = round(time.monotonic() - started, 2)
        return result

    results = [[] for _ in jobs]
    pending = {j: len(job[1]) for j, job in enumerate(jobs)}
    reports = [None] * len(jobs)
    next_out = 0
    with ThreadPoolExecutor(max(1, workers)) as pool:
        for task, result in zip(tasks, pool.map(run, tasks)):
            j, spec = task[0], task[1]
            results[j].append({"id": spec.id, "name": f"{spec.id} {spec.name}", "notebook": spec.notebook,
                               "score": result["score"], "max_score": result["max_score"],
                               "feedback": result["feedback"], "status": result["status"],
                               "seconds": result["seconds"], "parts": result.get("parts", [])})
            pending[j] -= 1
            while next_out < len(jobs) and pending[next_out] == 0:
                exercises = results[next_out]
                reports[next_out] = {"submission": str(jobs[next_out][0]),
                                     "score": sum(e["score"] for e in exercises),
                                     "max_score": sum(e["max_score"] for e in exercises), "exercises": exercises}
                check_report(reports[next_out], registry)
                shutil.rmtree(grader.workdir / f"submission{next_out}", ignore_errors=True)
                if on_report is not None:
                    on_report(next_out, reports[next_out])
                next_out += 1
    return reports


def _collect(folder, dest: Path, grader: Grader) -> Collected:
    try:
        return collect(str(folder), dest, repository=LIBRARY.parent, exercises_dir=EXERCISES_DIR,
                       private=grader.private)
    except Exception as err:  # noqa: BLE001 - a bug of ours: a zero for this submission, not the batch's end
        return Collected(refused=f"the submission folder could not be collected (a grader error: "
                                 f"{type(err).__name__}: {clean(str(err), 200)})")


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
