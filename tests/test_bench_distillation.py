"""benchmarks/bench_distillation.py: the views pushed out of the frame and the ink they lose, the
teacher that swaps two classes, DeiT's soft and hard losses against hand-written formulas, and
the split the students and the teacher share (experiment.digits_subsets)."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import bench_distillation as distil  # noqa: E402
import experiment  # noqa: E402


def draws_of(rotate=0.5, zoom=0.5, dx=0.5, dy=0.5, n=1):
    """Draws in [0, 1): 0.5 is no rotation, no zoom, no shift."""
    return torch.tensor([[rotate, zoom, dx, dy]] * n, dtype=torch.float32)


def test_the_middle_draw_is_the_image_itself():
    x = torch.rand(3, 1, 24, 24)
    view = distil.out_of_frame(x, draws=draws_of(n=3))
    torch.testing.assert_close(view, x, rtol=0, atol=1e-5)
    assert distil.ink_outside_frame(x, draws=draws_of(n=3)).abs().max() < 1e-5


def test_a_shift_pushes_that_share_of_a_uniform_image_out_of_the_frame():
    """A shift by the largest draw moves the picture by AUGMENT["shift"] of its side: a uniform
    image keeps 1 - shift of its ink, in the view and by the big canvas's count."""
    x = torch.ones(1, 1, 24, 24)
    shift = distil.AUGMENT["shift"]
    d = draws_of(dx=1.0)  # u = +1: the largest shift to one side
    view = distil.out_of_frame(x, draws=d)
    assert view.sum().item() / x.sum().item() == pytest.approx(1 - shift, abs=0.01)
    assert distil.ink_outside_frame(x, draws=d).item() == pytest.approx(shift, abs=0.01)


def test_the_big_canvas_counts_the_ink_of_the_same_view():
    """ink_outside_frame draws the view on a canvas three times the side: its middle is the view
    out_of_frame gives for the same draws, rotation and zoom included."""
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(6, 1, 24, 24)
    d = torch.rand(6, 4, generator=gen)
    view = distil.out_of_frame(x, draws=d)
    big = distil.sample(F.pad(x, (24, 24, 24, 24)), distil.affine_theta(d, frame=3.0))
    torch.testing.assert_close(big[..., 24:48, 24:48], view, rtol=0, atol=1e-4)
    outside = distil.ink_outside_frame(x, draws=d)
    torch.testing.assert_close(outside, 1 - view.sum(dim=(1, 2, 3)) / big.sum(dim=(1, 2, 3)),
                               rtol=0, atol=1e-5)
    assert (outside > 0).all() and (outside < 1).all()


