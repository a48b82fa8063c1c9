"""What the hidden tests are written with: exercises, scored parts, and the learner's code at a
distance.

A hidden test (``exercises/hidden/hNN_*.py``) registers itself with :func:`exercise` and gets an
:class:`ExerciseRun`. It runs in the judge's process; the learner's code does not. Its handles
on the learner's code -- :meth:`ExerciseRun.fn` for a function, :meth:`ExerciseRun.cls` for an
``nn.Module`` class -- send each call's inputs to the exercise's own process
(:mod:`exercises.runner`) and get back outputs: arrays, tensors and plain values. The expected
values, the references and the points stay here.

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
* **Forbidden calls.** Each exercise names what it may not call (``forbid``: ``vit_scratch``'s
  reference, ``torch`` in a NumPy exercise, ``F.interpolate`` where the exercise is to write it)
  and what it may (``allow``). The child's profiler enforces it; a call scores zero for the
  whole exercise with the reason written here.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable


from exercises import runner
from exercises.feedback import Fail, error_type
from exercises.session import ChildGone


class NotDone(BaseException):
    """The learner's code raised NotImplementedError: the exercise is not attempted yet."""


class Disqualified(BaseException):
    """Zero for the whole exercise (forbidden call, sys.exit ...), with the reason."""


class LearnerError(Exception):
    """An exception of the learner's code whose type is not one of Python's own."""


_BUILTIN_ERRORS = {cls.__name__: cls for cls in (
    ValueError, TypeError, IndexError, KeyError, RuntimeError, AttributeError, ZeroDivisionError,
    AssertionError, RecursionError, MemoryError, OverflowError, FloatingPointError, ArithmeticError,
    LookupError, NameError, UnboundLocalError, UnicodeError, OSError, NotImplementedError,
    StopIteration, ImportError, ModuleNotFoundError)}


def _clean(text, limit: int = 160) -> str:
    """Text from the child, safe to print: printable characters, one line, bounded."""
    text = text if isinstance(text, str) else ""
    return re.sub(r"[^\x20-\x7e\u00a0-\uffff]", "?", text.replace("\n", " "))[:limit]


def rebuild_error(head: dict) -> Exception:
    """The learner's exception, as an instance of the nearest builtin type (so that
    ``expect_error(ValueError, ...)`` works), with its type name and place attached."""
    bases = head.get("bases") if isinstance(head.get("bases"), list) else []
    cls = LearnerError
    for name in bases:
        if isinstance(name, str) and name in _BUILTIN_ERRORS:
            cls = _BUILTIN_ERRORS[name]
            break
    message = _clean(head.get("message"), 300)
    err = cls.__new__(cls)
    Exception.__init__(err, message)
    err.learner_type = _clean(head.get("type"), 60) or cls.__name__
    err.learner_where = _clean(head.get("where"), 80)
    return err


# ---- the learner's code, at a distance -----------------------------------------------------------

class Call:
    """A call of the learner's code, to be run later in the child (nested calls allowed:
    ``merge.later(split.later(x, 2))``)."""

    def __init__(self, target: dict, args, kwargs, no_grad: bool = False):
        self.target, self.args, self.kwargs, self.no_grad = target, tuple(args), dict(kwargs), no_grad

    def spec(self, blobs: list) -> dict:
        return {"target": self.target, "args": _encode(list(self.args), blobs),
                "kwargs": _encode(dict(self.kwargs), blobs), "no_grad": self.no_grad}


def _encode(value, blobs):
    import torch

    if isinstance(value, Call):
        return {"call": value.spec(blobs)}
    if isinstance(value, RemoteModule):
        return {"handle": value.handle}
    if isinstance(value, (list, tuple)) and any(isinstance(v, (Call, RemoteModule, list, tuple, dict))
                                                for v in value):
        return {"tuple" if isinstance(value, tuple) else "list": [_encode(v, blobs) for v in value]}
    if isinstance(value, dict) and any(isinstance(v, (Call, RemoteModule)) for v in value.values()):
        return {"dict": [[runner.encode(k, blobs, torch=torch), _encode(v, blobs)] for k, v in value.items()]}
    return runner.encode(value, blobs, torch=torch, limit=1 << 40)


