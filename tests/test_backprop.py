"""The NumPy room's backward passes, proven: every block and every ``*_digits`` model against
PyTorch autograd on the same weights and inputs, and every block against central finite
differences; then AdamW and the bad-input cases (the training step against the PyTorch
trainer's: tests/test_numpy_training.py).

Tolerance: for each gradient tensor, max |ours - autograd| over the scale of autograd's tensor
(its largest entry, floored at 1e-5 of the largest entry over all of the case's gradients: a
gradient that is zero in exact arithmetic -- the keys' bias under a softmax over the keys -- is
rounding noise in both frameworks).  <= 1e-9 in float64, <= 1e-4 in float32.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.func import functional_call

import vit_scratch
from helpers import one_name_per_variant, small_kwargs
from vit_scratch.numpy_nn import (attention, class_attention, coat, conv_position_encoding,
                                  coscale, factorized_attention, layers, layerscale, patch_embed,
                                  training, vit)
from vit_scratch.numpy_nn.backprop import Cache, alias_keys, trainable_params
from vit_scratch.numpy_nn.layers import sub_params
from vit_scratch.specs.coat import unused_keys

TOL = {np.float64: 1e-9, np.float32: 1e-4}
TORCH_DTYPE = {np.float64: torch.float64, np.float32: torch.float32}


def rel_errors(ours: dict, ref: dict) -> dict:
    """{name: max |ours - ref| / max(max |ref|, 1e-5 · the largest |ref| of all)}."""
    top = max(float(np.abs(r).max()) for r in ref.values() if r.size)
    out = {}
    for k, r in ref.items():
        assert ours[k] is not None and ours[k].shape == r.shape, (k, ours[k], r.shape)
        scale = max(float(np.abs(r).max()) if r.size else 0.0, 1e-5 * top)
        out[k] = float(np.abs(ours[k].astype(np.float64) - r.astype(np.float64)).max()) / scale
    return out


def as_list(out):
    return list(out) if isinstance(out, (list, tuple)) else [out]


# --- the blocks -------------------------------------------------------------------------------

@dataclass
class Case:
    """One block: ``inputs`` (float64 masters of every differentiable array), the NumPy
    ``forward(inputs) -> (out, cache)`` and ``backward(dout, cache) -> {name: grad}``, the plain
    forward ``plain(inputs) -> out``, and an independent PyTorch computation
    ``torch_fn(tensors) -> out``."""

    inputs: dict
    forward: Callable
    backward: Callable
    plain: Callable
    torch_fn: Callable


_MODELS: dict = {}


def digits_params(name: str, **kwargs):
    """A digits model's PyTorch twin (eval mode, every weight random) and its float64 params."""
    key = (name, tuple(sorted(kwargs.items())))
    if key not in _MODELS:
        torch.manual_seed(0)
        model = vit_scratch.create_model(name, **kwargs).double().eval()
        vit_scratch.randomize_weights_(model, seed=1)
        _MODELS[key] = model, {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    return _MODELS[key]


def module_case(module, prefix: str, sd: dict, extra: dict, np_forward, np_backward, np_plain,
                torch_call) -> Case:
    """A case for a submodule of a digits model: the inputs are ``extra`` (activations) plus the
    module's parameters as ``p.<key>`` under their canonical (PyTorch) names; the NumPy side
    gets every state_dict key, aliases pointing at the canonical array, and its gradients are
    summed over aliases before the comparison."""
    names = dict(module.named_parameters())
    canonical = {}
    for key, tensor in module.state_dict(keep_vars=True).items():
        canonical[key] = next(n for n, p in names.items() if p is tensor)
    inputs = dict(extra)
    inputs.update({f"p.{n}": sd[prefix + n].copy() for n in names})

    def params(inp):
        return {k: inp[f"p.{canonical[k]}"] for k in canonical}

    def forward(inp):
        return np_forward(inp, params(inp))

    def backward(dout, cache):
        grads, dparams = np_backward(dout, cache)
        for key, g in dparams.items():
            name = f"p.{canonical[key]}"
            grads[name] = grads[name] + g if name in grads else g
        return grads

    def plain(inp):
        return np_plain(inp, params(inp))

    def torch_fn(t):
        return torch_call(lambda *args: functional_call(
            module, {n: t[f"p.{n}"] for n in names}, args), t)

    return Case(inputs, forward, backward, plain, torch_fn)


def _bool_mask(n):
    return np.tril(np.ones((n, n), dtype=bool))


def case_linear(r):
    return Case({"x": r.standard_normal((2, 3, 5)), "w": r.standard_normal((4, 5)),
                 "b": r.standard_normal(4)},
                lambda i: layers.linear_forward(i["x"], i["w"], i["b"]),
                lambda d, c: dict(zip("xwb", layers.linear_backward(d, c))),
                lambda i: layers.linear(i["x"], i["w"], i["b"]),
                lambda t: F.linear(t["x"], t["w"], t["b"]))


def case_layer_norm(r):
    return Case({"x": r.standard_normal((2, 3, 6)) * 3 + 1, "w": r.standard_normal(6),
                 "b": r.standard_normal(6)},
                lambda i: layers.layer_norm_forward(i["x"], i["w"], i["b"]),
                lambda d, c: dict(zip("xwb", layers.layer_norm_backward(d, c))),
                lambda i: layers.layer_norm(i["x"], i["w"], i["b"]),
                lambda t: F.layer_norm(t["x"], (6,), t["w"], t["b"], eps=1e-6))


def case_gelu(r):
    x = r.standard_normal((3, 7)) * 2
    x[0, 0] = 0.0  # Φ(0) = ½
    return Case({"x": x}, lambda i: layers.gelu_forward(i["x"]),
                lambda d, c: {"x": layers.gelu_backward(d, c)},
                lambda i: layers.gelu(i["x"]), lambda t: F.gelu(t["x"]))


def case_softmax(axis):
    def make(r):
        return Case({"x": r.standard_normal((2, 4, 5)) * 2},
                    lambda i: layers.softmax_forward(i["x"], axis=axis),
                    lambda d, c: {"x": layers.softmax_backward(d, c)},
                    lambda i: layers.softmax(i["x"], axis=axis),
                    lambda t: torch.softmax(t["x"], dim=axis))
    return make


def case_mlp(r):
    keys = ("x", "w1", "b1", "w2", "b2")
    return Case({"x": r.standard_normal((2, 3, 4)), "w1": r.standard_normal((6, 4)),
                 "b1": r.standard_normal(6), "w2": r.standard_normal((4, 6)),
                 "b2": r.standard_normal(4)},
                lambda i: layers.mlp_forward(*(i[k] for k in keys)),
                lambda d, c: dict(zip(keys, layers.mlp_backward(d, c))),
                lambda i: layers.mlp(*(i[k] for k in keys)),
                lambda t: F.linear(F.gelu(F.linear(t["x"], t["w1"], t["b1"])), t["w2"], t["b2"]))


def case_cross_entropy(r):
    labels = np.array([0, 3, 4, 1, 3, 2])
    return Case({"logits": r.standard_normal((6, 5)) * 2},
                lambda i: layers.cross_entropy_forward(i["logits"], labels, 0.1),
                lambda d, c: {"logits": layers.cross_entropy_backward(d, c)},
                lambda i: layers.cross_entropy(i["logits"], labels, 0.1),
                lambda t: F.cross_entropy(t["logits"], torch.from_numpy(labels),
                                          label_smoothing=0.1))


def case_hard_distillation(r):
    labels, teacher = np.array([0, 3, 4, 1, 3, 2]), np.array([0, 1, 4, 4, 2, 2])
    return Case({"logits": r.standard_normal((6, 5)) * 2, "logits_dist": r.standard_normal((6, 5))},
                lambda i: training.hard_distillation_forward(i["logits"], i["logits_dist"], labels,
                                                             teacher, 0.1),
                lambda d, c: dict(zip(("logits", "logits_dist"),
                                      training.hard_distillation_backward(d, c))),
                lambda i: training.hard_distillation(i["logits"], i["logits_dist"], labels,
                                                     teacher, 0.1),
                lambda t: 0.5 * F.cross_entropy(t["logits"], torch.from_numpy(labels),
                                                label_smoothing=0.1)
                + 0.5 * F.cross_entropy(t["logits_dist"], torch.from_numpy(teacher)))


def case_drop_path(r):
    mask = layers.drop_path_mask(6, 0.5, np.random.default_rng(2), np.float64)
    assert {0.0, 2.0} == set(mask.tolist())
    return Case({"x": r.standard_normal((6, 3, 4))},
                lambda i: layers.drop_path_forward(i["x"], mask.astype(i["x"].dtype)),
                lambda d, c: {"x": layers.drop_path_backward(d, c)},
                lambda i: layers.drop_path(i["x"], mask.astype(i["x"].dtype)),
                lambda t: t["x"] * torch.from_numpy(mask).to(t["x"].dtype)[:, None, None])


def case_patch_embed(r):
    return Case({"images": r.standard_normal((2, 3, 8, 12)), "w": r.standard_normal((5, 3, 4, 4)),
                 "b": r.standard_normal(5)},
                lambda i: patch_embed.patch_embed_forward(i["images"], i["w"], i["b"]),
                lambda d, c: dict(zip(("images", "w", "b"),
                                      patch_embed.patch_embed_backward(d, c))),
                lambda i: patch_embed.patch_embed(i["images"], i["w"], i["b"]),
                lambda t: F.conv2d(t["images"], t["w"], t["b"], stride=4).flatten(2).transpose(1, 2)
                )


def case_class_token(r):
    return Case({"x": r.standard_normal((3, 4, 5)), "cls": r.standard_normal((1, 1, 5))},
                lambda i: patch_embed.add_class_token_forward(i["x"], i["cls"]),
                lambda d, c: dict(zip(("x", "cls"), patch_embed.add_class_token_backward(d, c))),
                lambda i: patch_embed.add_class_token(i["x"], i["cls"]),
                lambda t: torch.cat([t["cls"].expand(3, -1, -1), t["x"]], dim=1))


def case_pos_embed(r):
    return Case({"x": r.standard_normal((3, 4, 5)), "pos": r.standard_normal((1, 4, 5))},
                lambda i: patch_embed.add_pos_embed_forward(i["x"], i["pos"]),
                lambda d, c: dict(zip(("x", "pos"), patch_embed.add_pos_embed_backward(d, c))),
                lambda i: patch_embed.add_pos_embed(i["x"], i["pos"]),
                lambda t: t["x"] + t["pos"])


def torch_attention(q, k, v, mask=None):
    scores = (q * q.shape[-1] ** -0.5) @ k.transpose(-1, -2)
    if mask is not None and mask.dtype == np.bool_:
        scores = scores.masked_fill(~torch.from_numpy(mask), float("-inf"))
    elif mask is not None:
        scores = scores + torch.from_numpy(mask).to(scores.dtype)
    return torch.softmax(scores, dim=-1) @ v


def case_attention(kind):
    def make(r):
        mask = {"none": None, "bool": _bool_mask(5),
                "float": r.standard_normal((5, 5))}[kind]
        return Case({"q": r.standard_normal((2, 3, 5, 4)), "k": r.standard_normal((2, 3, 5, 4)),
                     "v": r.standard_normal((2, 3, 5, 4))},
                    lambda i: attention.attention_forward(i["q"], i["k"], i["v"], mask=mask),
                    lambda d, c: dict(zip("qkv", attention.attention_backward(d, c))),
                    lambda i: attention.scaled_dot_product_attention(i["q"], i["k"], i["v"], mask),
                    lambda t: torch_attention(t["q"], t["k"], t["v"], mask))
    return make


def case_multi_head_attention(masked):
    def make(r):
        C, h, B, N = 8, 2, 2, 5
        mask = _bool_mask(N) if masked else None
        keys = ("x", "qkv_w", "qkv_b", "proj_w", "proj_b")

        def torch_fn(t):
            qkv = F.linear(t["x"], t["qkv_w"], t["qkv_b"]).reshape(B, N, 3, h, C // h)
            q, k, v = qkv.permute(2, 0, 3, 1, 4)
            o = torch_attention(q, k, v, mask).transpose(1, 2).reshape(B, N, C)
            return F.linear(o, t["proj_w"], t["proj_b"])

        return Case({"x": r.standard_normal((B, N, C)), "qkv_w": r.standard_normal((3 * C, C)),
                     "qkv_b": r.standard_normal(3 * C), "proj_w": r.standard_normal((C, C)),
                     "proj_b": r.standard_normal(C)},
                    lambda i: attention.multi_head_attention_forward(*(i[k] for k in keys), h,
                                                                     mask=mask),
                    lambda d, c: dict(zip(keys, attention.multi_head_attention_backward(d, c))),
                    lambda i: attention.multi_head_attention(*(i[k] for k in keys), h, mask=mask),
                    torch_fn)
    return make


def case_mix_heads(r):
    return Case({"a": r.standard_normal((2, 3, 4, 5)), "w": r.standard_normal((3, 3)),
                 "b": r.standard_normal(3)},
                lambda i: attention.mix_heads_forward(i["a"], i["w"], i["b"]),
                lambda d, c: dict(zip("awb", attention.mix_heads_backward(d, c))),
                lambda i: attention.mix_heads(i["a"], i["w"], i["b"]),
                lambda t: torch.einsum("bhqk,gh->bgqk", t["a"], t["w"]) + t["b"][:, None, None])


def case_layer_scale(r):
    return Case({"x": r.standard_normal((2, 3, 5)), "gamma": r.standard_normal(5)},
                lambda i: layerscale.layer_scale_forward(i["x"], i["gamma"]),
                lambda d, c: dict(zip(("x", "gamma"), layerscale.layer_scale_backward(d, c))),
                lambda i: layerscale.layer_scale(i["x"], i["gamma"]),
                lambda t: t["x"] * t["gamma"])


def case_factorized_attention(r):
    return Case({"q": r.standard_normal((2, 3, 6, 4)), "k": r.standard_normal((2, 3, 6, 4)),
                 "v": r.standard_normal((2, 3, 6, 5))},
                lambda i: factorized_attention.factorized_attention_forward(i["q"], i["k"], i["v"]),
                lambda d, c: dict(zip("qkv",
                                      factorized_attention.factorized_attention_backward(d, c))),
                lambda i: factorized_attention.factorized_attention(i["q"], i["k"], i["v"]),
                lambda t: 0.5 * t["q"] @ (torch.softmax(t["k"], dim=-2).transpose(-1, -2) @ t["v"]))


def case_depthwise(k, channels_last):
    def make(r):
        x = r.standard_normal((2, 5, 6, 3) if channels_last else (2, 3, 5, 6))

        def torch_fn(t):
            xt = t["x"].permute(0, 3, 1, 2) if channels_last else t["x"]
            y = F.conv2d(xt, t["w"], t["b"], padding=k // 2, groups=3)
            return y.permute(0, 2, 3, 1) if channels_last else y

        cv = conv_position_encoding
        return Case({"x": x, "w": r.standard_normal((3, 1, k, k)), "b": r.standard_normal(3)},
                    lambda i: cv.depthwise_conv2d_forward(i["x"], i["w"], i["b"], channels_last),
                    lambda d, c: dict(zip("xwb", cv.depthwise_conv2d_backward(d, c))),
                    lambda i: cv.depthwise_conv2d(i["x"], i["w"], i["b"], channels_last),
                    torch_fn)
    return make


def case_bilinear(size, scale_factor, channels_last):
    def make(r):
        axes = (1, 2) if channels_last else (-2, -1)
        x = r.standard_normal((2, 4, 6, 3) if channels_last else (2, 3, 4, 6))

        def torch_fn(t):
            xt = t["x"].permute(0, 3, 1, 2) if channels_last else t["x"]
            y = F.interpolate(xt, size=size, scale_factor=scale_factor, mode="bilinear",
                              align_corners=False)
            return y.permute(0, 2, 3, 1) if channels_last else y

        cs = coscale
        return Case({"x": x},
                    lambda i: cs.bilinear_resize_forward(i["x"], size, scale_factor, axes),
                    lambda d, c: {"x": cs.bilinear_resize_backward(d, c)},
                    lambda i: cs.bilinear_resize(i["x"], size, scale_factor, axes),
                    torch_fn)
    return make


def case_interpolate_tokens(factor):
    def make(r):
        H = W = 4

        def torch_fn(t):
            img = t["x"][:, 1:].reshape(2, H, W, 3).permute(0, 3, 1, 2)
            img = F.interpolate(img, scale_factor=factor, mode="bilinear", align_corners=False)
            return torch.cat([t["x"][:, :1], img.flatten(2).transpose(1, 2)], dim=1)

        return Case({"x": r.standard_normal((2, 1 + H * W, 3))},
                    lambda i: coscale.interpolate_tokens_forward(i["x"], (H, W), factor),
                    lambda d, c: {"x": coscale.interpolate_tokens_backward(d, c)},
                    lambda i: coscale.interpolate_tokens(i["x"], (H, W), factor),
                    torch_fn)
    return make


# -- blocks of the digits models, against the PyTorch room's modules (functional_call) -----------

class FixedDropPath(torch.nn.Module):
    """DropPath with a given per-sample mask (the coin flips of the NumPy side)."""

    def __init__(self, mask):
        super().__init__()
        self.mask = mask

    def forward(self, x):
        return x * torch.from_numpy(self.mask).to(x.dtype).reshape(-1, *([1] * (x.ndim - 1)))


def _masks(B):
    rng = np.random.default_rng(5)
    return [layers.drop_path_mask(B, 0.4, rng, np.float64) for _ in range(2)]


def case_vit_block(r):
    model, sd = digits_params("vit_digits")
    blk = model.blocks[1]
    m1, m2 = _masks(3)
    blk.drop_path1, blk.drop_path2 = FixedDropPath(m1), FixedDropPath(m2)

    def masks(inp):
        return [m.astype(inp["x"].dtype) for m in (m1, m2)]

    return module_case(
        blk, "blocks.1.", sd, {"x": r.standard_normal((3, 17, 64))},
        lambda i, p: layerscale.residual_block_forward(i["x"], p, 4, "prenorm", masks(i)),
        lambda d, c: (lambda dx, dp: ({"x": dx}, dp))(*layerscale.residual_block_backward(d, c)),
        lambda i, p: _block_with_masks(i, p, masks(i)),
        lambda call, t: call(t["x"]))


def _block_with_masks(i, p, masks):
    """The plain ViT block with DropPath: x + m₁·attn(norm1(x)), then + m₂·mlp(norm2(·))."""
    x = i["x"]
    h = attention.multi_head_attention(layers.layer_norm(x, p["norm1.weight"], p["norm1.bias"]),
                                       p["attn.qkv.weight"], p["attn.qkv.bias"],
                                       p["attn.proj.weight"], p["attn.proj.bias"], 4)
    x = x + layers.drop_path(h, masks[0])
    h = layers.mlp(layers.layer_norm(x, p["norm2.weight"], p["norm2.bias"]), p["mlp.fc1.weight"],
                   p["mlp.fc1.bias"], p["mlp.fc2.weight"], p["mlp.fc2.bias"])
    return x + layers.drop_path(h, masks[1])


def case_scalar_gate(r):
    return Case({"x": r.standard_normal((2, 3, 4)), "alpha": r.standard_normal(1)},
                lambda i: layerscale.scalar_gate_forward(i["x"], i["alpha"]),
                lambda d, c: dict(zip(("x", "alpha"), layerscale.scalar_gate_backward(d, c))),
                lambda i: layerscale.scalar_gate(i["x"], i["alpha"]),
                lambda t: t["x"] * t["alpha"])


def case_residual_block(residual):
    """A residual form's block (the ViT family's block, DeiT III's with "layerscale"), with
    stochastic depth, against the PyTorch room's ``ResidualBlock`` (every scale randomized)."""
    def make(r):
        from vit_scratch.torch_nn.layerscale import ResidualBlock

        blk = vit_scratch.randomize_weights_(
            ResidualBlock(16, 4, residual, mlp_ratio=2.0, qkv_bias=residual != "rezero")
            .double().eval(), seed=2, std=0.3)
        sd = {k: v.detach().numpy().copy() for k, v in blk.state_dict().items()}
        m1, m2 = _masks(3)
        blk.drop_path1, blk.drop_path2 = FixedDropPath(m1), FixedDropPath(m2)

        def masks(inp):
            return [m.astype(inp["x"].dtype) for m in (m1, m2)]

        def plain(i, p):  # the plain block with the masks: x + m·s(f(n(x))), branch by branch
            norm, kind = layerscale.RESIDUAL_FORMS[residual]
            ln = lambda y, n: layers.layer_norm(y, p[f"{n}.weight"], p[f"{n}.bias"]) if norm else y  # noqa: E731
            key = {None: None, "scalar": "alpha", "channel": "gamma"}[kind]
            scale = lambda y, s: y if key is None else y * p[f"{s}.{key}"]  # noqa: E731
            h = attention.multi_head_attention(ln(i["x"], "norm1"), p["attn.qkv.weight"],
                                               p.get("attn.qkv.bias"), p["attn.proj.weight"],
                                               p["attn.proj.bias"], 4)
            x = i["x"] + layers.drop_path(scale(h, "ls1"), masks(i)[0])
            h = layers.mlp(ln(x, "norm2"), *(p[f"mlp.{k}"] for k in layers.MLP_KEYS))
            return x + layers.drop_path(scale(h, "ls2"), masks(i)[1])

        return module_case(
            blk, "", sd, {"x": r.standard_normal((3, 7, 16))},
            lambda i, p: layerscale.residual_block_forward(i["x"], p, 4, residual, masks(i)),
            lambda d, c: (lambda dx, dp: ({"x": dx}, dp))(
                *layerscale.residual_block_backward(d, c)),
            plain, lambda call, t: call(t["x"]))
    return make


def case_talking_heads(r):
    model, sd = digits_params("cait_digits")
    keys = ("attn.qkv.weight", "attn.qkv.bias", "attn.proj_l.weight", "attn.proj_l.bias",
            "attn.proj_w.weight", "attn.proj_w.bias", "attn.proj.weight", "attn.proj.bias")
    return module_case(
        model.blocks[0].attn, "blocks.0.attn.", sd, {"x": r.standard_normal((2, 16, 64))},
        lambda i, p: attention.talking_heads_attention_forward(
            i["x"], *(p[k[5:]] for k in keys), 4),
        lambda d, c: (lambda dx, *g: ({"x": dx}, {k[5:]: v for k, v in zip(keys, g)}))(
            *attention.talking_heads_attention_backward(d, c)),
        lambda i, p: attention.talking_heads_attention(i["x"], *(p[k[5:]] for k in keys), 4),
        lambda call, t: call(t["x"]))


def case_layerscale_block(r):
    model, sd = digits_params("cait_digits")
    return module_case(
        model.blocks[2], "blocks.2.", sd, {"x": r.standard_normal((2, 16, 64))},
        lambda i, p: layerscale.layerscale_block_forward(i["x"], p, 4),
        lambda d, c: (lambda dx, dp: ({"x": dx}, dp))(*layerscale.layerscale_block_backward(d, c)),
        lambda i, p: layerscale.layerscale_block(i["x"], p, 4),
        lambda call, t: call(t["x"]))


def case_class_attention(in_keys):
    def make(r):
        model, sd = digits_params("cait_digits", class_token_in_keys=in_keys)
        keys = ("q.weight", "q.bias", "k.weight", "k.bias", "v.weight", "v.bias",
                "proj.weight", "proj.bias")
        ca = class_attention
        return module_case(
            model.blocks_token_only[0].attn, "blocks_token_only.0.attn.", sd,
            {"u": r.standard_normal((2, 17, 64))},
            lambda i, p: ca.class_attention_forward(i["u"], *(p[k] for k in keys), 4, in_keys),
            lambda d, c: (lambda du, *g: ({"u": du}, dict(zip(keys, g))))(
                *ca.class_attention_backward(d, c)),
            lambda i, p: ca.class_attention(i["u"], *(p[k] for k in keys), 4, in_keys),
            lambda call, t: call(t["u"]))
    return make


def case_class_attention_block(in_keys):
    def make(r):
        model, sd = digits_params("cait_digits", class_token_in_keys=in_keys)
        ca = class_attention
        return module_case(
            model.blocks_token_only[1], "blocks_token_only.1.", sd,
            {"x": r.standard_normal((2, 16, 64)), "cls": r.standard_normal((2, 1, 64))},
            lambda i, p: ca.class_attention_block_forward(i["x"], i["cls"], p, 4, in_keys),
            lambda d, c: (lambda dx, dcls, dp: ({"x": dx, "cls": dcls}, dp))(
                *ca.class_attention_block_backward(d, c)),
            lambda i, p: ca.class_attention_block(i["x"], i["cls"], p, 4, in_keys),
            lambda call, t: call(t["x"], t["cls"]))
    return make


def case_conv_pos_enc(r):
    model, sd = digits_params("coat_lite_digits")
    cv = conv_position_encoding
    return module_case(
        model.cpe2, "cpe2.", sd, {"x": r.standard_normal((2, 17, 64))},
        lambda i, p: cv.conv_pos_enc_forward(i["x"], p["proj.weight"], p["proj.bias"], (4, 4)),
        lambda d, c: (lambda dx, dw, db: ({"x": dx}, {"proj.weight": dw, "proj.bias": db}))(
            *cv.conv_pos_enc_backward(d, c)),
        lambda i, p: cv.conv_pos_enc(i["x"], p["proj.weight"], p["proj.bias"], (4, 4)),
        lambda call, t: call(t["x"], (4, 4)))


def _crpe_grads(dws, dbs):
    return {**{f"conv_list.{n}.weight": w for n, w in enumerate(dws)},
            **{f"conv_list.{n}.bias": b for n, b in enumerate(dbs)}}


def _crpe_params(p):
    n = len([k for k in p if k.endswith(".weight")])
    return ([p[f"conv_list.{i}.weight"] for i in range(n)],
            [p[f"conv_list.{i}.bias"] for i in range(n)])


def case_conv_rel_pos_enc(r):
    model, sd = digits_params("coat_lite_digits")  # 4 heads of 16 channels at scale 2, windows 3, 5
    cv = conv_position_encoding
    return module_case(
        model.crpe2, "crpe2.", sd,
        {"q": r.standard_normal((2, 4, 17, 16)), "v": r.standard_normal((2, 4, 17, 16))},
        lambda i, p: cv.conv_rel_pos_enc_forward(i["q"], i["v"], (4, 4), *_crpe_params(p)),
        lambda d, c: (lambda dq, dv, dws, dbs: ({"q": dq, "v": dv}, _crpe_grads(dws, dbs)))(
            *cv.conv_rel_pos_enc_backward(d, c)),
        lambda i, p: cv.conv_rel_pos_enc(i["q"], i["v"], (4, 4), *_crpe_params(p)),
        lambda call, t: call(t["q"], t["v"], (4, 4)))


def case_conv_attend(r):
    model, sd = digits_params("coat_lite_digits")
    fa = factorized_attention

    def torch_call(call, t):  # the factorized term by hand, the CRPE term by the module
        heads = lambda z: z.reshape(2, 17, 4, 16).transpose(1, 2)  # noqa: E731
        q, k, v = heads(t["q"]), heads(t["k"]), heads(t["v"])
        factor = 0.25 * q @ (torch.softmax(k, dim=2).transpose(-1, -2) @ v)
        return (factor + call(q, v, (4, 4))).transpose(1, 2).reshape(2, 17, 64)

    return module_case(
        model.crpe2, "crpe2.", sd, {n: r.standard_normal((2, 17, 64)) for n in "qkv"},
        lambda i, p: fa.conv_attend_forward(i["q"], i["k"], i["v"], (4, 4), 4, *_crpe_params(p)),
        lambda d, c: (lambda dq, dk, dv, dws, dbs: ({"q": dq, "k": dk, "v": dv},
                                                     _crpe_grads(dws, dbs)))(
            *fa.conv_attend_backward(d, c)),
        lambda i, p: fa.conv_attend(i["q"], i["k"], i["v"], (4, 4), 4, *_crpe_params(p)),
        torch_call)


def case_conv_attention(r):
    model, sd = digits_params("coat_lite_digits")
    fa = factorized_attention
    return module_case(
        model.serial_blocks2[0].factoratt_crpe, "serial_blocks2.0.factoratt_crpe.", sd,
        {"x": r.standard_normal((2, 17, 64))},
        lambda i, p: fa.conv_attention_forward(i["x"], p, 4, (4, 4)),
        lambda d, c: (lambda dx, dp: ({"x": dx}, dp))(*fa.conv_attention_backward(d, c)),
        lambda i, p: fa.conv_attention(i["x"], p, 4, (4, 4)),
        lambda call, t: call(t["x"], (4, 4)))


def case_scale_patch_embed(channels_last):
    def make(r):
        model, sd = digits_params("coat_lite_digits", patch_size=2, img_size=16)
        s = 2 if channels_last else 1
        x = r.standard_normal((2, 8, 8, 32) if channels_last else (2, 1, 16, 16))

        def torch_call(call, t):
            return call(t["x"].permute(0, 3, 1, 2) if channels_last else t["x"])

        return module_case(
            getattr(model, f"patch_embed{s}"), f"patch_embed{s}.", sd, {"x": x},
            lambda i, p: coat.scale_patch_embed_forward(i["x"], p, channels_last),
            lambda d, c: (lambda dx, dp: ({"x": dx}, dp))(*coat.scale_patch_embed_backward(d, c)),
            lambda i, p: coat.scale_patch_embed(i["x"], p, channels_last),
            torch_call)
    return make


def case_serial_block(r):
    model, sd = digits_params("coat_lite_digits")
    blk = model.serial_blocks2[0]
    m1, m2 = _masks(2)
    calls = []

    class TwoMasks(torch.nn.Module):  # the block's one DropPath module runs twice: m1, then m2
        def forward(self, x):
            calls.append(1)
            return FixedDropPath(m1 if len(calls) == 1 else m2)(x)

    blk.drop_path = TwoMasks()

    def masks(inp):
        return [m.astype(inp["x"].dtype) for m in (m1, m2)]

    def plain(i, p):
        x = conv_position_encoding.conv_pos_enc(i["x"], p["cpe.proj.weight"], p["cpe.proj.bias"],
                                                (4, 4))
        h = factorized_attention.conv_attention(
            layers.layer_norm(x, p["norm1.weight"], p["norm1.bias"]),
            sub_params(p, "factoratt_crpe."), 4, (4, 4))
        x = x + layers.drop_path(h, masks(i)[0])
        h = layers.mlp(layers.layer_norm(x, p["norm2.weight"], p["norm2.bias"]),
                       p["mlp.fc1.weight"], p["mlp.fc1.bias"], p["mlp.fc2.weight"],
                       p["mlp.fc2.bias"])
        return x + layers.drop_path(h, masks(i)[1])

    def torch_call(call, t):
        calls.clear()
        return call(t["x"], (4, 4))

    return module_case(
        blk, "serial_blocks2.0.", sd, {"x": r.standard_normal((2, 17, 64))},
        lambda i, p: coat.serial_block_forward(i["x"], p, 4, (4, 4), masks(i)),
        lambda d, c: (lambda dx, dp: ({"x": dx}, dp))(*coat.serial_block_backward(d, c)),
        plain, torch_call)


def case_parallel_block(mode):
    def make(r):
        model, sd = digits_params("coat_digits", parallel_mode=mode)
        sizes = [(8, 8), (4, 4), (2, 2)]
        xs = {f"x{s}": r.standard_normal((2, 1 + h * w, 64)) for s, (h, w) in zip((2, 3, 4), sizes)}
        names = list(xs)
        cs = coscale
        return module_case(
            model.parallel_blocks[0], "parallel_blocks.0.", sd, xs,
            lambda i, p: cs.parallel_block_forward([i[n] for n in names], p, sizes, 4, mode),
            lambda d, c: (lambda dxs, dp: (dict(zip(names, dxs)), dp))(
                *cs.parallel_block_backward(d, c)),
            lambda i, p: cs.parallel_block([i[n] for n in names], p, sizes, 4, mode),
            lambda call, t: call([t[n] for n in names], sizes))
    return make


CASES = {
    "linear": case_linear, "layer_norm": case_layer_norm, "gelu": case_gelu,
    "softmax_last": case_softmax(-1), "softmax_tokens": case_softmax(1), "mlp": case_mlp,
    "cross_entropy_label_smoothing": case_cross_entropy,
    "hard_distillation": case_hard_distillation, "drop_path": case_drop_path,
    "patch_embed": case_patch_embed, "class_token": case_class_token,
    "pos_embed": case_pos_embed,
    "attention": case_attention("none"), "attention_bool_mask": case_attention("bool"),
    "attention_float_mask": case_attention("float"),
    "multi_head_attention": case_multi_head_attention(False),
    "multi_head_attention_masked": case_multi_head_attention(True),
    "vit_block_drop_path": case_vit_block,
    "scalar_gate": case_scalar_gate,
    **{f"residual_block_{form}": case_residual_block(form) for form in layerscale.RESIDUAL_FORMS},
    "layer_scale": case_layer_scale, "mix_heads": case_mix_heads,
    "talking_heads_attention": case_talking_heads, "layerscale_block": case_layerscale_block,
    "class_attention_cls_in_keys": case_class_attention(True),
    "class_attention_patches_only": case_class_attention(False),
    "class_attention_block_cls_in_keys": case_class_attention_block(True),
    "class_attention_block_patches_only": case_class_attention_block(False),
    "factorized_attention": case_factorized_attention,
    "depthwise_conv3": case_depthwise(3, False),
    "depthwise_conv5_channels_last": case_depthwise(5, True),
    "conv_pos_enc": case_conv_pos_enc, "conv_rel_pos_enc": case_conv_rel_pos_enc,
    "conv_attend": case_conv_attend, "conv_attention": case_conv_attention,
    "bilinear_up2": case_bilinear(None, 2.0, False),
    "bilinear_down2": case_bilinear(None, 0.5, True),
    "bilinear_size": case_bilinear((3, 5), None, False),
    "interpolate_tokens_up": case_interpolate_tokens(2.0),
    "interpolate_tokens_down4": case_interpolate_tokens(0.25),
    "scale_patch_embed": case_scale_patch_embed(False),
    "scale_patch_embed_channels_last": case_scale_patch_embed(True),
    "serial_block_drop_path": case_serial_block,
    "parallel_block_interpolation": case_parallel_block("interpolation"),
    "parallel_block_cross_attention": case_parallel_block("cross_attention"),
}


def _cast(inputs, dtype):
    return {k: v.astype(dtype) for k, v in inputs.items()}


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["fp64", "fp32"])
@pytest.mark.parametrize("name", list(CASES))
def test_block_gradients_match_autograd(name, dtype):
    """Every block: ``f_forward`` gives ``f``'s output, and ``f_backward`` gives autograd's
    gradient for every input and parameter."""
    case = CASES[name](np.random.default_rng(0))
    inputs = _cast(case.inputs, dtype)
    out, cache = case.forward(inputs)
    assert isinstance(cache, Cache)
    plain = case.plain(inputs)
    same = 1e-13 if dtype == np.float64 else 1e-6  # the same steps: equal up to rounding
    for a, b in zip(as_list(out), as_list(plain)):
        assert a.dtype == b.dtype == dtype and a.shape == b.shape
        assert np.abs(a - b).max() <= same * max(1.0, np.abs(b).max())
    r = np.random.default_rng(1)
    douts = [r.standard_normal(np.shape(o)).astype(dtype) for o in as_list(out)]
    grads = case.backward(douts if isinstance(out, list) else douts[0], cache)
    tensors = {k: torch.tensor(v, requires_grad=True) for k, v in inputs.items()}
    tout = as_list(case.torch_fn(tensors))
    torch.autograd.backward(tout, [torch.from_numpy(d) for d in douts])
    ref = {k: (t.grad if t.grad is not None else torch.zeros_like(t)).numpy()
           for k, t in tensors.items()}
    assert set(grads) == set(ref)
    for k, g in grads.items():
        assert g.dtype == dtype, (k, g.dtype)
    errors = rel_errors(grads, ref)
    worst = max(errors, key=errors.get)
    assert errors[worst] <= TOL[dtype], (worst, errors[worst])


@pytest.mark.parametrize("name", list(CASES))
def test_block_gradients_match_finite_differences(name):
    """The second oracle, independent of PyTorch: along a random direction D, the directional
    derivative by central differences of the plain forward in float64 equals ⟨gradient, D⟩ --
    for every input alone, and for the parameters of each submodule together."""
    case = CASES[name](np.random.default_rng(0))
    inputs = _cast(case.inputs, np.float64)
    out, cache = case.forward(inputs)
    r = np.random.default_rng(2)
    douts = [r.standard_normal(np.shape(o)) for o in as_list(out)]
    grads = case.backward(douts if isinstance(out, list) else douts[0], cache)

    def objective(inp):
        return sum(float(np.sum(o * d)) for o, d in zip(as_list(case.plain(inp)), douts))

    h = 1e-5
    dirs = {k: r.standard_normal(v.shape) for k, v in inputs.items()}
    groups: dict = {}  # each activation alone; a submodule's parameters together ("p.mlp2.*")
    for k in inputs:
        groups.setdefault(".".join(k.split(".")[:2]) if k.startswith("p.") else k, []).append(k)
    norm = {k: np.linalg.norm(grads[k]) * np.linalg.norm(dirs[k]) for k in inputs}
    scale = max(norm.values())
    for keys in groups.values():
        up = objective({**inputs, **{k: inputs[k] + h * dirs[k] for k in keys}})
        down = objective({**inputs, **{k: inputs[k] - h * dirs[k] for k in keys}})
        fd = (up - down) / (2 * h)
        exact = sum(float(np.sum(grads[k] * dirs[k])) for k in keys)
        bound = 1e-6 * max(sum(norm[k] for k in keys), 1e-3 * scale)
        assert abs(fd - exact) <= bound, (keys, fd, exact)


# --- whole models -------------------------------------------------------------------------------

#: The smallest name of every family and variant (``helpers.one_name_per_variant``: a new one
#: is covered the moment it registers a name), small (``helpers.small_kwargs``), and the
#: variants of a config: CaiT's keys, CoaT's parallel block, CoaT scales without serial blocks,
#: ViT's other residual forms and positions.
MODEL_CASES = [(n, small_kwargs(n)) for n in one_name_per_variant()] + [
    ("cait_digits", {"class_token_in_keys": False}),
    ("coat_digits", {"parallel_mode": "cross_attention"}),
    ("coat_lite_digits", {"serial_depths": (1, 0, 1, 1)}),
    ("coat_digits", {"serial_depths": (0, 1, 0, 1)}),
    ("vit_digits", {"distilled": True, "init_values": 0.1, "no_embed_class": True})]


def _case_id(name: str, kwargs: dict) -> str:
    shown = {k: v for k, v in kwargs.items() if k not in ("img_size", "depth")}
    return name + "".join(f"-{k}={v}" for k, v in shown.items())


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["fp64", "fp32"])
@pytest.mark.parametrize("name, kwargs", MODEL_CASES, ids=[_case_id(*case) for case in MODEL_CASES])
def test_model_gradients_match_autograd(name, kwargs, dtype):
    """The smallest model of every family and variant (and the variants of a config, above):
    the gradient of the label-smoothed cross-entropy with
    respect to every parameter (under its canonical state_dict key; shared tensors summed over
    their uses) and the images.  A parameter no forward uses (the CPE and CRPE of a scale
    without blocks, unless parallel blocks run them) has no gradient in either room."""
    torch.manual_seed(0)
    model = vit_scratch.create_model(name, **kwargs).to(TORCH_DTYPE[dtype]).eval()
    vit_scratch.randomize_weights_(model, seed=3)
    cfg = model.cfg
    r = np.random.default_rng(4)
    images = r.standard_normal((3, cfg.in_chans, *model.pretrained_cfg["input_size"][1:]))
    images = images.astype(dtype)
    labels = np.array([1, 7, 3]) % cfg.num_classes
    x = torch.tensor(images, requires_grad=True)
    F.cross_entropy(model(x), torch.from_numpy(labels), label_smoothing=0.1).backward()
    ref = {k: p.grad.numpy() for k, p in model.named_parameters() if p.grad is not None}
    idle = {k for k, p in model.named_parameters() if p.grad is None}
    empty_scale = 0 in getattr(cfg, "serial_depths", ())
    assert idle == (unused_keys(cfg) if empty_scale else set())
    assert idle or not empty_scale  # the case tests what it is named for
    ref["images"] = x.grad.numpy()

    np_model = vit_scratch.create_numpy_model(
        name, vit_scratch.state_dict_to_numpy(model.state_dict()), **kwargs)
    logits, cache = np_model.forward_with_cache(images)
    plain = np_model(images)
    assert np.abs(logits - plain).max() <= (1e-12 if dtype == np.float64 else 1e-5)
    loss, c_loss = layers.cross_entropy_forward(logits, labels, 0.1)
    dimages, grads = np_model.backward(layers.cross_entropy_backward(1.0, c_loss), cache)
    grads["images"] = dimages
    assert list(grads) == [k for k, _ in model.named_parameters() if k not in idle] + ["images"]
    errors = rel_errors(grads, ref)
    worst = max(errors, key=errors.get)
    assert errors[worst] <= TOL[dtype], (worst, errors[worst])


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["fp64", "fp32"])
def test_distilled_model_gradients_through_both_heads_match_autograd(dtype):
    """DeiT's distillation token and head in distilled training: both heads' logits, the hard
    distillation loss (class head: the labels, smoothed; distillation head: a teacher's
    classes), and the gradient of every parameter -- the two tokens and the two heads
    included -- and of the images, against autograd on the PyTorch model in training mode
    (stochastic depth off, so that both compute the same function)."""
    kwargs = dict(distilled=True, drop_path_rate=0.0)
    torch.manual_seed(0)
    model = vit_scratch.create_model("vit_digits", **kwargs).to(TORCH_DTYPE[dtype]).train()
    vit_scratch.randomize_weights_(model, seed=3)
    model.set_distilled_training(True)
    images = np.random.default_rng(4).standard_normal((3, 1, 24, 24)).astype(dtype)
    labels, teacher = np.array([1, 7, 3]), np.array([1, 2, 9])
    x = torch.tensor(images, requires_grad=True)
    logits_t, dist_t = model(x)
    (0.5 * F.cross_entropy(logits_t, torch.from_numpy(labels), label_smoothing=0.1)
     + 0.5 * F.cross_entropy(dist_t, torch.from_numpy(teacher))).backward()
    ref = {k: p.grad.numpy() for k, p in model.named_parameters()}
    ref["images"] = x.grad.numpy()

    np_model = vit_scratch.create_numpy_model(
        "vit_digits", vit_scratch.state_dict_to_numpy(model.state_dict()), **kwargs)
    np_model.set_distilled_training(True)
    (logits, dist), cache = np_model.forward_with_cache(images)
    same = 1e-12 if dtype == np.float64 else 1e-5
    assert max(np.abs(logits - logits_t.detach().numpy()).max(),
               np.abs(dist - dist_t.detach().numpy()).max()) <= same
    loss, c_loss = training.hard_distillation_forward(logits, dist, labels, teacher, 0.1)
    dimages, grads = np_model.backward(list(training.hard_distillation_backward(1.0, c_loss)),
                                       cache)
    grads["images"] = dimages
    assert list(grads) == list(ref)
    assert {"dist_token", "head_dist.weight", "head_dist.bias"} <= set(grads)
    errors = rel_errors(grads, ref)
    worst = max(errors, key=errors.get)
    assert errors[worst] <= TOL[dtype], (worst, errors[worst])
    with pytest.raises(ValueError, match="dout must be a list of 2 arrays"):
        np_model.backward(np.zeros_like(logits), cache)  # the pair takes the pair's gradients


