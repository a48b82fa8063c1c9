"""The exercise checks themselves: they must accept a correct solution, reject the classic
mistakes (a widely copied tutorial's among them), and the stubs handed to learners must be
unsolved."""
import inspect

import numpy as np
import pytest
from einops import rearrange

from exercises import checks, ex01_patch_embedding, ex02_self_attention, ex03_vision_transformer
from vit_scratch.numpy_nn import attention as A
from vit_scratch.numpy_nn import layers as L
from vit_scratch.numpy_nn import patch_embed as P
from vit_scratch.numpy_nn import vit as V

# ---- correct solutions (mostly the library's reference versions) -------------------------------


def vit_num_params_closed_form(img_size, patch_size, in_chans, embed_dim, depth, mlp_ratio,
                               num_classes):
    C, H, N = embed_dim, int(embed_dim * mlp_ratio), (img_size // patch_size) ** 2
    per_block = 2 * 2 * C + (3 * C * C + 3 * C) + (C * C + C) + (H * C + H) + (C * H + C)
    return (C * in_chans * patch_size**2 + C) + C + (1 + N) * C + depth * per_block + 2 * C + (
        num_classes * C + num_classes)


CORRECT = [
    (checks.check_patchify, P.patchify),
    (checks.check_patchify_matches_conv, P.patchify),
    (checks.check_unpatchify, P.unpatchify),
    (checks.check_conv_weight_to_seed_linear,
     lambda w: rearrange(w, "e c p1 p2 -> e (p1 p2 c)")),
    (checks.check_pos_embed_similarity, P.cosine_similarity_grid),
    (checks.check_softmax, L.softmax),
    (checks.check_scaled_dot_product_attention, A.scaled_dot_product_attention),
    (checks.check_causal_mask, A.causal_mask),
    (lambda f: checks.check_split_merge_heads(f, A.merge_heads), A.split_heads),
    (checks.check_vit_num_params, vit_num_params_closed_form),
    (checks.check_block_forward, V.block),
    (checks.check_attention_rollout, A.attention_rollout),
]


@pytest.mark.parametrize("check,solution", CORRECT, ids=lambda x: getattr(x, "__name__", ""))
def test_checks_accept_a_correct_solution(check, solution):
    check(solution)


# ---- classic mistakes ----------------------------------------------------------------------


def hwc_order_patchify(x, p):  # channel-last (p1 p2 c) order: right patches, wrong layout
    return rearrange(x, "b c (gh p1) (gw p2) -> b (gh gw) (p1 p2 c)", p1=p, p2=p)


def column_major_patchify(x, p):  # patches in column-major order
    return rearrange(x, "b c (h p1) (w p2) -> b (w h) (c p1 p2)", p1=p, p2=p)


def naive_softmax(x, axis=-1):
    e = np.exp(x)
    return e / e.sum(axis=axis, keepdims=True)


def softmax_wrong_axis(x, axis=-1):
    return L.softmax(x, axis=0)


def scale_after_softmax(q, k, v, mask=None):  # the tutorial's bug 1 (notebook 02)
    scores = q @ np.swapaxes(k, -1, -2)
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    return (L.softmax(scores) * q.shape[-1] ** -0.5) @ v


def mask_ignored(q, k, v, mask=None):  # the tutorial's bug 2: the masked_fill result is discarded
    return A.scaled_dot_product_attention(q, k, v)


def mask_after_softmax(q, k, v, mask=None):
    w = A.attention_weights(q, k)
    if mask is not None:
        w = np.where(mask, w, 0.0)
    return w @ v


def heads_interleaved(x, num_heads):  # "b n (d h) -> b h n d": channels not head-major
    if x.shape[-1] % num_heads:
        raise ValueError("not divisible")
    return rearrange(x, "b n (d h) -> b h n d", h=num_heads)


def params_without_cls_position(img_size, patch_size, in_chans, embed_dim, depth, mlp_ratio,
                                num_classes):
    return checks._vit_count(img_size, patch_size, in_chans, embed_dim, depth, mlp_ratio,
                             num_classes) - embed_dim


def post_norm_block(x, p, num_heads):
    x = L.layer_norm(x + A.multi_head_attention(
        x, p["attn.qkv.weight"], p["attn.qkv.bias"], p["attn.proj.weight"], p["attn.proj.bias"],
        num_heads), p["norm1.weight"], p["norm1.bias"])
    return L.layer_norm(x + L.mlp(x, p["mlp.fc1.weight"], p["mlp.fc1.bias"], p["mlp.fc2.weight"],
                                  p["mlp.fc2.bias"]), p["norm2.weight"], p["norm2.bias"])


def rollout_without_residual(maps):
    out = None
    for m in maps:
        a = m.mean(axis=1)
        out = a if out is None else a @ out
    return out


def rollout_wrong_order(maps):
    out = None
    for m in maps:
        a = m.mean(axis=1) + np.eye(m.shape[-1])
        a = a / a.sum(-1, keepdims=True)
        out = a if out is None else out @ a
    return out


WRONG = [
    (checks.check_patchify, hwc_order_patchify),
    (checks.check_patchify, column_major_patchify),
    (checks.check_patchify_matches_conv, hwc_order_patchify),
    (checks.check_conv_weight_to_seed_linear, lambda w: w.reshape(w.shape[0], -1)),
    (checks.check_pos_embed_similarity, lambda pe, num_prefix_tokens=1: P.cosine_similarity_grid(pe, 0)),
    (checks.check_softmax, naive_softmax),
    (checks.check_softmax, softmax_wrong_axis),
    (checks.check_scaled_dot_product_attention, scale_after_softmax),
    (checks.check_scaled_dot_product_attention, mask_ignored),
    (checks.check_scaled_dot_product_attention, mask_after_softmax),
    (checks.check_causal_mask, lambda n: np.triu(np.ones((n, n), dtype=bool))),
    (lambda f: checks.check_split_merge_heads(f, A.merge_heads), heads_interleaved),
    (checks.check_vit_num_params, params_without_cls_position),
    (checks.check_block_forward, post_norm_block),
    (checks.check_attention_rollout, rollout_without_residual),
    (checks.check_attention_rollout, rollout_wrong_order),
]


@pytest.mark.parametrize("check,wrong", WRONG, ids=lambda x: getattr(x, "__name__", ""))
def test_checks_reject_a_classic_mistake(check, wrong):
    with pytest.raises(AssertionError):
        check(wrong)


# ---- the stubs ----------------------------------------------------------------------------------


@pytest.mark.parametrize("module", [ex01_patch_embedding, ex02_self_attention,
                                    ex03_vision_transformer], ids=lambda m: m.__name__)
def test_stubs_are_unsolved(module):
    functions = [f for name, f in inspect.getmembers(module, inspect.isfunction)
                 if f.__module__ == module.__name__]
    assert len(functions) >= 3
    for f in functions:
        args = [None] * len([p for p in inspect.signature(f).parameters.values()
                             if p.default is inspect.Parameter.empty])
        with pytest.raises(NotImplementedError, match="Exercise"):
            f(*args)
