"""benchmarks/bench_drop_path.py: the branches a sample runs through, the control's augmentation,
and the contrasts its results file reports, on hand-made runs."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import bench_drop_path as dp  # noqa: E402
import stats  # noqa: E402


@pytest.mark.parametrize("rate", [0.0, 0.2, 0.5])
def test_expected_branches_are_the_library_blocks_survival(rate):
    import vit_scratch

    model = vit_scratch.create_model(dp.MODEL, **dp.DEEP_NARROW, drop_path_rate=rate)
    kept = sum(2 * (1 - block.drop_path1.p) for block in model.blocks)
    assert dp.expected_branches(rate, dp.DEEP_NARROW["depth"]) == pytest.approx(kept, abs=1e-6)


def test_expected_branches_by_hand():
    assert dp.expected_branches(0.0, 12) == 24
    assert dp.expected_branches(0.5, 12) == pytest.approx(18)  # 2 · (12 − 0.5 · 12 / 2)


def test_the_control_augments_as_the_trainer_does():
    from vit_scratch.data import random_affine
    from vit_scratch.train import TrainSettings

    x = torch.rand(4, 1, 24, 24)
    s = TrainSettings()
    expected = random_affine(x, s.rotate, s.translate, s.scale, torch.Generator().manual_seed(5))
    got = dp.trainer_affine(x, torch.Generator().manual_seed(5))
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    assert not torch.equal(got, x)


def fake_runs(test: dict, train: dict) -> dict:
    """Runs of five seeds: {name: [run, ...]} with the given test and training accuracies."""
    return {name: [{"seed": seed, "drop_path_rate": 0.0 if name == dp.CONTROL else
                    float(name.split()[1]), "test_accuracy": acc, "train_accuracy": train[name][i],
                    "train_loss": 0.1, "overfit_gap": train[name][i] - acc, "val_accuracy": acc,
                    "selected_epoch": 100, "cpu_seconds": 60.0}
                   for i, (seed, acc) in enumerate(zip(range(5), accs))]
            for name, accs in test.items()}


def test_the_contrasts_pair_by_seed_and_name_the_declared_variants():
    rates = [0.0, 0.2, dp.PRIMARY_RATE]                               # one secondary rate
    names = [dp.label(r) for r in rates] + [dp.CONTROL]
    test = {dp.label(0.0): [0.80, 0.82, 0.79, 0.81, 0.80],
            dp.label(0.2): [0.81, 0.82, 0.80, 0.81, 0.82],
            dp.label(0.5): [0.83, 0.84, 0.81, 0.84, 0.82],
            dp.CONTROL: [0.90, 0.91, 0.89, 0.92, 0.90]}
    train = {n: [0.99] * 5 for n in names}
    runs = fake_runs(test, train)
    out = dp.summarise(runs, rates, {n: 1.5e-3 for n in names})
    c = out["contrasts"]
    primary = stats.Interval.from_dict(c["primary"]["interval"])
    assert (c["primary"]["a"], c["primary"]["b"]) == (dp.label(dp.PRIMARY_RATE), dp.label(0.0))
    diffs = [a - b for a, b in zip(test[dp.label(dp.PRIMARY_RATE)], test[dp.label(0.0)])]
    assert primary.mean == pytest.approx(sum(diffs) / 5) and primary.n == 5
    assert primary == stats.paired(test[dp.label(dp.PRIMARY_RATE)], test[dp.label(0.0)])
    assert c["primary"]["verdict"] == stats.verdict(primary, dp.label(dp.PRIMARY_RATE),
                                                    dp.label(0.0))
    control = stats.Interval.from_dict(c["positive_control"]["interval"])
    assert c["positive_control"]["a"] == dp.CONTROL and control.sign() > 0
    assert list(c["secondary"]) == [f"{dp.label(0.2)} - {dp.label(0.0)}"]
    gap = stats.Interval.from_dict(c["overfitting"]["interval"])
    assert gap.mean == pytest.approx(0.99 - sum(test[dp.label(0.0)]) / 5)
    assert out["variants"][dp.CONTROL]["augment"] and not out["variants"][dp.label(0.5)]["augment"]
    assert out["variants"][dp.label(0.5)]["expected_branches"] == pytest.approx(18)


def test_the_committed_rates_have_the_primary_and_no_secondary():
    names = [dp.label(r) for r in dp.RATES] + [dp.CONTROL]
    test = {n: [0.80 + 0.01 * i + 0.02 * k for k in range(3)] for i, n in enumerate(names)}
    train = {n: [1.0] * 3 for n in names}
    out = dp.summarise(fake_runs(test, train), list(dp.RATES), {n: 1.5e-3 for n in names})
    c = out["contrasts"]
    assert (c["primary"]["a"], c["primary"]["b"]) == (dp.label(dp.PRIMARY_RATE), dp.label(0.0))
    assert c["secondary"] == {} and c["primary"]["interval"]["n"] == 3
