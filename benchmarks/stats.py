"""The statistics every experiment of benchmarks/ uses: paired differences over seeds, a t-based
confidence interval, the smallest effect a design could have detected, and the sentences that
say what an interval says.

An experiment declares one **primary contrast** (``A − B``, paired by seed) before it runs, and
reports it as :func:`paired`'s :class:`Interval`.  With ``n`` seeds the interval is Student's t
with ``n − 1`` degrees of freedom: with 3 seeds its critical value is 4.30, not 2, so "two
standard errors" would claim far more than three seeds can show.  Secondary contrasts are
reported with Holm's correction (:func:`holm`) or marked exploratory.

Prose and generated verdicts come from here (:func:`verdict`, :func:`crossings`), so a page never
says more than its interval: an interval that includes zero is "no difference detected", with the
smallest effect the design could have detected beside it (:func:`detectable_effect`).

    >>> d = paired([0.91, 0.88, 0.93], [0.85, 0.86, 0.88])   # A and B on seeds 0, 1, 2
    >>> d.excludes_zero(), round(d.mean, 3)
    (True, 0.043)

scipy (a dependency of vit_scratch) gives the t quantiles.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Mapping, Sequence

LEVEL = 0.95
POWER = 0.8


def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom."""
    from scipy import stats

    return float(stats.t.ppf(p, df))


@dataclass(frozen=True)
class Interval:
    """A mean with its t-based confidence interval: ``mean`` of ``n`` values (or paired
    differences), their sample standard deviation ``sd`` (ddof 1), ``low``/``high`` at
    ``level``, and the two-sided p-value of "the true mean is zero"."""

    mean: float
    low: float
    high: float
    sd: float
    n: int
    level: float = LEVEL
    p_value: float = 1.0

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2

    def excludes_zero(self) -> bool:
        """Whether the interval lies wholly on one side of zero."""
        return self.low > 0 or self.high < 0

    def sign(self) -> int:
        """+1 when the interval lies above zero, −1 below, 0 when it includes zero."""
        return 1 if self.low > 0 else -1 if self.high < 0 else 0

    def scaled(self, factor: float) -> "Interval":
        """The same interval in other units (``scaled(100)``: fractions to points)."""
        return Interval(self.mean * factor, self.low * factor, self.high * factor,
                        abs(self.sd * factor), self.n, self.level, self.p_value)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping) -> "Interval":
        return cls(**{k: d[k] for k in ("mean", "low", "high", "sd", "n", "level", "p_value")})

    def format(self, digits: int = 1, unit: str = "points") -> str:
        """``+1.2 points (95% CI −0.5 to +2.9, 3 seeds)``."""
        f = f"{{:+.{digits}f}}"
        unit = f" {unit}" if unit else ""
        return (f"{f.format(self.mean)}{unit} ({round(100 * self.level)}% CI "
                f"{f.format(self.low)} to {f.format(self.high)}, {self.n} seeds)").replace("-", "−")

    def __str__(self) -> str:
        return self.format()


def t_interval(values: Sequence[float], level: float = LEVEL) -> Interval:
    """The t interval of the mean of ``values`` (at least two)."""
    values = [float(v) for v in values]
    n = len(values)
    if n < 2:
        raise ValueError(f"a t interval needs at least 2 values, got {n}")
    if not all(math.isfinite(v) for v in values):
        raise ValueError(f"values must be finite, got {values}")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    se = sd / math.sqrt(n)
    half = t_quantile(0.5 + level / 2, n - 1) * se
    if se == 0:
        p = 1.0 if mean == 0 else 0.0
    else:
        from scipy import stats

        p = float(2 * stats.t.sf(abs(mean / se), n - 1))
    return Interval(mean, mean - half, mean + half, sd, n, level, p)


def paired(a: Sequence[float] | Mapping, b: Sequence[float] | Mapping,
           level: float = LEVEL) -> Interval:
    """The interval of ``a − b`` paired by seed: two sequences in the same seed order, or two
    ``{seed: value}`` mappings (paired on their common seeds, which must be all of each's)."""
    if isinstance(a, Mapping) or isinstance(b, Mapping):
        if not (isinstance(a, Mapping) and isinstance(b, Mapping)):
            raise TypeError("pair two mappings {seed: value}, or two sequences")
        if set(a) != set(b):
            raise ValueError(f"paired runs need the same seeds, got {sorted(a)} and {sorted(b)}")
        keys = sorted(a)
        a, b = [a[k] for k in keys], [b[k] for k in keys]
    if len(a) != len(b):
        raise ValueError(f"paired runs need as many values on each side, got {len(a)} and "
                         f"{len(b)}")
    return t_interval([float(x) - float(y) for x, y in zip(a, b)], level)


def by_seed(runs: Sequence[Mapping], metric: str, **where) -> dict:
    """``{seed: run[metric]}`` of the runs whose fields equal ``where`` (one run per seed)."""
    out = {}
    for r in runs:
        if all(r.get(k) == v for k, v in where.items()):
            if r["seed"] in out:
                raise ValueError(f"two runs with seed {r['seed']} match {where}")
            out[r["seed"]] = r[metric]
    if not out:
        raise ValueError(f"no run matches {where}")
    return out


