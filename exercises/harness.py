"""The machinery behind the hidden tests: scored parts, short feedback, and two guards.

Nothing here knows an answer; the hidden tests (instructors only) are written with it, and
``python -m exercises.grade`` runs each exercise in a child process of its own.

* **Parts.** An exercise is a list of parts worth points (worked example, random shapes,
  edge cases, the loop check ...). A part passes or scores zero with one short message.
* **Feedback.** :func:`close` compares arrays and says *what* differs in one line (shape,
  dtype, NaN, the largest difference and where), and when the learner's result equals a
  known wrong answer (``mistakes=[(wrong_value, "did you scale after the softmax?")]``) it
  names that mistake instead.
* **Forbidden calls.** :class:`Guard` watches every call the learner's code makes while a
  hidden test runs it (``sys.setprofile`` sees Python and C functions alike). Calling into a
  forbidden package -- ``vit_scratch``'s reference for the exercise, ``torch`` in a NumPy
  exercise, ``F.interpolate`` where the exercise is to write it -- scores zero for that
  exercise, however the function was imported or renamed. An allow-list lets through the
  helpers an exercise permits (and everything they call).
* **The loop check.** :func:`python_steps` counts the bytecode instructions executed in the
  learner's own files (``sys.settrace`` with opcode events, enabled only for frames whose
  code lives in the submission folder). Vectorized code executes the same instructions at any
  size; a loop over tokens executes a few more per extra token. Running the function at two
  sizes of one axis (say 3 and 19 tokens) and comparing the counts finds loops, comprehensions,
  recursion, ``np.vectorize``/``map`` over the learner's own functions -- without timing
  anything, so a busy machine cannot change the verdict. A loop over something that does not
  change between the two runs (the blocks of a rollout, the k×k kernel offsets, CRPE's three
  window sizes) is not flagged. Known blind spot: iteration done inside C over built-in
  functions (``map(np.dot, rows_a, rows_b)``) executes no bytecode in the learner's file.
"""
from __future__ import annotations

import math
import os
import sys
import tracemalloc
import traceback
from dataclasses import dataclass, field
from typing import Callable

import numpy as np


class Fail(Exception):
    """A check failed. The message is the feedback (one or two short lines)."""


class NotDone(BaseException):
    """The learner's code raised NotImplementedError: the exercise is not attempted yet."""


class Disqualified(BaseException):
    """Zero for the whole exercise (forbidden call, sys.exit ...), with the reason."""


# ---- short feedback ------------------------------------------------------------------------------

def _fmt(value, digits: int = 4) -> str:
    value = float(value)
    if value == 0 or math.isnan(value) or math.isinf(value):
        return str(value)
    return f"{value:.{digits}g}"


def as_array(value, what: str) -> np.ndarray:
    """The learner's result as a NumPy array (tensors are detached), or Fail."""
    try:
        import torch

        if isinstance(value, torch.Tensor):
            return value.detach().cpu().numpy()
    except ImportError:  # pragma: no cover - torch is a dependency
        pass
    if isinstance(value, (np.ndarray, np.generic, int, float, bool, list, tuple)):
        try:
            return np.asarray(value)
        except ValueError as err:
            raise Fail(f"{what}: could not read the result as an array ({err})") from None
    raise Fail(f"{what}: expected an array, got {type(value).__name__}")


