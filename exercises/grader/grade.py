"""Grade submissions with the hidden tests (instructors): ``python -m exercises.grade``.

    python -m exercises.grade                                   # grades exercises/ (all notebooks)
    python -m exercises.grade --submission path/to/exercises 02 05
    python -m exercises.grade --submission a/ --submission b/ --json report.json
    python -m exercises.grade 2.2 3.4                           # single exercises
    python -m exercises.grade --update-manifest                 # after editing the grader's files

A submission is a folder laid out like ``exercises/`` (``ex01_patch_embedding.py`` ...; a
missing file scores zero for its exercises). Every submission is first copied, as bytes, into
the grader's own folder (:mod:`.submission`: a folder that is or passes through a symbolic link
is refused), then graded. Prints a table of points per exercise -- every text a submission
controls through one sanitiser (:func:`~.remote.printable`) -- and writes, with ``--json``,
``{"score", "max_score", "exercises": [{"name", "score", "max_score", "feedback", ...}]}`` (a
list of such reports when several submissions are graded), to a file made ready before grading
starts. Each exercise has a time limit (``--time-limit``), each submission a wall budget for
all its exercises together (``--submission-time``).

**The trust boundary.** This process is the judge: it holds the hidden tests, the references,
the points and the report. The learner's code runs in one process per exercise, inside a
bubblewrap sandbox (:mod:`.bubblewrap`) that holds neither those nor the repository; it
receives inputs and sends back outputs as data; the judge computes what is expected, compares,
and adds up the points. See ``docs/instructors.md``. Exit status: 0 whenever the grader could
grade (whatever the scores); 2 on a usage error (a ``--json`` file that cannot be written among
them), in a student copy (no hidden tests: use ``python -m exercises.check``), without a sandbox
(unless ``--trust-submissions``), or when the grader's files differ from
``exercises/grader/hidden/manifest.json``; 1 when the report could not be moved to its path
(the message says where it is).
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
from exercises.grader.remote import printable
from exercises.visible_checks import sort_key

EXERCISES_DIR = integrity.EXERCISES_DIR
DEFAULT_TIME_LIMIT = 30.0       # seconds per exercise (a correct one takes well under 1 s)
DEFAULT_SUBMISSION_TIME = 120.0  # wall seconds per submission, all its exercises together
BATCH_KEYS = {"submission": "a folder", "exercises": "a list of exercise IDs, or null for all",
              "time_limit": "seconds per exercise", "submission_time": "wall seconds for the whole submission"}


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
            raise SystemExit(f"grade: no exercise matches {sel!r} (notebooks 01-08, 10 and 11, or IDs like 2.2)")
        chosen.extend(m for m in match if m not in chosen)
    return sorted(chosen, key=sort_key)


def print_report(report: dict, width: int = 100) -> None:
    """The report as a table; every text passes through the sanitiser, and a feedback line is
    cut at newlines only."""
    print(f"Hidden tests -- submission {printable(report['submission'], 400)}")
    print(f"  {'exercise':<44} {'points':>7}")
    for ex in report["exercises"]:
        print(f"  {printable(ex['name'], 200):<44} {ex['score']:>3}/{ex['max_score']:<3}")
        if ex["score"] < ex["max_score"]:
            for line in printable(ex["feedback"]).split("\n")[:6]:
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


def _seconds(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def read_jobs(args, parser) -> list[dict]:
    """The submissions to grade: ``--submission``s, or the entries of ``--batch``, each checked
    (one line naming the entry, the key and the value otherwise)."""
    if not args.batch:
        return [{"submission": s, "exercises": None} for s in (args.submission or [str(EXERCISES_DIR)])]
    try:
        jobs = json.loads(Path(args.batch).read_text())
    except (OSError, ValueError) as err:
        parser.error(f"--batch {args.batch}: {err}")
    if not isinstance(jobs, list) or not jobs:
        parser.error(f"--batch {args.batch}: expected a JSON list of {{\"submission\": DIR, ...}}, one per submission")
    for n, job in enumerate(jobs, 1):
        where = f"--batch {args.batch}, entry {n}"
        if not isinstance(job, dict):
            parser.error(f"{where}: expected an object {{\"submission\": DIR, ...}}, got {printable(repr(job), 80)}")
        unknown = sorted(set(job) - set(BATCH_KEYS))
        if unknown:
            parser.error(f"{where}: unknown key {printable(repr(unknown[0]), 80)} (the keys: "
                         + ", ".join(f"{k}: {what}" for k, what in BATCH_KEYS.items()) + ")")
        folder = job.get("submission")
        if not isinstance(folder, str) or not folder or "\0" in folder:
            parser.error(f"{where}: \"submission\" must be the path of a folder, got {printable(repr(folder), 80)}")
        ids = job.get("exercises")
        if ids is not None and not (isinstance(ids, list) and all(isinstance(i, str) for i in ids)):
            parser.error(f"{where}: \"exercises\" must be a list of exercise IDs like [\"2.1\", \"2.2\"] or null "
                         f"(all), got {printable(json.dumps(ids), 80)}")
        for key in ("time_limit", "submission_time"):
            if job.get(key) is not None and not _seconds(job[key]):
                parser.error(f"{where}: \"{key}\" must be a positive number of seconds, got "
                             f"{printable(json.dumps(job[key]), 80)}")
    return jobs


class ReportFile:
    """The ``--json`` file, made ready before grading starts: a new file created now in its
    folder (which proves the folder writable), filled and moved over ``path`` at the end -- a
    link at ``path`` is replaced, never followed. :class:`ValueError` with the reason when it
    cannot be written."""

    def __init__(self, path):
        self.given, self.path = str(path), Path(path).absolute()
        if os.path.isdir(self.path) and not os.path.islink(self.path):
            raise ValueError(f"--json {self.given}: this is a folder: give the path of a file to write")
        if not self.path.parent.is_dir():
            raise ValueError(f"--json {self.given}: the folder {self.path.parent} does not exist")
        try:
            self.fd, self.tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.", suffix=".tmp")
        except OSError as err:
            raise ValueError(f"--json {self.given}: cannot write in the folder {self.path.parent} "
                             f"({err.strerror})") from None

    def write(self, payload) -> None:
        """Fill the file and move it over the report's path; OSError (the file is kept at
        ``self.tmp``) when the move fails."""
        with os.fdopen(self.fd, "w") as fh:
            self.fd = None
            fh.write(json.dumps(payload, indent=2) + "\n")
        os.chmod(self.tmp, 0o644 & ~_umask())
        os.replace(self.tmp, self.path)
        self.tmp = None

    def discard(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        if self.tmp is not None and os.path.exists(self.tmp):
            os.unlink(self.tmp)
        self.tmp = None


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
        description="Grade exercises with the hidden tests (instructors). Every submission is first copied, as "
                    "bytes, into the grader's own folder (a folder that is or passes through a symbolic link is "
                    "refused); then each of its exercises runs in a sandboxed process of its own, and the scores "
                    "are computed here. Bounds: --time-limit per exercise, --submission-time per submission.",
        epilog=_epilog())
    parser.add_argument("selectors", nargs="*", metavar="NN",
                        help="notebooks (01 ... 08, 10, 11) or exercise IDs (2.2); default: all")
    parser.add_argument("--submission", action="append", metavar="DIR",
                        help="a folder laid out like exercises/ (default: exercises/); repeat to grade several")
    parser.add_argument("--json", metavar="FILE",
                        help="write the report(s) as JSON (checked writable before grading starts)")
    parser.add_argument("--time-limit", type=_positive_seconds, default=DEFAULT_TIME_LIMIT, metavar="S",
                        help=f"seconds of the learner's time per exercise (default {DEFAULT_TIME_LIMIT:g})")
    parser.add_argument("--submission-time", type=_positive_seconds, default=DEFAULT_SUBMISSION_TIME, metavar="S",
                        help="wall seconds for all the exercises of one submission together, from the start of "
                             f"its first (default {DEFAULT_SUBMISSION_TIME:g}): once spent, its remaining "
                             "exercises score zero, with the reason")
    parser.add_argument("--batch", metavar="FILE",
                        help="a JSON list of {\"submission\": DIR, \"exercises\": [IDs] or null, "
                             "\"time_limit\": S, \"submission_time\": S}: grade them all in one run "
                             "(used by the tests)")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), metavar="N",
                        help="exercises graded at the same time (default: 2, or 1 on one core)")
    parser.add_argument("--trust-submissions", action="store_true",
                        help="grade without the sandbox (no bubblewrap here): for your own solutions only")
    parser.add_argument("--update-manifest", action="store_true",
                        help="record the hashes of the grader's files, then exit")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs must be at least 1, got {args.jobs}")
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
    try:
        report_file = ReportFile(args.json) if args.json else None
    except ValueError as err:
        parser.error(printable(str(err), 600))
    try:
        return _grade(args, parser, jobs, report_file, bytecode)
    finally:
        if report_file is not None:
            report_file.discard()


def _grade(args, parser, jobs, report_file, bytecode) -> int:
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
            print(f"{report['score']:>4}/{report['max_score']:<4} {printable(jobs[n]['submission'], 400)}", flush=True)
        else:
            if n:
                print()
            print_report(report)

    # every path of the run is absolute before the judge leaves the working directory
    folders = [Path(job["submission"]).absolute() for job in jobs]
    back = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
    try:
        with tempfile.TemporaryDirectory(prefix="vit-scratch-grade-") as tmp:
            os.chmod(tmp, 0o700)
            os.chdir(tmp)                   # never the checkout while a submission is read
            own_bytecode = bytecode or Path(tmp) / "bytecode"
            tag = os.environ.get("VIT_SCRATCH_GRADER_RUN")       # every process of the run carries it
            grader = Grader(Path(tmp) / "run", trusted=args.trust_submissions,
                            env={"VIT_SCRATCH_GRADER_RUN": tag} if tag else None,
                            private=[Path(tmp), *([Path(bytecode)] if bytecode else [])])
            try:
                grader.start(["torch"] if args.trust_submissions else ["torch", "scipy", "numpy"])
                registry = load_registry(own_bytecode)
                ids_all = select_exercises(registry, args.selectors)
                batch = []
                for n, (job, folder) in enumerate(zip(jobs, folders), 1):
                    ids = job.get("exercises") or ids_all
                    unknown = [i for i in ids if i not in registry]
                    if unknown:
                        parser.error(f"--batch {args.batch}, entry {n}: unknown exercise "
                                     f"{printable(repr(unknown[0]), 80)} (IDs like \"2.1\")")
                    batch.append((folder, ids, float(job.get("time_limit") or args.time_limit),
                                  float(job.get("submission_time") or args.submission_time)))
                with integrity.private_bytecode(own_bytecode):
                    grader.prepare([registry[i] for _, ids, _, _ in batch for i in ids])
                try:
                    reports = grade_batch(grader, registry, batch, workers=args.jobs, on_report=show,
                                          before_each=before_each)
                except Changed:
                    print("grade: the grader's files changed during grading; stopping (no report written)",
                          file=sys.stderr)
                    return 2
            finally:
                grader.close()
    finally:
        os.fchdir(back)
        os.close(back)
    if report_file is not None:
        payload = reports[0] if len(reports) == 1 and not args.batch else reports
        try:
            report_file.write(payload)
        except OSError as err:
            print(f"grade: could not move the report to {printable(report_file.given, 400)} ({err.strerror}); "
                  f"it is in {report_file.tmp}", file=sys.stderr)
            report_file.tmp = None                              # kept for the instructor
            return 1
    return 0
