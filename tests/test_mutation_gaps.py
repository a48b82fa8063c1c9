"""Tests for the paths nothing used to run.

Mutation testing of the suite (issue 10) left seven mutants alive, each on a path no test
exercised: stochastic depth in training, position dropout, the initialiser, the 2-D sin-cos grid
on a non-square grid, the ``{"state_dict": ...}`` checkpoint wrapper and a mask with more
dimensions than the scores.  Each test below fails on one of them (named in its docstring).
"""
import math

import numpy as np
import pytest
import torch

import vit_scratch
from helpers import one_name_per_family
from vit_scratch import load_checkpoint
from vit_scratch.numpy_nn import attention as np_attn
from vit_scratch.numpy_nn import patch_embed as np_pe
from vit_scratch.torch_nn import attention as t_attn
from vit_scratch.torch_nn.layers import DropPath

TINY = "vit_tiny_patch16_224"


# --- stochastic depth ----------------------------------------------------------------------------

def _drop_path_output(p=0.25, shape=(4000, 3, 5), seed=0):
    torch.manual_seed(seed)
    return DropPath(p).train()(torch.ones(shape))


def test_drop_path_scales_kept_samples_by_one_over_keep_prob():
    """Mutant: DropPath without its 1/keep_prob scaling (the expectation would shrink by 1-p)."""
    y = _drop_path_output(p=0.25)
    values = torch.unique(y)
    assert torch.equal(values, torch.tensor([0.0, 1.0 / 0.75]))  # dropped, or kept and scaled
    kept = (y[:, 0, 0] != 0).float().mean().item()
    assert abs(kept - 0.75) < 0.03  # 4000 coins: 6 standard deviations
    assert abs(y.mean().item() - 1.0) < 0.04  # E[DropPath(x)] = x
    assert torch.equal(DropPath(0.25).eval()(torch.ones(3, 2)), torch.ones(3, 2))


def test_drop_path_drops_whole_samples():
    """Mutant: DropPath with one coin per element instead of one per sample (then it would be
    dropout, and the residual branch of a sample would be partly kept)."""
    y = _drop_path_output(p=0.5, shape=(64, 7, 9))
    per_sample = y.reshape(64, -1)
    assert torch.equal(per_sample, per_sample[:, :1].expand_as(per_sample))  # all or nothing
    dropped = (per_sample[:, 0] == 0).sum().item()
    assert 0 < dropped < 64  # and both outcomes occur (each has probability 2^-64 otherwise)


# --- position dropout ----------------------------------------------------------------------------

def test_position_dropout_acts_on_the_sum_including_the_class_token():
    """Mutant: dropout applied to the patch tokens before the position embedding is added, and
    not to the class token.  Dropout of the sum zeroes entries exactly and reaches every token."""
    model = vit_scratch.create_model(TINY, img_size=32, depth=1, drop_rate=0.5)
    vit_scratch.randomize_weights_(model, seed=0)
    x = torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        reference = model.eval().embed(x)  # [cls; patches] + pos_embed, no dropout
        torch.manual_seed(2)
        out = model.train().embed(x)
    dropped = out == 0
    assert abs(dropped.float().mean().item() - 0.5) < 0.05
    torch.testing.assert_close(out[~dropped], reference[~dropped] / 0.5, rtol=0, atol=0)
    assert dropped[:, 0].any() and (~dropped[:, 0]).any()  # the class token's row as well


# --- initialisation ------------------------------------------------------------------------------

def test_position_embedding_is_initialised():
    """Mutant: a position embedding left at zero by the initialiser (the model would then start
    blind to positions; the tests only ever loaded weights into it)."""
    model = vit_scratch.create_model(TINY)
    pe = model.pos_embed.detach()
    assert (pe != 0).float().mean() > 0.99
    assert pe.abs().max() <= 0.04  # truncated at ±2 std
    assert abs(pe.std().item() - 0.88 * 0.02) < 0.001  # N(0, 0.02²) truncated: std 0.88 · 0.02
    assert 0 < model.cls_token.detach().abs().max() < 1e-4  # N(0, 1e-6²)