def detectable_effect(sd: float, n: int, level: float = LEVEL, power: float = POWER) -> float:
    """The smallest true paired difference that a design with ``n`` seeds and a spread ``sd`` of
    the per-seed differences detects (its interval excludes zero) with probability ``power``:
    ``(t_{1−α/2} + t_{power}) · sd / √n`` with ``n − 1`` degrees of freedom (the usual
    approximation).  Reported beside a null result: "no difference larger than this"."""
    if n < 2:
        raise ValueError(f"n must be at least 2, got {n}")
    df = n - 1
    return (t_quantile(0.5 + level / 2, df) + t_quantile(power, df)) * sd / math.sqrt(n)


def holm(p_values: Mapping[str, float], alpha: float = 1 - LEVEL) -> dict[str, bool]:
    """Holm's step-down correction: ``{name: rejected?}`` for a family of contrasts, so that the
    chance of any false claim among them stays at most ``alpha``."""
    order = sorted(p_values, key=lambda k: p_values[k])
    m, out, stopped = len(order), {}, False
    for i, name in enumerate(order):
        stopped = stopped or p_values[name] > alpha / (m - i)
        out[name] = not stopped
    return out


def verdict(interval: Interval, a: str, b: str, *, scale: float = 100, unit: str = "points",
            digits: int = 1) -> str:
    """One sentence saying what the interval of ``a − b`` says, no more.

    Excludes zero: "A is ahead of B by +x points (95% CI lo to hi, n seeds)."  Includes it: "No
    difference between A and B was detected: +x points (95% CI ...); this design would have
    detected a difference of about d points."  ``scale`` turns fractions into ``unit``."""
    iv = interval.scaled(scale)
    if iv.sign() > 0:
        return f"{a} is ahead of {b} by {iv.format(digits, unit)}."
    if iv.sign() < 0:
        return f"{a} is behind {b} by {iv.format(digits, unit)}."
    d = detectable_effect(iv.sd, iv.n, iv.level) if iv.sd > 0 else 0.0
    return (f"No difference between {a} and {b} was detected: {iv.format(digits, unit)}; "
            f"this design would have detected a difference of about {d:.{digits}f} {unit}.")


def crossings(xs: Sequence, gaps: Sequence[float], tol: float = 0.0) -> list[dict]:
    """Where the curve of ``gaps`` (``a − b`` at each ``x``, in order) changes sign, in either
    direction: ``[{"between": (x0, x1), "direction": "up" | "down"}]``.  ``|gap| ≤ tol`` counts
    as a tie: a tie between two signs is a crossing over the tie; a curve that only touches zero
    does not cross."""
    if len(xs) != len(gaps):
        raise ValueError(f"xs and gaps must have the same length, got {len(xs)} and {len(gaps)}")
    signs = [(x, 0 if abs(g) <= tol else (1 if g > 0 else -1)) for x, g in zip(xs, gaps)]
    out, last = [], None  # last: (x, sign) of the last non-tie point
    for x, s in signs:
        if s == 0:
            continue
        if last is not None and s != last[1]:
            out.append({"between": (last[0], x), "direction": "up" if s > 0 else "down"})
        last = (x, s)
    return out


def crossing_sentence(xs: Sequence, gaps: Sequence[float], a: str, b: str, *, tol: float = 0.0,
                      x_name: str = "") -> str:
    """What the curve of ``a − b`` does, in words: "A stays ahead of B", "A stays behind B",
    "A and B are level", or each crossing ("A moves ahead of B between 500 and 1,000")."""
    found = crossings(xs, gaps, tol)
    unit = f" {x_name}" if x_name else ""

    def fmt(x):
        return f"{x:,}" if isinstance(x, int) else str(x)

    if not found:
        signs = {0 if abs(g) <= tol else (1 if g > 0 else -1) for g in gaps}
        if signs <= {0}:
            return f"{a} and {b} are level at every point"
        if signs <= {0, 1}:
            return f"{a} stays ahead of {b}" + (" (level at some points)" if 0 in signs else "")
        return f"{a} stays behind {b}" + (" (level at some points)" if 0 in signs else "")
    parts = [f"{a} moves {'ahead of' if c['direction'] == 'up' else 'behind'} {b} between "
             f"{fmt(c['between'][0])} and {fmt(c['between'][1])}{unit}" for c in found]
    return "; then ".join(parts)


def log_slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """The least-squares slope of ``log y`` against ``log x`` (``y`` > 0): for an error rate
    against the data size, the power of the learning curve."""
    if len(xs) != len(ys) or len(xs) < 2:
        raise ValueError(f"need at least two (x, y) pairs of equal length, got {len(xs)} and "
                         f"{len(ys)}")
    if min(xs) <= 0 or min(ys) <= 0:
        raise ValueError("log_slope needs positive xs and ys")
    lx = [math.log(x) for x in xs]
    ly = [math.log(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    sxx = sum((x - mx) ** 2 for x in lx)
    return sum((x - mx) * (y - my) for x, y in zip(lx, ly)) / sxx
