"""The checks of a set of parameters -- a NumPy model's params, a checkpoint's tensors -- against
a model's ``{key: shape}`` table, and the messages they raise: every missing, unexpected,
mis-shaped and mis-typed key, and every key with NaN, infinite or implausible values, listed at
once.  ``vit_scratch.weights`` (checkpoint files) and the NumPy room's models (their params) use
them; like ``vit_scratch.validation`` this module imports neither NumPy nor PyTorch.
"""
from __future__ import annotations

import math
import pickle

#: The dtypes the NumPy room computes in (float16/bfloat16 checkpoints: state_dict_to_numpy).
PARAM_FLOAT_DTYPES = ("float32", "float64")
#: Larger parameter magnitudes are refused: no trained weight of these models comes near it,
#: while bytes overwritten in a file read as floats up to ±3e38 (or NaN), and give NaN logits.
MAX_ABS_PARAM = 1e6


def check_param_dtypes(dtypes: dict[str, str], what: str) -> str:
    """The NumPy room's parameter policy: every array is float32, or every array is float64
    (the model computes in that dtype).  ``dtypes`` maps each key to its dtype name.

    int, bool and complex arrays are refused (they would give garbage or complex logits), and
    so is a mix of float32 and float64 (one float64 array would silently turn the whole model
    into float64).  Returns the common dtype's name."""
    bad = {k: d for k, d in dtypes.items() if d not in PARAM_FLOAT_DTYPES}
    if bad:
        raise ValueError(mismatch_message(what, [], [], {}, mistyped={
            k: (d, " or ".join(PARAM_FLOAT_DTYPES)) for k, d in bad.items()}) + (
            "\n  (convert a state_dict with vit_scratch.state_dict_to_numpy, or cast the arrays "
            "with .astype(np.float32))"))
    kinds = sorted(set(dtypes.values()))
    if len(kinds) > 1:
        counts = {d: [k for k, v in dtypes.items() if v == d] for d in kinds}
        fewest = min(counts, key=lambda d: len(counts[d]))
        keys = counts[fewest]
        shown = ", ".join(keys[:8]) + (f", ... ({len(keys) - 8} more)" if len(keys) > 8 else "")
        raise ValueError(
            f"{what} mix dtypes: "
            + ", ".join(f"{len(counts[d])} {d}" for d in kinds)
            + f" arrays ({fewest}: {shown}); expected one dtype for every array (float32 for a "
            f"checkpoint, float64 for precision tests): cast them, e.g. "
            f"{{k: v.astype(np.float32) for k, v in params.items()}}"
        )
    return kinds[0] if kinds else "float32"


def bad_param_values(max_abs: dict[str, float]) -> dict[str, str]:
    """``max_abs`` maps each key to the largest ``|value|`` of its array (NaN if it holds a NaN)
    -> ``{key: what is wrong}`` for the keys that hold NaN, infinities or values beyond
    ``MAX_ABS_PARAM`` (damaged bytes, or a diverged training run)."""
    bad = {}
    for key, m in max_abs.items():
        if m != m:
            bad[key] = "NaN"
        elif m == math.inf:
            bad[key] = "inf"
        elif m > MAX_ABS_PARAM:
            bad[key] = f"|value| up to {m:.3g}"
    return bad


def check_param_values(max_abs: dict[str, float], what: str) -> None:
    """A ``ValueError`` naming every key of :func:`bad_param_values`."""
    bad = bad_param_values(max_abs)
    if bad:
        raise ValueError(mismatch_message(what, [], [], {}, bad_values=bad))


def param_mismatch(params: dict, expected: dict[str, tuple[int, ...]]):
    """``(missing, unexpected, misshaped)`` between a parameter dict and ``{key: shape}``;
    misshaped maps each key to ``(got, expected)``."""
    missing = [k for k in expected if k not in params]
    unexpected = [k for k in params if k not in expected]
    misshaped = {
        k: (tuple(params[k].shape), tuple(expected[k]))
        for k in expected
        if k in params and tuple(params[k].shape) != tuple(expected[k])
    }
    return missing, unexpected, misshaped


def check_params(
    params: dict, expected: dict[str, tuple[int, ...]], what: str
) -> None:
    """Compare a parameter dict with the expected ``{key: shape}``; list every problem at once."""
    missing, unexpected, misshaped = param_mismatch(params, expected)
    if missing or unexpected or misshaped:
        raise ValueError(mismatch_message(what, missing, unexpected, misshaped))


def mismatch_message(what: str, missing, unexpected, misshaped: dict,
                     mistyped: dict | None = None, bad_values: dict | None = None) -> str:
    """One readable message for missing, unexpected, mis-shaped and mis-typed keys
    (``mistyped`` maps each key to ``(got dtype, expected)``) and keys with values no model
    can use (``bad_values``: :func:`bad_param_values`)."""

    def short(keys, limit=12):
        keys = list(keys)
        shown = ", ".join(keys[:limit])
        return shown + (f", ... ({len(keys) - limit} more)" if len(keys) > limit else "")

    structural = missing or unexpected or misshaped or mistyped
    lines = [f"{what} does not match:" if structural else f"{what} holds values no model can use:"]
    if missing:
        lines.append(f"  missing keys ({len(missing)}): {short(missing)}")
    if unexpected:
        lines.append(f"  unexpected keys ({len(unexpected)}): {short(unexpected)}")
    if misshaped:
        items = [f"{k}: got {g}, expected {e}" for k, (g, e) in misshaped.items()]
        lines.append(f"  mis-shaped keys ({len(items)}): {short(items)}")
    if mistyped:
        items = [f"{k}: got {g}, expected {e}" for k, (g, e) in mistyped.items()]
        lines.append(f"  mis-typed keys ({len(items)}): {short(items)}")
    if bad_values:
        items = [f"{k}: {v}" for k, v in bad_values.items()]
        lines.append(f"  keys with non-finite or implausible values ({len(items)}): "
                     f"{short(items)} (expected finite values within ±{MAX_ABS_PARAM:g}: a "
                     f"damaged file, or weights from a run that diverged?)")
    return "\n".join(lines)


# --- checkpoints -----------------------------------------------------------------------------


class CheckpointError(ValueError):
    """A checkpoint file that cannot be read, or whose keys, shapes or dtypes do not fit the model."""


class UnsafeCheckpointError(CheckpointError, pickle.UnpicklingError):
    """A PyTorch file that holds Python objects beyond tensors and plain containers.  vit_scratch
    never unpickles those (that would run code chosen by whoever made the file)."""