def test_shared_tensors_are_one_array_and_get_one_gradient():
    """CoaT's aliases (``serial_blocks2.0.cpe`` is ``cpe2``; the parallel block's ``mlp3`` is
    its ``mlp2``) are the same array in the NumPy model, so an update reaches every name; the
    gradients leave them out and give the sum under the canonical key."""
    model, sd = digits_params("coat_digits")
    np_model = vit_scratch.create_numpy_model("coat_digits", sd)
    aliases = alias_keys(np_model)
    assert aliases["serial_blocks2.0.cpe.proj.weight"] == "cpe2.proj.weight"
    assert aliases["parallel_blocks.1.mlp4.fc1.weight"] == "parallel_blocks.1.mlp2.fc1.weight"
    for alias, key in aliases.items():
        assert np_model.params[alias] is np_model.params[key]
    assert list(trainable_params(np_model)) == [k for k, _ in model.named_parameters()]


def test_threads_and_drop_path():
    """Splitting the batch over threads gives the same loss and gradients, with the same
    stochastic-depth masks (each chunk takes its rows of one draw for the whole batch); a
    drawn mask changes the result (DropPath is on in training mode)."""
    _, sd = digits_params("vit_digits")
    np_model = vit_scratch.create_numpy_model("vit_digits", sd, drop_path_rate=0.5)
    r = np.random.default_rng(0)
    images, labels = r.standard_normal((5, 1, 24, 24)), np.array([0, 1, 2, 3, 4])
    one = training.loss_and_grads(np_model, images, labels, 0.1, np.random.default_rng(7), 1)
    two = training.loss_and_grads(np_model, images, labels, 0.1, np.random.default_rng(7), 2)
    off = training.loss_and_grads(np_model, images, labels, 0.1, None, 2)
    assert abs(one[0] - two[0]) <= 1e-13 and abs(one[0] - off[0]) > 1e-6
    assert max(np.abs(one[1][k] - two[1][k]).max() for k in one[1]) <= 1e-13


