"""Comparisons that fail with one short line of feedback -- shared by the visible checks and the
hidden tests.

:func:`close` compares arrays and says *what* differs (shape, dtype, NaN, the largest
difference and where); when the learner's result equals a known wrong answer
(``mistakes=[(wrong_value, "did you scale after the softmax?")]``) it names that mistake
instead. ``mistakes`` may also be a function that returns that list: it is called only when the
result is wrong, so a correct answer costs no wrong answer's computation. :func:`equal` does the
same for plain values, :func:`expect_error` for the errors an exercise must raise. Nothing here
runs the learner's code by itself.
"""
from __future__ import annotations

import math
import os
import traceback
from typing import Callable

import numpy as np


_HERE = os.path.dirname(os.path.realpath(__file__)) + os.sep   # exercises/: the learner's files are exNN_*.py


class Fail(Exception):
    """A check failed. The message is the feedback (one or two short lines); ``diagnosed``
    when it names a known mistake (then a generic hint would only distract)."""

    diagnosed = False


def _mistake(what: str, message: str) -> Fail:
    err = Fail(f"{what}: {message}")
    err.diagnosed = True
    return err


def _fmt(value, digits: int = 4) -> str:
    value = float(value)
    if value == 0 or math.isnan(value) or math.isinf(value):
        return str(value)
    return f"{value:.{digits}g}"


def type_name(value) -> str:
    """What the learner returned, in words ('a list', 'an Opaque' becomes its own type name)."""
    name = getattr(value, "type_name", None)          # an output that did not travel (wire.Opaque)
    return name if isinstance(name, str) else type(value).__name__


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
            arr = np.asarray(value)
        except ValueError as err:
            raise Fail(f"{what}: could not read the result as an array ({err})") from None
        if arr.dtype == object:
            raise Fail(f"{what}: could not read the result as an array of numbers")
        return arr
    raise Fail(f"{what}: expected an array, got {type_name(value)}")


def _matches(got, expected, atol, rtol) -> bool:
    got = np.asarray(got, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    if got.shape != expected.shape:
        return False
    with np.errstate(invalid="ignore"):
        return bool(np.all((np.abs(got - expected) <= atol + rtol * np.abs(expected))
                           | ((got == expected) & np.isfinite(expected))
                           | (np.isnan(got) & np.isnan(expected))))


def _right(got, expected, atol, rtol) -> bool:
    """``got`` equals ``expected`` (so that no known mistake can be the answer)."""
    if got.shape != expected.shape:
        return False
    if got.dtype == np.bool_ or expected.dtype == np.bool_:
        return got.dtype == expected.dtype and np.array_equal(got, expected)
    try:
        return _matches(got, expected, atol, rtol)
    except (TypeError, ValueError):
        return False


def close(got, expected, what: str, atol: float = 1e-10, rtol: float = 0.0, mistakes=(),
          dtype=None) -> None:
    """Fail with a one-line message unless ``got`` equals ``expected`` within tolerance.

    mistakes: (wrong_value, message) pairs, or a function that returns them (called only when
    ``got`` is not right); when ``got`` matches a wrong value the message names the mistake.
    dtype: when given, the result must have exactly this dtype.
    """
    got = as_array(got, what)
    expected = np.asarray(expected)
    if callable(mistakes):
        mistakes = () if _right(got, expected, atol, rtol) else mistakes()
    for wrong, message in mistakes:
        wrong = np.asarray(wrong)
        if wrong.shape == got.shape and wrong.dtype != object and np.issubdtype(got.dtype, np.number) \
                and _matches(got, wrong, max(atol, 1e-7) * 10, 1e-5) and not _matches(got, expected, atol, rtol):
            raise _mistake(what, message)
        if wrong.shape == got.shape and got.dtype == np.bool_ and wrong.dtype == np.bool_ \
                and np.array_equal(got, wrong) and not np.array_equal(got, expected):
            raise _mistake(what, message)
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


def _same(a, b) -> bool:
    """a == b for plain values, False where the comparison is not a plain yes or no."""
    try:
        result = a == b
        return result if isinstance(result, bool) else bool(np.all(result)) and np.shape(a) == np.shape(b)
    except (TypeError, ValueError):
        return False


def equal(got, expected, what: str, mistakes=()) -> None:
    """Exact equality for plain values (ints, floats, tuples); ``mistakes`` as in :func:`close`."""
    if callable(mistakes):
        mistakes = () if _same(got, expected) else mistakes()
    for wrong, message in mistakes:
        if _same(got, wrong) and not _same(got, expected):
            raise _mistake(what, message)
    if not _same(got, expected):
        plain = isinstance(got, (int, float, bool, str, tuple, list, type(None))) and not hasattr(got, "type_name")
        shown = repr(got) if plain else type_name(got)
        raise Fail(f"{what}: expected {expected!r}, got {shown[:120]}")


def expect_error(error, call: Callable, what: str, mention: str | None = None) -> None:
    """The call must raise ``error`` (and name ``mention`` in its message, when given)."""
    try:
        call()
    except error as err:
        if mention is not None and mention not in str(err):
            raise Fail(f"{what}: raised {error.__name__}, but its message should name {mention} "
                       f"(got {str(err)[:80]!r})") from None
        return
    except (Fail, NotImplementedError):
        raise
    except Exception as err:  # noqa: BLE001 - any other error is the learner's
        raise Fail(f"{what}: expected {error.__name__}, got {error_type(err)}: "
                   f"{str(err)[:80]}") from None
    raise Fail(f"{what}: expected {error.__name__}, nothing was raised")


def error_type(err: BaseException) -> str:
    """The name of the learner's exception type (the judge rebuilds it from the child's message)."""
    name = getattr(err, "learner_type", None)
    return name if isinstance(name, str) else type(err).__name__


def describe_error(err: BaseException, root: str) -> str:
    """'ValueError: msg (ex02_self_attention.py, line 41)' -- the innermost frame of a file
    under ``root`` (the learner's folder), or the place the judge was told."""
    where = getattr(err, "learner_where", None)
    where = f" ({where})" if isinstance(where, str) and where else ""
    if not where:
        root = os.path.realpath(root) + os.sep
        for frame in reversed(traceback.extract_tb(err.__traceback__)):
            path = os.path.realpath(frame.filename)
            if path.startswith(root) and not path.startswith(_HERE) or \
                    path.startswith(_HERE) and os.path.basename(path).startswith("ex"):
                where = f" ({os.path.basename(frame.filename)}, line {frame.lineno})"
                break
    message = str(err).strip().splitlines()[0][:160] if str(err).strip() else ""
    kind = error_type(err)
    return f"{kind}: {message}{where}" if message else f"{kind}{where}"