def close(got, expected, what: str, atol: float = 1e-10, rtol: float = 0.0, mistakes=(),
          dtype=None) -> None:
    """Fail with a one-line message unless ``got`` equals ``expected`` within tolerance.

    mistakes: (wrong_value, message) pairs; when ``got`` matches a wrong value the message
    names the mistake. dtype: when given, the result must have exactly this dtype.
    """
    got = as_array(got, what)
    expected = np.asarray(expected)
    for wrong, message in mistakes:
        wrong = np.asarray(wrong)
        if wrong.shape == got.shape and _matches(got, wrong, max(atol, 1e-7) * 10, 1e-5) \
                and not _matches(got, expected, atol, rtol):
            raise Fail(f"{what}: {message}")
    if got.shape != expected.shape:
        raise Fail(f"{what}: expected shape {tuple(expected.shape)}, got {tuple(got.shape)}")
    if dtype is not None and got.dtype != np.dtype(dtype):
        raise Fail(f"{what}: expected dtype {np.dtype(dtype)}, got {got.dtype} "
                   "(keep the input's dtype)")
    if got.dtype == np.bool_ or expected.dtype == np.bool_:
        if got.dtype != expected.dtype:
            raise Fail(f"{what}: expected a {expected.dtype} array, got dtype {got.dtype}")
        if not np.array_equal(got, expected):
            bad = np.argwhere(got != expected)
            idx = tuple(int(i) for i in bad[0])
            raise Fail(f"{what}: {len(bad)} entries differ, first at index {idx} "
                       f"(expected {bool(expected[idx])}, got {bool(got[idx])})")
        return
    if not np.issubdtype(got.dtype, np.number):
        raise Fail(f"{what}: expected numbers, got dtype {got.dtype}")
    g, e = got.astype(np.float64), expected.astype(np.float64)
    if np.isnan(g).any() and not np.isnan(e).any():
        raise Fail(f"{what}: the result contains NaN ({int(np.isnan(g).sum())} of {g.size} entries)")
    if np.isinf(g).any() and not np.isinf(e).any():
        raise Fail(f"{what}: the result contains inf ({int(np.isinf(g).sum())} of {g.size} entries)")
    if g.size == 0 or _matches(g, e, atol, rtol):
        return
    err = np.abs(g - e)
    err = np.where(np.isnan(err), np.inf, err)
    idx = np.unravel_index(int(np.argmax(err)), err.shape)
    where = f" at index {tuple(int(i) for i in idx)}" if g.ndim else ""
    digits = 4 if err[idx] >= 1e-3 * max(abs(e[idx]), 1e-300) else 7
    raise Fail(f"{what}: max |got - expected| = {_fmt(err[idx])}{where} "
               f"(expected {_fmt(e[idx], digits)}, got {_fmt(g[idx], digits)})")