# --- the optimiser and the training step --------------------------------------------------------

@pytest.mark.parametrize("name", one_name_per_variant())
def test_weight_decay_rule_is_the_trainers(name):
    """``training.decays`` picks exactly the tensors ``vit_scratch.train.param_groups`` puts in
    its decay group, in every family and variant (DeiT III's LayerScale vectors: not decayed)."""
    from vit_scratch.train import param_groups

    model, sd = digits_params(name, **small_kwargs(name))
    decayed = {id(p) for p in param_groups(model, 0.3)[0]["params"]}
    expected = {k for k, p in model.named_parameters() if id(p) in decayed}
    np_model = vit_scratch.create_numpy_model(name, sd, **small_kwargs(name))
    got = {k for k, v in trainable_params(np_model).items() if training.decays(k, v)}
    assert got == expected and got


def test_adamw_equals_torch():
    """Five steps of ``training.AdamW`` on random tensors and gradients equal
    ``torch.optim.AdamW`` with the same groups (decayed and not), to float64 rounding."""
    r = np.random.default_rng(0)
    params = {"fc.weight": r.standard_normal((4, 3)), "fc.bias": r.standard_normal(3)}
    tp = {k: torch.nn.Parameter(torch.tensor(v)) for k, v in params.items()}
    opt = torch.optim.AdamW([{"params": [tp["fc.weight"]], "weight_decay": 0.3},
                             {"params": [tp["fc.bias"]], "weight_decay": 0.0}], lr=1e-2)
    ours = training.AdamW(params, weight_decay=0.3)
    for step in range(5):
        grads = {k: r.standard_normal(v.shape) for k, v in params.items()}
        for k, g in grads.items():
            tp[k].grad = torch.tensor(g)
        lr = training.lr_at(step, 5, 2, 1e-2)
        for group in opt.param_groups:
            group["lr"] = lr
        opt.step()
        ours.step(grads, lr)
    for k in params:
        assert np.abs(params[k] - tp[k].detach().numpy()).max() <= 1e-15
    state = ours.state_dict()
    again = training.AdamW({k: v.copy() for k, v in params.items()}, weight_decay=0.3)
    again.load_state_dict(state)
    assert again.steps == 5
    assert np.array_equal(again.exp_avg_sq["fc.weight"], ours.exp_avg_sq["fc.weight"])