class Remote:
    """The exercise's process, as the hidden test sees it."""

    def __init__(self, child):
        self.child = child

    def _ask(self, header: dict, blobs=()):
        head, got = self.child.request(header, blobs)
        status = head["status"]
        if status == "ok":
            return head, got
        if status == "raised":
            raise rebuild_error(head)
        if status == "notdone":
            raise NotDone(f"raises NotImplementedError({_clean(head.get('message'), 120)!r})")
        if status == "exit":
            raise Disqualified(f"called sys.exit({_clean(head.get('message'), 40)}) (or exit()/quit()): "
                               "never exit from an exercise function")
        if status == "toolarge":
            raise Fail(f"the result is too large to send back (over {runner.MAX_MESSAGE >> 20} MiB, "
                       "or nested too deeply)")
        raise ChildGone("protocol error", f"zero: an answer with status {status!r} to a call")

    def _value(self, node, blobs):
        import torch

        try:
            return runner.decode(node, blobs, torch=torch, strict=True)
        except runner.ProtocolError as err:
            raise ChildGone("protocol error", f"zero: a malformed result ({err})") from None

    def import_module(self, module: str, sources: dict) -> str | None:
        """Import the learner's module in the child; None, or the import problem in words."""
        head, _ = self.child.request({"op": "import", "module": module, "sources": sources})
        if head["status"] == "ok":
            return None
        if head["status"] != "import":
            raise ChildGone("protocol error", "zero: an unexpected answer to the import")
        inner = head.get("error") if isinstance(head.get("error"), dict) else {}
        kind = inner.get("status")
        if kind == "exit":
            return f"{module}.py calls sys.exit({_clean(inner.get('message'), 40)}) when imported"
        if kind == "notdone":
            return f"importing {module}.py raised NotImplementedError"
        if kind == "raised":
            err = rebuild_error(inner)
            where = f" ({err.learner_where})" if err.learner_where else ""
            return f"importing {module}.py failed: {err.learner_type}: {str(err)[:160]}{where}"
        return _clean(head.get("message"), 300) or f"importing {module}.py failed"

    def call(self, call: Call, keep: bool = False):
        blobs = []
        head, got = self._ask({"op": "call", "call": call.spec(blobs), "keep": keep}, blobs)
        if keep:
            handle = head.get("handle")
            if type(handle) is not int:
                raise ChildGone("protocol error", "zero: a malformed answer to a constructor")
            return handle, head.get("module") is True
        return self._value(head.get("value"), got)

    def steps(self, call: Call) -> int:
        blobs = []
        head, _ = self._ask({"op": "steps", "call": call.spec(blobs)}, blobs)
        steps = head.get("steps")
        if type(steps) is not int or steps < 0:
            raise ChildGone("protocol error", "zero: a malformed step count")
        return steps

    def memory(self, call: Call) -> int:
        blobs = []
        head, _ = self._ask({"op": "memory", "call": call.spec(blobs)}, blobs)
        peak = head.get("peak")
        if type(peak) is not int or peak < 0:
            raise ChildGone("protocol error", "zero: a malformed memory reading")
        return peak

    def grad(self, call: Call, wrt):
        blobs = []
        head, got = self._ask({"op": "grad", "call": call.spec(blobs), "wrt": list(wrt)}, blobs)
        value = self._value(head.get("value"), got)
        grads = self._value(head.get("grads"), got) if head.get("grads") is not None else None
        return value, grads

    def module(self, handle: int, action: str, **payload):
        blobs = []
        header = {"op": "module", "handle": handle, "action": action}
        for key, value in payload.items():
            header[key] = _encode(value, blobs)
        head, got = self._ask(header, blobs)
        return self._value(head["value"], got) if "value" in head else None


class RemoteFunction:
    """The learner's function ``name``: call it like the function; ``.later(...)`` makes a
    :class:`Call` for the loop and memory checks; ``.with_grad(...)`` runs a backward pass."""

    def __init__(self, remote: Remote, name: str):
        self.remote, self.__name__ = remote, name

    def later(self, *args, **kwargs) -> Call:
        return Call({"attr": self.__name__}, args, kwargs)

    def __call__(self, *args, **kwargs):
        return self.remote.call(self.later(*args, **kwargs))

    def with_grad(self, *args, wrt=(0,), **kwargs):
        """(output, gradients of output.sum() with respect to the arguments ``wrt``)."""
        return self.remote.grad(self.later(*args, **kwargs), wrt)


