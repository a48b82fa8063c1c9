"""What the hidden tests are written with: exercises, scored parts, the registry.

A hidden test (``exercises/grader/hidden/hNN_*.py``) registers itself with :func:`exercise` and
gets an :class:`ExerciseRun`. It runs in the judge's process; the learner's code does not. Its
handles on the learner's code -- :meth:`ExerciseRun.fn` for a function, :meth:`ExerciseRun.cls`
for an ``nn.Module`` class -- send each call's inputs to the exercise's own process
(:mod:`.remote`) and get back outputs. The expected values, the references and the points stay
here.

* **Parts.** An exercise is a list of parts worth points (worked example, random shapes,
  edge cases, the loop check ...). A part passes or scores zero with one short message
  (:mod:`exercises.feedback`). The points come from this table, never from the child.
* **The loop check.** :meth:`ExerciseRun.no_loops` asks the child to count the bytecode
  instructions its own code executes for one call (``sys.settrace`` with opcode events, for the
  submission's code objects only). Vectorized code executes the same instructions at any size;
  a loop over tokens executes a few more per extra token. Running the function at two sizes of
  one axis (say 3 and 19 tokens) and comparing the counts finds loops, comprehensions,
  recursion, ``np.vectorize``/``map`` over the learner's own functions -- without timing
  anything, so a busy machine cannot change the verdict. A loop over something that does not
  change between the two runs (the blocks of a rollout, the k×k kernel offsets, CRPE's three
  window sizes) is not flagged. Known blind spot: iteration done inside C over built-in
  functions (``map(np.dot, rows_a, rows_b)``) executes no bytecode in the learner's code.
* **What an exercise may not use.** Each exercise names the prefixes it may not use
  (``forbid``: ``vit_scratch``'s reference, ``torch`` in a NumPy exercise, ``einops`` where the
  exercise is the reshape) and the library functions it may (``allow``). They are absent from
  the exercise's sandbox (:mod:`.views`): a call raises there, and scores zero for the whole
  exercise with the reason written here.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from exercises.feedback import Fail, error_type

__all__ = ["Disqualified", "ExerciseRun", "NotDone", "PartResult", "REGISTRY", "Spec", "disqualification",
           "exercise"]
from exercises.grader.remote import Call, Disqualified, NotDone, Remote, RemoteClass, RemoteFunction, clean, printable


# ---- one exercise being graded -------------------------------------------------------------------

@dataclass
class PartResult:
    name: str
    max_points: int
    points: int = 0
    message: str = ""
    status: str = "passed"  # passed | failed | skipped


@dataclass
class ExerciseRun:
    """What a hidden test gets: the learner's code at a distance, and ``part``."""

    spec: object
    remote: Remote
    parts: list = field(default_factory=list)

    def fn(self, name: str) -> RemoteFunction:
        return RemoteFunction(self.remote, name)

    def cls(self, name: str) -> RemoteClass:
        return RemoteClass(self.remote, name)

    def part(self, name: str, points: int, requires=()):
        """Decorator: run the function now as one scored part."""

        def run(check):
            result = PartResult(name, points)
            self.parts.append(result)
            missing = [r for r in requires if not self._passed(r)]
            if missing:
                result.status, result.message = "skipped", f"needs '{missing[0]}' to pass first"
                return check
            try:
                check()
                result.points = points
            except Fail as err:
                result.status, result.message = "failed", printable(str(err), 600)
            except RecursionError as err:
                result.status, result.message = "failed", "RecursionError: infinite recursion?" + _at(err)
            except MemoryError as err:
                result.status, result.message = ("failed", "MemoryError: the code needs far too much memory"
                                                 + _at(err))
            except Exception as err:  # noqa: BLE001 - an error inside the learner's code
                result.status, result.message = "failed", printable(describe(err), 600)
            return check

        return run

    def _passed(self, name: str) -> bool:
        return any(p.name == name and p.status == "passed" for p in self.parts)

    def steps(self, call: Call) -> int:
        return self.remote.steps(call)

    def peak_memory_mb(self, call: Call) -> float:
        """Peak memory (MiB) allocated by the call, NumPy arrays included (tracemalloc)."""
        return self.remote.memory(call) / 2**20

    def no_loops(self, points: int, make_call: Callable, axes: dict, requires=(), what="loop check"):
        """A part: ``make_call(**sizes)`` returns a :class:`Call` of the learner's code.

        axes: {"tokens": ({"n": 3}, {"n": 19}, 16), ...} -- the small and the large sizes of
        one axis, and how many more items the large one has. The learner's own code must run
        (almost) the same number of Python steps at both sizes.
        """

        @self.part(f"{what}: no Python loops over {', '.join(axes)}", points, requires)
        def _():
            for axis, (small, large, extra) in axes.items():
                steps_small = self.steps(make_call(**small))
                steps_large = self.steps(make_call(**large))
                if steps_large - steps_small >= 2 * extra:
                    raise Fail(f"a Python loop over {axis}? your code ran {steps_large - steps_small} "
                               f"more Python steps with {extra} more {axis} (vectorized code runs "
                               "the same number at any size)")

    def result(self) -> dict:
        score = sum(p.points for p in self.parts)
        max_score = sum(p.max_points for p in self.parts)
        if max_score != self.spec.points:
            raise RuntimeError(f"exercise {self.spec.id}: parts add up to {max_score}, "
                               f"declared {self.spec.points}")
        lines = [f"{p.name}: {p.message}" for p in self.parts if p.status != "passed"]
        return {"score": score, "max_score": max_score,
                "feedback": "\n".join(lines) if lines else "all checks passed",
                "parts": [vars(p) for p in self.parts]}