# --- bad input ----------------------------------------------------------------------------------

def test_stochastic_depth_and_hard_distillation_name_bad_arguments():
    """One line naming the argument: a batch size that is not a count of samples (NumPy would
    say "negative dimensions"), and a distillation head whose logits are not the class head's
    shape (the two cross-entropies would each run and give a loss)."""
    rng = np.random.default_rng(0)
    for batch, shown in ((-1, "-1"), (2.0, "2.0 (float)")):
        with pytest.raises(ValueError, match=re.escape(f"batch must be an int >= 0, got {shown}")):
            layers.drop_path_mask(batch, 0.1, rng)
    assert layers.drop_path_mask(0, 0.1, rng).shape == (0,)  # an empty batch draws nothing
    labels = np.array([0, 1])
    message = re.escape("logits_dist must have the shape of logits (2, 10) (the distillation "
                        "head classifies the same images into the same classes), got shape "
                        "(2, 9)")
    for f in (training.hard_distillation, training.hard_distillation_forward):
        with pytest.raises(ValueError, match=message):
            f(np.zeros((2, 10)), np.zeros((2, 9)), labels, labels)


def test_an_empty_batch_goes_forward_and_back():
    """Batch 0 through multi-head attention and a block of each residual form, forward and
    backward: empty activations, zero parameter gradients of the right shapes."""
    r = np.random.default_rng(0)
    x = np.zeros((0, 5, 8))
    w, b = r.standard_normal((24, 8)), r.standard_normal(24)
    out, cache = attention.multi_head_attention_forward(x, w, b, w[:8], b[:8], 2)
    dx, dw, db, dpw, dpb = attention.multi_head_attention_backward(out, cache)
    assert out.shape == dx.shape == (0, 5, 8) and not dw.any() and dpb.shape == (8,)
    from vit_scratch.torch_nn.layerscale import ResidualBlock

    for form in layerscale.RESIDUAL_FORMS:
        p = {k: v.detach().numpy().astype(np.float64) for k, v in
             ResidualBlock(8, 2, form).state_dict().items()}
        out, cache = layerscale.residual_block_forward(x, p, 2, form)
        dx, grads = layerscale.residual_block_backward(out, cache)
        assert dx.shape == (0, 5, 8) and set(grads) == set(p), form
        assert all(g.shape == p[k].shape and not g.any() for k, g in grads.items()), form