class RemoteClass:
    """The learner's ``nn.Module`` class ``name``: calling it builds one in the child."""

    def __init__(self, remote: Remote, name: str):
        self.remote, self.name = remote, name

    def __call__(self, *args, **kwargs) -> "RemoteModule":
        handle, is_module = self.remote.call(Call({"attr": self.name}, args, kwargs), keep=True)
        if not is_module:
            raise Fail(f"{self.name}(...) did not build an nn.Module")
        return RemoteModule(self.remote, handle)


class RemoteModule:
    """One of the learner's modules, living in the child. The methods the hidden tests use:
    forward (call it), ``state_dict``, ``to``, ``load_state_dict``, ``eval``, ``train``,
    ``layer_norm_eps`` and ``dead_parameters`` (the parameters no gradient reaches)."""

    def __init__(self, remote: Remote, handle: int):
        self.remote, self.handle = remote, handle

    def later(self, x) -> Call:
        return Call({"handle": self.handle, "method": None}, (x,), {}, no_grad=True)

    def __call__(self, x):
        return self.remote.call(self.later(x))

    def state_dict(self) -> dict:
        sd = self.remote.module(self.handle, "state_dict")
        if not isinstance(sd, dict) or not all(isinstance(k, str) for k in sd):
            raise Fail("state_dict() must return a mapping from names to tensors")
        return sd

    def to(self, dtype):
        self.remote.module(self.handle, "to", dtype=dtype)
        return self

    def load_state_dict(self, state: dict, strict: bool = True):
        assert strict
        self.remote.module(self.handle, "load_state_dict", state=state)

    def eval(self):
        self.remote.module(self.handle, "eval")
        return self

    def train(self):
        self.remote.module(self.handle, "train")
        return self

    def layer_norm_eps(self) -> list:
        eps = self.remote.module(self.handle, "layer_norm_eps")
        return eps if isinstance(eps, list) else []

    def dead_parameters(self, x) -> list[str]:
        """The parameters whose gradient is missing, not finite or zero after a backward pass
        of a weighted sum of forward(x) (in train mode)."""
        got = self.remote.module(self.handle, "param_grads", x=x)
        if not isinstance(got, list) or not all(isinstance(p, tuple) and len(p) == 2 for p in got):
            raise Fail("could not read the parameters' gradients")
        return [_clean(name, 60) for name, dead in got if dead is not False]


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
                result.status, result.message = "failed", str(err)
            except RecursionError as err:
                result.status, result.message = "failed", "RecursionError: infinite recursion?" + _at(err)
            except MemoryError as err:
                result.status, result.message = ("failed", "MemoryError: the code needs far too much memory"
                                                 + _at(err))
            except Exception as err:  # noqa: BLE001 - an error inside the learner's code
                result.status, result.message = "failed", describe(err)
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
    "tracer": "switches off or replaces the grader's profiler or tracer ({detail})",
    "frames": "reads the interpreter's frames ({detail}): graded code may not inspect frames or tracebacks",
    "code": "builds, reads or swaps code objects ({detail})",
    "compile": "compiles or runs new code ({detail}); exec, eval, compile, dataclasses and namedtuple "
               "are not allowed in graded code",
    "thread": "starts a thread ({detail})",
    "process": "starts, signals or detaches a process ({detail})",
    "signal": "sends or handles a signal ({detail})",
    "ctypes": "uses ctypes ({detail})",
    "write": "writes to the file system ({detail})",
    "read": "reads the hidden tests or the solutions ({detail})",
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
    detail = _clean(detail, 120)
    if kind == "forbidden":
        index, _, name = detail.partition("|")
        prefix = spec.forbid[int(index)] if index.isdigit() and int(index) < len(spec.forbid) else None
        if prefix is None:
            return "zero: a forbidden call"
        reason = spec.reasons.get(prefix, "calls {name}, which this exercise does not allow")
        return "zero: " + reason.format(name=name or prefix)
    text = RULES.get(kind)
    if text is None:
        return "zero: the grader's guard stopped the exercise"
    return "zero: " + text.format(detail=detail)
