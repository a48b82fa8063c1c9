"""benchmarks/stats.py, the statistics every experiment uses, on hand-worked cases."""
from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import stats  # noqa: E402


def test_t_interval_by_hand():
    # 1, 2, 3: mean 2, sd 1, se 1/√3; t(0.975, 2) = 4.3027
    iv = stats.t_interval([1, 2, 3])
    half = 4.302652729749464 / math.sqrt(3)
    assert iv.mean == 2 and iv.sd == 1 and iv.n == 3
    assert iv.low == pytest.approx(2 - half) and iv.high == pytest.approx(2 + half)
    # p of t = 2 / (1/√3) = 3.4641 with 2 df, two-sided: 0.07418
    assert iv.p_value == pytest.approx(0.0741799, abs=1e-6)


def test_three_seeds_are_not_two_standard_errors():
    # differences 1.2, 1.5, 2.8: mean 1.83, 3.7 standard errors from zero, which "two standard
    # errors" would call clear; with 2 degrees of freedom the critical value is 4.30, and the
    # 95% interval includes zero
    iv = stats.paired([2.2, 2.5, 3.8], [1.0, 1.0, 1.0])
    se = iv.sd / math.sqrt(3)
    assert 3.7 < iv.mean / se < 4.302652729749464
    assert not iv.excludes_zero() and iv.sign() == 0 and iv.low < 0 < iv.high


def test_paired_by_seed_mappings_and_mismatches():
    a, b = {0: 0.9, 1: 0.8, 2: 0.85}, {2: 0.80, 0: 0.85, 1: 0.78}
    iv = stats.paired(a, b)
    assert iv.mean == pytest.approx((0.05 + 0.02 + 0.05) / 3)
    with pytest.raises(ValueError, match="same seeds"):
        stats.paired({0: 1, 1: 2}, {0: 1, 2: 2})
    with pytest.raises(ValueError, match="as many values"):
        stats.paired([1, 2, 3], [1, 2])
    with pytest.raises(ValueError, match="at least 2"):
        stats.t_interval([1.0])


def test_by_seed():
    runs = [{"seed": s, "form": f, "acc": s + (f == "b")} for s in range(3) for f in "ab"]
    assert stats.by_seed(runs, "acc", form="b") == {0: 1, 1: 2, 2: 3}
    with pytest.raises(ValueError, match="no run"):
        stats.by_seed(runs, "acc", form="c")


def test_verdicts_say_what_the_interval_says():
    ahead = stats.paired([0.95, 0.96, 0.94], [0.90, 0.90, 0.90])
    behind = stats.paired([0.90, 0.90, 0.90], [0.95, 0.96, 0.94])
    tie = stats.paired([0.91, 0.89, 0.90], [0.90, 0.90, 0.90])
    assert stats.verdict(ahead, "A", "B").startswith("A is ahead of B by +5.0 points")
    assert stats.verdict(behind, "A", "B").startswith("A is behind B by −5.0 points")
    text = stats.verdict(tie, "A", "B")
    assert text.startswith("No difference between A and B was detected")
    assert "would have detected a difference of about" in text


def test_detectable_effect_shrinks_with_seeds():
    assert stats.detectable_effect(1.0, 3) > stats.detectable_effect(1.0, 5) > 0
    # n = 3: (4.303 + 1.061) / √3
    assert stats.detectable_effect(1.0, 3) == pytest.approx((4.302653 + 1.060660) / math.sqrt(3),
                                                            rel=1e-5)


def test_holm():
    got = stats.holm({"a": 0.01, "b": 0.02, "c": 0.04})
    assert got == {"a": True, "b": True, "c": True}  # 0.01 < .05/3, 0.02 < .05/2, 0.04 < .05
    got = stats.holm({"a": 0.01, "b": 0.03, "c": 0.04})
    assert got == {"a": True, "b": False, "c": False}  # 0.03 > .05/2 stops the steps


@pytest.mark.parametrize("gaps, expected", [
    ([-3, -1, 2, 4], [{"between": (1000, 2000), "direction": "up"}]),     # upward
    ([3, 1, -2, -4], [{"between": (1000, 2000), "direction": "down"}]),   # downward
    ([-3, 0, 2, 4], [{"between": (500, 2000), "direction": "up"}]),       # across a tie
    ([-3, 2, -1, 4], [{"between": (500, 1000), "direction": "up"},
                      {"between": (1000, 2000), "direction": "down"},
                      {"between": (2000, 4000), "direction": "up"}]),     # twice up, once down
    ([1, 2, 3, 4], []), ([-1, -2, -3, -4], []), ([0, 0, 0, 0], []),      # none
    ([-1, 0, -2, -3], []),                                                # touches, no crossing
])
def test_crossings_in_both_directions(gaps, expected):
    assert stats.crossings([500, 1000, 2000, 4000], gaps) == expected


def test_crossing_sentences():
    xs = [500, 1000, 2000]
    assert stats.crossing_sentence(xs, [1, 2, 1], "the ViT", "the SVM") == \
        "the ViT stays ahead of the SVM"
    assert stats.crossing_sentence(xs, [-1, -2, -1], "the ViT", "the SVM") == \
        "the ViT stays behind the SVM"
    assert stats.crossing_sentence(xs, [0, 0, 0], "A", "B") == "A and B are level at every point"
    assert stats.crossing_sentence(xs, [1, 0, 1], "A", "B") == \
        "A stays ahead of B (level at some points)"
    assert stats.crossing_sentence(xs, [2, 1, -1], "A", "B", x_name="canvases") == \
        "A moves behind B between 1,000 and 2,000 canvases"
    assert stats.crossing_sentence(xs, [-2, 1, 0.5], "A", "B", tol=0.6) == \
        "A moves ahead of B between 500 and 1,000"


def test_log_slope():
    xs = [500, 1000, 2000, 4000]
    assert stats.log_slope(xs, [x ** -0.5 for x in xs]) == pytest.approx(-0.5)
    with pytest.raises(ValueError):
        stats.log_slope([1, 2], [0.5, 0.0])


def test_interval_round_trips_and_scales():
    iv = stats.paired([0.95, 0.96, 0.94], [0.90, 0.91, 0.90])
    assert stats.Interval.from_dict(iv.to_dict()) == iv
    pts = iv.scaled(100)
    assert pts.mean == pytest.approx(100 * iv.mean) and pts.p_value == iv.p_value
    assert "95% CI" in str(pts) and "3 seeds" in str(pts)
