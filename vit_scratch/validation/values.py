"""Checks of single values: ints, bools, rates, sizes -- the building blocks of the others.

Each returns the value, normalised (a NumPy integer becomes a Python ``int``, ``224`` becomes
``(224, 224)``), or raises a ``ValueError`` that names the parameter and the value.
"""
from __future__ import annotations

import math
import numbers
from typing import Sequence


def describe_value(value, show_type: bool = False) -> str:
    """``'False' (str)``: the value and, where its type is the surprise, the type."""
    if (show_type or isinstance(value, (bool, str)) or value is None
            or not isinstance(value, numbers.Number)):
        return f"{value!r} ({type(value).__name__})"
    return repr(value)


def _is_int(value) -> bool:
    """Python or NumPy integers; never bools (``True`` is an ``int`` in Python)."""
    return isinstance(value, numbers.Integral) and not _is_bool(value)


def _is_bool(value) -> bool:
    return isinstance(value, bool) or (type(value).__name__ in ("bool_", "bool")
                                       and type(value).__module__ == "numpy")


def to_2tuple(value, name: str) -> tuple[int, int]:
    """``224 -> (224, 224)``, ``(224, 160) -> (224, 160)``; anything else is a ``ValueError``."""
    if _is_int(value):
        pair = (int(value), int(value))
    elif (isinstance(value, Sequence) and not isinstance(value, str) and len(value) == 2
          and all(_is_int(v) for v in value)):
        pair = (int(value[0]), int(value[1]))
    else:
        raise ValueError(f"{name} must be an int or a pair (H, W) of ints, got {describe_value(value)}")
    if min(pair) <= 0:
        raise ValueError(f"{name} must be positive, got {value!r}")
    return pair


def _show(pair: tuple[int, int]):
    """A square size reads as one number (``225``), a rectangle as a pair (``(224, 160)``)."""
    return pair[0] if pair[0] == pair[1] else pair


def check_int(value, name: str, minimum: int | None = 1, maximum: int | None = None) -> int:
    """``value`` as an ``int`` if it is an integer (Python or NumPy, not a bool, not ``4.0``)
    in ``[minimum, maximum]``; else a ``ValueError`` naming ``name`` and the value."""
    if minimum == 1 and maximum is None:
        expected = "a positive int"
    elif maximum is None:
        expected = f"an int >= {minimum}" if minimum is not None else "an int"
    else:
        expected = f"an int in [{minimum}, {maximum}]"
    if not _is_int(value):
        raise ValueError(f"{name} must be {expected}, got {describe_value(value, show_type=True)}")
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise ValueError(f"{name} must be {expected}, got {value!r}")
    return int(value)


def check_positive(value, name: str) -> int:
    """A positive ``int`` (``ValueError`` otherwise); the shape fields of every config."""
    return check_int(value, name, 1)


def check_bool(value, name: str) -> bool:
    """``True`` or ``False`` (or a NumPy bool).  ``'False'`` is refused: it is a truthy string."""
    if not _is_bool(value):
        raise ValueError(f"{name} must be True or False, got {describe_value(value, show_type=True)}")
    return bool(value)


def check_float(value, name: str, low: float | None = None, high: float | None = None,
                low_open: bool = False, high_open: bool = False) -> float:
    """A finite real number (ints accepted; bools, strings, NaN and inf refused) in the
    interval ``[low, high]`` (``(low, ...`` with ``low_open``, ``..., high)`` with ``high_open``).
    Returns it as a Python ``float``."""
    if low == 0 and low_open and high is None:
        kind, interval = "a positive number", "positive"
    elif low is None and high is None:
        kind, interval = "a finite number", "finite"
    else:
        interval = (f"in {'(' if low_open else '['}{'-inf' if low is None else f'{low:g}'}, "
                    f"{'inf' if high is None else f'{high:g}'}{')' if high_open else ']'}")
        kind = f"a number {interval}"
    if _is_bool(value) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be {kind}, got {describe_value(value)}")
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    too_low = low is not None and (number <= low if low_open else number < low)
    too_high = high is not None and (number >= high if high_open else number > high)
    if too_low or too_high:
        raise ValueError(f"{name} must be {interval}, got {value!r}")
    return number


def check_probability(value, name: str) -> float:
    """A dropout-like rate in ``[0, 1)`` (1 would drop everything)."""
    return check_float(value, name, 0.0, 1.0, high_open=True)


def check_positive_float(value, name: str) -> float:
    return check_float(value, name, 0.0, None, low_open=True)


def check_choice(value, name: str, choices: Sequence) -> object:
    if value not in tuple(choices):
        raise ValueError(f"{name} must be one of {tuple(choices)!r}, got {describe_value(value)}")
    return value