def test_backward_refuses_a_cache_from_another_function():
    x, w = np.ones((2, 3)), np.ones((4, 3))
    _, cache = layers.linear_forward(x, w)
    with pytest.raises(ValueError, match=r"layer_norm_backward was given the cache of "
                                         r"linear_forward \(its output had shape \(2, 4\)\)"):
        layers.layer_norm_backward(np.ones((2, 4)), cache)
    with pytest.raises(ValueError, match="cache must be the Cache that gelu_forward returned"):
        layers.gelu_backward(np.ones(3), {"x": np.ones(3)})


def test_backward_refuses_a_dout_of_another_shape_or_dtype():
    _, cache = layers.linear_forward(np.ones((2, 3)), np.ones((4, 3)))
    with pytest.raises(ValueError, match=r"dout has shape \(2, 5\) and dtype float64, but "
                                         r"linear_forward's output had shape \(2, 4\)"):
        layers.linear_backward(np.ones((2, 5)), cache)
    with pytest.raises(ValueError, match=r"dtype float32, but linear_forward's output had shape "
                                         r"\(2, 4\) and dtype float64"):
        layers.linear_backward(np.ones((2, 4), dtype=np.float32), cache)
    with pytest.raises(ValueError, match="dout is a Tensor"):
        layers.linear_backward(torch.ones(2, 4), cache)
    _, sd = digits_params("vit_digits")
    np_model = vit_scratch.create_numpy_model("vit_digits", sd)
    logits, cache = np_model.forward_with_cache(np.zeros((2, 1, 24, 24)))
    with pytest.raises(ValueError, match=r"VisionTransformer_backward: dout has shape \(3, 10\)"):
        np_model.backward(np.zeros((3, 10)), cache)
    _, list_cache = coscale.parallel_block_forward(
        [np.zeros((1, 65, 64)), np.zeros((1, 17, 64)), np.zeros((1, 5, 64))],
        sub_params(digits_params("coat_digits")[1], "parallel_blocks.0."),
        [(8, 8), (4, 4), (2, 2)], 4)
    with pytest.raises(ValueError, match=r"dout must be a list of 3 arrays of shapes"):
        coscale.parallel_block_backward(np.zeros((1, 65, 64)), list_cache)