def _at(err) -> str:
    where = getattr(err, "learner_where", "")
    return f" ({where})" if where else ""


def describe(err: BaseException) -> str:
    """'ValueError: msg (ex02_self_attention.py, line 41)' for an error of the learner's code."""
    message = str(err).strip().splitlines()[0][:160] if str(err).strip() else ""
    kind = error_type(err)
    return (f"{kind}: {message}" if message else kind) + _at(err)


# ---- the registry of exercises -------------------------------------------------------------------

@dataclass
class Spec:
    id: str
    name: str
    module: str
    points: int
    run: Callable
    forbid: tuple = ()
    allow: tuple = ()
    reasons: dict = field(default_factory=dict)

    @property
    def notebook(self) -> str:
        return self.module[2:4]


REGISTRY: dict[str, Spec] = {}

LIBRARY = "calls {name}: the library's reference is not allowed here -- write your own"
REASONS = {
    "vit_scratch": LIBRARY,
    "timm": "calls {name}: timm is the test oracle, not allowed in exercises",
    "torch": "calls {name}: this is a NumPy exercise (no torch)",
    "einops": "calls {name}: this exercise asks for reshape/transpose without einops",
    "scipy": "calls {name}: this exercise asks you to write it in NumPy",
}


def exercise(id: str, name: str, module: str, points: int, forbid=("vit_scratch", "timm"),
             allow=(), reasons=None):
    """Register a hidden test: ``@exercise("2.1", "softmax", "ex02_self_attention", 10)``."""

    def register(run):
        all_reasons = dict(REASONS)
        for prefix in forbid:
            for key, text in REASONS.items():
                if prefix.startswith(key) and prefix not in all_reasons:
                    all_reasons[prefix] = text
        all_reasons.update(reasons or {})
        REGISTRY[id] = Spec(id, name, module, points, run, tuple(forbid), tuple(allow), all_reasons)
        return run

    return register


# What a disqualification says, by the kind the child reports.
RULES = {
    "tracer": "switches off or replaces the grader's tracer or hooks ({detail})",
    "frames": "reads the interpreter's frames ({detail}): graded code may not inspect frames or tracebacks",
    "code": "builds, reads or swaps code objects ({detail})",
    "compile": "compiles or runs new code ({detail}); exec, eval, compile, dataclasses and namedtuple "
               "are not allowed in graded code",
    "thread": "starts a thread ({detail})",
    "process": "starts, signals or detaches a process ({detail})",
    "signal": "sends or handles a signal ({detail})",
    "ctypes": "uses ctypes ({detail})",
    "write": "writes to the file system ({detail})",
    "gc": "searches the garbage collector's objects ({detail})",
    "import": "imports {detail}, which graded code may not use",
    "network": "opens a network connection ({detail})",
    "limits": "changes its resource limits ({detail})",
    "channel": "writes to or closes the grader's channel ({detail})",
    "recursion": "exhausted the recursion limit inside the grader's guard",
    "internal": "the grader's guard stopped the exercise",
}


def disqualification(spec: Spec, kind: str, detail: str) -> str:
    """The feedback of a disqualification reported by the child (its words are not trusted)."""
    text = RULES.get(kind if isinstance(kind, str) else "")
    if text is None:
        return "zero: the grader's guard stopped the exercise"
    return "zero: " + text.format(detail=clean(detail, 120))