def test_the_same_generator_gives_the_views_whose_ink_is_counted():
    x = torch.rand(4, 1, 24, 24)
    by_gen = distil.ink_outside_frame(x, torch.Generator().manual_seed(3))
    d = torch.rand(4, 4, generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(by_gen, distil.ink_outside_frame(x, draws=d), rtol=0, atol=0)
    torch.testing.assert_close(distil.out_of_frame(x, torch.Generator().manual_seed(3)),
                               distil.out_of_frame(x, draws=d), rtol=0, atol=0)


class Fixed(torch.nn.Module):
    """A 'model' that returns fixed logits (one tensor or a distilled pair), whatever the input."""

    def __init__(self, *logits):
        super().__init__()
        self.logits = logits

    def forward(self, images):
        return self.logits[0] if len(self.logits) == 1 else self.logits


def test_the_control_teacher_swaps_two_classes_and_nothing_else():
    logits = torch.randn(8, 10)
    a, b = distil.SWAP
    swapped = distil.Teacher(Fixed(logits), distil.SWAP)(torch.zeros(8, 1, 24, 24))
    torch.testing.assert_close(swapped[:, a], logits[:, b])
    torch.testing.assert_close(swapped[:, b], logits[:, a])
    others = [c for c in range(10) if c not in (a, b)]
    torch.testing.assert_close(swapped[:, others], logits[:, others])
    said = logits.argmax(-1)
    expected = torch.where(said == a, b, torch.where(said == b, a, said))
    assert torch.equal(swapped.argmax(-1), expected)


def log_softmax(z):
    """An independent log-softmax over the classes (torch's)."""
    return torch.log_softmax(torch.as_tensor(z, dtype=torch.float64), dim=1).numpy()


def smoothed_ce(z, y, eps):
    k = z.shape[1]
    target = np.full(z.shape, eps / k)
    target[np.arange(len(y)), y] += 1 - eps
    return -(target * log_softmax(z)).sum(1).mean()


def test_soft_distillation_is_deits_formula():
    """(1 − λ)·CE_ε(Z_s, y) + λ·τ²·KL(ψ(Z_t/τ) ‖ ψ(Z_s/τ)), the KL averaged over the batch."""
    rng = np.random.default_rng(0)
    z_s, z_t = rng.standard_normal((5, 10)) * 3, rng.standard_normal((5, 10)) * 3
    y = np.array([0, 3, 8, 8, 1])
    tau, lam = distil.SOFT["tau"], distil.SOFT["lam"]
    p_t = np.exp(log_softmax(z_t / tau))
    kl = (p_t * (np.log(p_t) - log_softmax(z_s / tau))).sum(1).mean()
    expected = (1 - lam) * smoothed_ce(z_s, y, distil.LABEL_SMOOTHING) + lam * tau ** 2 * kl
    teacher = distil.Teacher(Fixed(torch.tensor(z_t, dtype=torch.float64)))
    got = distil.soft_loss(teacher)(Fixed(torch.tensor(z_s, dtype=torch.float64)), None,
                                    torch.tensor(y))
    assert got.item() == pytest.approx(expected, rel=1e-12)


def test_hard_distillation_learns_the_teachers_class_with_the_distillation_head():
    rng = np.random.default_rng(1)
    z_cls, z_dist, z_t = (rng.standard_normal((4, 10)) for _ in range(3))
    y = np.array([2, 3, 8, 5])
    y_t = z_t.argmax(1)
    expected = (0.5 * smoothed_ce(z_cls, y, distil.LABEL_SMOOTHING)
                + 0.5 * -log_softmax(z_dist)[np.arange(4), y_t].mean())
    student = Fixed(torch.tensor(z_cls), torch.tensor(z_dist))
    teacher = distil.Teacher(Fixed(torch.tensor(z_t)))
    got = distil.hard_loss(teacher)(student, None, torch.tensor(y))
    assert got.item() == pytest.approx(expected, rel=1e-12)
    swapped = distil.student_loss("swapped", teacher)(student, None, torch.tensor(y))
    a, b = distil.SWAP
    y_swapped = np.where(y_t == a, b, np.where(y_t == b, a, y_t))
    assert swapped.item() == pytest.approx(
        0.5 * smoothed_ce(z_cls, y, distil.LABEL_SMOOTHING)
        + 0.5 * -log_softmax(z_dist)[np.arange(4), y_swapped].mean(), rel=1e-12)


def test_the_split_keeps_the_trainers_test_digits_and_draws_disjoint_sets_per_class():
    from vit_scratch.data import make_datasets

    parts = experiment.digits_subsets("vit_digits", 1, 300, 400)
    _, trainer_test = make_datasets("digits", "vit_digits", 0.2, 1)
    assert torch.equal(parts["test"][0], trainer_test.tensors[0])
    sizes = {k: len(v[1]) for k, v in parts.items()}
    assert sizes["train"] == pytest.approx(300, abs=5) and sizes["val"] == pytest.approx(400, abs=5)
    assert sizes["train"] + sizes["val"] + sizes["rest"] == 1438
    rows = {k: {tuple(img.flatten().tolist()) for img in v[0]} for k, v in parts.items()}
    for a in rows:  # the digits of one split are in no other (a few duplicate pictures aside)
        for b in rows:
            if a < b:
                assert len(rows[a] & rows[b]) <= 2, (a, b)
    for name in ("train", "val"):
        counts = np.bincount(parts[name][1].numpy(), minlength=10)
        assert counts.max() - counts.min() <= 2, (name, counts)  # drawn per class
    other = experiment.digits_subsets("vit_digits", 2, 300, 400)
    assert not torch.equal(other["train"][0][:50], parts["train"][0][:50])  # seeds: other draws


def test_bad_sizes_name_the_parameters():
    with pytest.raises(ValueError, match="n_train=1400 and n_val=400"):
        experiment.digits_subsets("vit_digits", 0, 1400, 400)