def test_cross_entropy_bad_labels():
    logits = np.zeros((2, 3))
    with pytest.raises(ValueError, match=r"class indices in \[0, 3\), got values from 0 to 3"):
        layers.cross_entropy(logits, np.array([0, 3]))
    with pytest.raises(ValueError, match=r"labels must be integers of shape \(B,\) = \(2,\)"):
        layers.cross_entropy(logits, np.array([0.0, 1.0]))
    with pytest.raises(ValueError, match=r"label_smoothing must be in \[0, 1\)"):
        layers.cross_entropy(logits, np.array([0, 1]), 1.0)


def test_optimizer_refuses_mixed_dtypes_and_read_only_arrays():
    with pytest.raises(ValueError, match="mix dtypes"):
        training.AdamW({"a.w": np.ones((2, 2)), "a.b": np.ones(2, dtype=np.float32)})
    frozen = np.ones((2, 2))
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match=r"params\['w'\] is read-only"):
        training.AdamW({"w": frozen})
    opt = training.AdamW({"w": np.ones((2, 2))})
    with pytest.raises(ValueError, match=r"the gradient of w has shape \(2, 2\) \(float32\)"):
        opt.step({"w": np.ones((2, 2), dtype=np.float32)})


@pytest.mark.parametrize("lr", [float("nan"), float("inf"), -1e-3, "1e-3"])
def test_a_bad_learning_rate_is_refused_before_any_update(lr):
    """The constructor refuses these rates; ``AdamW.step`` and ``train_step`` do as well (without
    the check, NaN and inf turn every weight into NaN, and a negative rate climbs the loss)."""
    _, sd = digits_params("vit_digits")
    np_model = vit_scratch.create_numpy_model("vit_digits", {k: v.copy() for k, v in sd.items()})
    opt = training.AdamW(trainable_params(np_model))
    before = {k: v.copy() for k, v in np_model.params.items()}
    images, labels = np.zeros((2, 1, 24, 24)), np.array([0, 1])
    message = re.escape(f"lr must be a finite number >= 0, got {lr!r}")
    with pytest.raises(ValueError, match=message):
        training.train_step(np_model, opt, images, labels, lr)
    _, grads, _ = training.loss_and_grads(np_model, images, labels)
    with pytest.raises(ValueError, match=message):
        opt.step(grads, lr)
    with pytest.raises(ValueError, match=message):
        training.AdamW(trainable_params(np_model), lr=lr)
    assert opt.steps == 0
    assert all(np.array_equal(v, before[k]) for k, v in np_model.params.items())