@pytest.mark.parametrize("name", one_name_per_family())
def test_every_family_initialises_its_tokens_and_positions(name):
    model = vit_scratch.create_model(name)
    own = dict(model.named_parameters(recurse=False))  # class tokens, position embeddings
    for key, p in own.items():
        assert p.detach().abs().max() > 0, f"{name}: {key} is left at zero"


# --- the 2-D sin-cos grid ------------------------------------------------------------------------

def test_sincos_2d_axis_order_on_a_non_square_grid():
    """Mutant: the grid built in the wrong axis order (rows and columns swapped, or the tokens
    in column-major order).  On a 1×2 grid both orders agree, so this uses 2×3 and an
    independent computation, one token at a time."""
    dim, (gh, gw) = 8, (2, 3)
    pe = np_pe.sincos_pos_embed_2d(dim, (gh, gw), class_token=True)
    assert pe.shape == (1, 1 + gh * gw, dim)
    np.testing.assert_array_equal(pe[0, 0], 0.0)
    freqs = [10000.0 ** -(i / (dim // 4)) for i in range(dim // 4)]  # per half: dim/4 frequencies
    for r in range(gh):
        for c in range(gw):
            token = pe[0, 1 + r * gw + c]  # raster order, as patchify
            expected = ([math.sin(r * f) for f in freqs] + [math.cos(r * f) for f in freqs]
                        + [math.sin(c * f) for f in freqs] + [math.cos(c * f) for f in freqs])
            np.testing.assert_allclose(token, expected, atol=1e-7, err_msg=f"row {r}, col {c}")


# --- checkpoint wrappers -------------------------------------------------------------------------

@pytest.mark.parametrize("prefix", ["", "module."])
def test_state_dict_wrapper_is_unwrapped(tmp_path, prefix):
    """Mutant: a ``{"state_dict": ...}`` wrapper (timm's train.py, PyTorch Lightning) that is not
    unwrapped; only ``{"model": ...}`` was tested."""
    source = vit_scratch.randomize_weights_(
        vit_scratch.create_model(TINY, img_size=32, depth=1, num_classes=3), seed=4)
    path = tmp_path / "train_state.pth"
    torch.save({"state_dict": {prefix + k: v for k, v in source.state_dict().items()},
                "epoch": 7, "arch": TINY}, path)
    target = vit_scratch.create_model(TINY, img_size=32, depth=1, num_classes=3)
    load_checkpoint(target, path)
    for k, v in source.state_dict().items():
        assert torch.equal(target.state_dict()[k], v), k
    assert set(vit_scratch.read_state_dict(path)) == set(source.state_dict())


# --- masks ---------------------------------------------------------------------------------------

def test_mask_with_more_dimensions_than_the_scores_is_refused():
    """Mutant: a mask with more dimensions than the scores, which NumPy (and PyTorch) would
    broadcast silently into a larger output."""
    q = np.random.default_rng(0).standard_normal((2, 3, 5, 4))  # scores (2, 3, 5, 5)
    mask = np.ones((1, 2, 3, 5, 5), dtype=bool)
    message = ("mask of shape (1, 2, 3, 5, 5) does not broadcast to the attention scores "
               "(B, heads, N_q, N_k) = (2, 3, 5, 5)")
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        np_attn.scaled_dot_product_attention(q, q, q, mask=mask)
    tq, tmask = torch.from_numpy(q), torch.from_numpy(mask)
    for explicit in (False, True):
        with pytest.raises(ValueError, match=r"mask of shape \(1, 2, 3, 5, 5\) does not broadcast"):
            t_attn.scaled_dot_product_attention(tq, tq, tq, mask=tmask, return_attention=explicit)
    # the same mask with a fitting number of dimensions is fine in both rooms
    out = np_attn.scaled_dot_product_attention(q, q, q, mask=mask[0])
    assert out.shape == q.shape