def _matches(got, expected, atol, rtol) -> bool:
    got = np.asarray(got, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    if got.shape != expected.shape:
        return False
    with np.errstate(invalid="ignore"):
        return bool(np.all((np.abs(got - expected) <= atol + rtol * np.abs(expected))
                           | ((got == expected) & np.isfinite(expected))
                           | (np.isnan(got) & np.isnan(expected))))


def equal(got, expected, what: str, mistakes=()) -> None:
    """Exact equality for plain values (ints, floats, tuples)."""
    for wrong, message in mistakes:
        if got == wrong and got != expected:
            raise Fail(f"{what}: {message}")
    if got != expected:
        raise Fail(f"{what}: expected {expected!r}, got {got!r}")


def expect_error(error, call: Callable, what: str, mention: str | None = None) -> None:
    """The call must raise ``error`` (and name ``mention`` in its message, when given)."""
    try:
        call()
    except error as err:
        if mention is not None and mention not in str(err):
            raise Fail(f"{what}: raised {error.__name__}, but its message should name {mention} "
                       f"(got {str(err)[:80]!r})") from None
        return
    except (NotDone, Disqualified, Fail):
        raise
    except Exception as err:  # noqa: BLE001 - any other error is the learner's
        raise Fail(f"{what}: expected {error.__name__}, got {type(err).__name__}: "
                   f"{str(err)[:80]}") from None
    raise Fail(f"{what}: expected {error.__name__}, nothing was raised")


# ---- forbidden calls -----------------------------------------------------------------------------

def _matches_prefix(name: str, prefixes) -> str | None:
    for p in prefixes:
        if name == p or name.startswith(p + "."):
            return p
    return None


class Guard:
    """Runs learner code under ``sys.setprofile`` and records the first forbidden call.

    forbid: dotted prefixes of callees ("vit_scratch", "torch", "scipy.special.softmax").
    allow:  dotted prefixes let through even when a forbid prefix matches (with everything
            they call in turn), e.g. "vit_scratch.numpy_nn.layers.layer_norm".
    """

    def __init__(self, forbid=(), allow=(), reasons=None):
        self.forbid, self.allow = tuple(forbid), tuple(allow)
        self.reasons = reasons or {}
        self.violation: str | None = None
        self._suspended = None
        self._depth = 0

    def _hook(self, frame, event, arg):
        if self._suspended is not None:
            if event == "return" and frame is self._suspended:
                self._suspended = None
            return
        if event == "call":
            module = frame.f_globals.get("__name__", "") or ""
            code = frame.f_code
            name = f"{module}.{getattr(code, 'co_qualname', code.co_name)}"  # co_qualname: 3.11+
        elif event == "c_call":
            module = getattr(arg, "__module__", None)
            if module is None:
                owner = getattr(arg, "__self__", None)
                module = type(owner).__module__ if owner is not None else ""
            name = f"{module}.{getattr(arg, '__qualname__', getattr(arg, '__name__', '?'))}"
        else:
            return
        if _matches_prefix(name, self.allow):
            if event == "call":
                self._suspended = frame
            return
        prefix = _matches_prefix(name, self.forbid)
        if prefix and self.violation is None:
            self.violation = self.reasons.get(prefix, f"calls {name}, which this exercise does not allow")
            self.violation = self.violation.format(name=name)

    def run(self, fn, *args, **kwargs):
        """Call ``fn`` under the guard; translate the learner's exits into our exceptions."""
        outermost = self._depth == 0
        self._depth += 1
        previous = sys.getprofile()
        if outermost:
            sys.setprofile(self._hook)
        try:
            return fn(*args, **kwargs)
        except NotImplementedError as err:
            raise NotDone(f"raises NotImplementedError({str(err)!r})") from None
        except SystemExit as err:
            raise Disqualified(f"called sys.exit({err.code!r}) (or exit()/quit()): never exit "
                               "from an exercise function") from None
        except KeyboardInterrupt:
            raise Disqualified("raised KeyboardInterrupt") from None
        finally:
            if outermost:
                sys.setprofile(previous)
            self._depth -= 1
            if outermost and self.violation is not None:
                reason, self.violation = self.violation, None
                raise Disqualified(reason)


# ---- loops and memory ----------------------------------------------------------------------------

_HERE = os.path.dirname(os.path.realpath(__file__))
_GRADER_FILES = {os.path.join(_HERE, f) for f in ("harness.py", "grade.py", "check.py", "checks.py",
                                                  "release.py", "test_visible.py", "__init__.py")}


def is_learner_file(filename: str, root: str) -> bool:
    """Is ``filename`` the learner's code: under the submission folder ``root`` (with a trailing
    separator), and not one of the grader's own files (the default submission is exercises/)?"""
    path = os.path.realpath(filename)
    return (path.startswith(root) and path not in _GRADER_FILES
            and not path.startswith(os.path.join(_HERE, "hidden") + os.sep))


def python_steps(call: Callable, root: str) -> int:
    """The number of bytecode instructions executed in the learner's files under ``root``
    during ``call()``."""
    root = os.path.realpath(root) + os.sep
    count = 0
    own_code = {}

    def local(frame, event, arg):
        nonlocal count
        if event == "opcode":
            count += 1
        return local

    def global_trace(frame, event, arg):
        code = frame.f_code
        mine = own_code.get(code)
        if mine is None:
            mine = own_code[code] = is_learner_file(code.co_filename, root)
        if mine:
            frame.f_trace_opcodes = True
            return local
        return None

    previous = sys.gettrace()
    sys.settrace(global_trace)
    try:
        call()
    finally:
        sys.settrace(previous)
    return count


def peak_memory_mb(call: Callable) -> float:
    """Peak memory (MiB) allocated during ``call()``, NumPy arrays included (tracemalloc)."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        call()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


# ---- one exercise being graded -------------------------------------------------------------------

@dataclass
class PartResult:
    name: str
    max_points: int
    points: int = 0
    message: str = ""
    status: str = "passed"  # passed | failed | skipped


def _copied(value):
    """A copy of the arrays a hidden test hands to learner code, so that code which modifies its
    inputs in place cannot change what the test compares with afterwards. (Tensors are cloned,
    which keeps them in the autograd graph.)"""
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, (list, tuple)):
        return type(value)(_copied(v) for v in value)
    if isinstance(value, dict):
        return {k: _copied(v) for k, v in value.items()}
    if type(value).__module__.startswith("torch") and hasattr(value, "clone"):
        return value.clone()
    return value


@dataclass
class ExerciseRun:
    """What a hidden test gets: the learner's module, guarded accessors, and ``part``."""

    spec: object
    module: object
    root: str                                   # the submission folder (for the loop check)
    parts: list = field(default_factory=list)

    def __post_init__(self):
        self.guard = Guard(self.spec.forbid, self.spec.allow, self.spec.reasons)

    # -- the learner's objects, guarded
    def fn(self, name: str) -> Callable:
        target = getattr(self.module, name, None)
        if target is None:
            raise Disqualified(f"{self.spec.module}.py has no {name}: keep the names of the stub")
        guard = self.guard

        def guarded(*args, **kwargs):
            args, kwargs = _copied(args), {k: _copied(v) for k, v in kwargs.items()}
            return guard.run(target, *args, **kwargs)

        guarded.__name__ = name
        return guarded

    def cls(self, name: str) -> Callable:
        """A factory for the learner's nn.Module class: construction and forward are guarded."""
        target = getattr(self.module, name, None)
        if target is None:
            raise Disqualified(f"{self.spec.module}.py has no {name}: keep the names of the stub")
        guard = self.guard

        def make(*args, **kwargs):
            obj = guard.run(target, *args, **kwargs)
            forward = getattr(obj, "forward", None)
            if forward is not None:
                object.__setattr__(obj, "forward", lambda *a, **k: guard.run(forward, *_copied(a), **k))
            return obj

        return make

    # -- scoring
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
            except (NotDone, Disqualified):
                raise
            except RecursionError:
                result.status, result.message = "failed", "RecursionError: infinite recursion?"
            except MemoryError:
                result.status, result.message = "failed", "MemoryError: the code needs far too much memory"
            except Exception as err:  # noqa: BLE001 - an error inside the learner's code
                result.status, result.message = "failed", describe_error(err, self.root)
            return check

        return run

    def _passed(self, name: str) -> bool:
        return any(p.name == name and p.status == "passed" for p in self.parts)

    def no_loops(self, points: int, make_call: Callable, axes: dict, requires=(), what="loop check"):
        """A part: ``make_call(**sizes)`` returns a zero-argument call of the learner's code.

        axes: {"tokens": ({"n": 3}, {"n": 19}, 16), ...} -- the small and the large sizes of
        one axis, and how many more items the large one has. The learner's own code must run
        (almost) the same number of Python steps at both sizes.
        """

        @self.part(f"{what}: no Python loops over {', '.join(axes)}", points, requires)
        def _():
            for axis, (small, large, extra) in axes.items():
                call_small, call_large = make_call(**small), make_call(**large)
                steps_small = python_steps(call_small, self.root)
                steps_large = python_steps(call_large, self.root)
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


def describe_error(err: BaseException, root: str) -> str:
    """'ValueError: msg (ex02_self_attention.py, line 41)' -- the learner's innermost frame."""
    root = os.path.realpath(root) + os.sep
    where = ""
    for frame in reversed(traceback.extract_tb(err.__traceback__)):
        if is_learner_file(frame.filename, root):
            where = f" ({os.path.basename(frame.filename)}, line {frame.lineno})"
            break
    message = str(err).strip().splitlines()[0][:160] if str(err).strip() else ""
    return f"{type(err).__name__}: {message}{where}" if message else f"{type(err).__name__}{where}"


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


def sort_key(exercise_id: str):
    major, minor = exercise_id.split(".")
    return int(major), int("".join(c for c in minor if c.isdigit()) or 0), minor