def test_nan_loss_stops_with_the_step_number_before_the_update():
    _, sd = digits_params("vit_digits")
    np_model = vit_scratch.create_numpy_model("vit_digits", {k: v.copy() for k, v in sd.items()})
    opt = training.AdamW(trainable_params(np_model))
    images, labels = np.zeros((2, 1, 24, 24)), np.array([0, 1])
    training.train_step(np_model, opt, images, labels, 1e-3)
    before = {k: v.copy() for k, v in np_model.params.items()}
    np_model.params["head.bias"][0] = np.nan  # the head's bias, shared with the optimiser
    with pytest.raises(FloatingPointError, match=r"the loss is nan at step 2; training stopped "
                                                 r"before the update \(the weights are those "
                                                 r"after step 1\)"):
        training.train_step(np_model, opt, images, labels, 1e-3)
    assert opt.steps == 1
    assert all(np.array_equal(v, before[k], equal_nan=True) for k, v in np_model.params.items()
               if k != "head.bias")


def test_training_mode_refuses_dropout_and_a_bad_rng():
    _, sd = digits_params("vit_digits")
    np_model = vit_scratch.create_numpy_model("vit_digits", sd, drop_rate=0.1)
    with pytest.raises(ValueError, match=r"without dropout, but vit_digits has drop_rate=0.1"):
        np_model.forward_with_cache(np.zeros((1, 1, 24, 24)), rng=np.random.default_rng(0))
    np_model.forward_with_cache(np.zeros((1, 1, 24, 24)))  # eval mode: dropout is the identity
    with pytest.raises(ValueError, match="rng must be a numpy.random.Generator"):
        training.loss_and_grads(np_model, np.zeros((1, 1, 24, 24)), np.array([0]), rng=0)
