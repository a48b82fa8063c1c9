"""The visible checks of notebooks 04-08 (LayerScale, class attention, factorized attention,
convolutional position encodings, co-scale); registered in ``exercises.visible_checks``.
"""
from __future__ import annotations

import math

import numpy as np

from exercises.feedback import Fail, close, expect_error
from exercises.visible_checks import check, load_module, random_block, shape, torch_block

# ---- 04 LayerScale ------------------------------------------------------------------------------

@check("4.1", "layerscale_init_value", "0.1 for depth <= 18, 1e-5 for depth <= 24, 1e-6 beyond")
def _(m):
    for depth, value in [(12, 0.1), (18, 0.1), (24, 1e-5), (36, 1e-6)]:
        got = m.layerscale_init_value(depth)
        if got != value:
            raise Fail(f"layerscale_init_value({depth}): expected {value}, got {got}")


@check("4.2", "LayerScaleBlock", "gamma_1 = nn.Parameter(init_values · ones(dim)); x + gamma_1 * attn(...)")
def _(m):
    import torch

    blk = m.LayerScaleBlock(8, 2, init_values=0.1)
    sd = {k: v.detach().numpy() for k, v in blk.state_dict().items()}
    for name in ("gamma_1", "gamma_2"):
        if name not in sd:
            raise Fail(f"state_dict has no {name}")
        close(sd[name], np.full(8, 0.1), f"{name} at initialisation (init_values=0.1)", atol=1e-7)
    params = random_block(8, 32, seed=5)
    gamma = (np.linspace(0.5, 1.5, 8), np.linspace(2.0, 0.0, 8))
    blk = load_module(blk, {**params, "gamma_1": gamma[0], "gamma_2": gamma[1]})
    x = np.random.default_rng(6).standard_normal((2, 5, 8))
    with torch.no_grad():
        got = blk(torch.from_numpy(x)).numpy()
    close(got, torch_block(x, params, 2, gamma=gamma), "LayerScaleBlock vs PyTorch's functional ops", atol=1e-10)


# ---- 05 class attention -------------------------------------------------------------------------

def _identity_case():
    x = np.array([[[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]]])       # class token 0, patches (1, 0) and (0, 1)
    eye, zero = np.eye(2), np.zeros(2)
    return x, (eye, zero, eye, zero, eye, zero, eye, zero)      # q, k, v, proj: weight and bias


def _torch_class_attention(x, w, num_heads, class_token_in_keys=True):
    """Class attention with PyTorch's ops: the query from the class token only."""
    import torch
    import torch.nn.functional as F

    x = torch.as_tensor(x, dtype=torch.float64)
    qw, qb, kw, kb, vw, vb, pw, pb = (torch.as_tensor(a, dtype=torch.float64) for a in w)
    B, T, C = x.shape
    z = x if class_token_in_keys else x[:, 1:]
    split = lambda t: t.reshape(B, t.shape[1], num_heads, C // num_heads).transpose(1, 2)  # noqa: E731
    out = F.scaled_dot_product_attention(split(F.linear(x[:, :1], qw, qb)), split(F.linear(z, kw, kb)),
                                         split(F.linear(z, vw, vb)))
    return F.linear(out.transpose(1, 2).reshape(B, 1, C), pw, pb).numpy()


def _random_weights(C, seed):
    r = np.random.default_rng(seed)
    return tuple(r.standard_normal((C, C)) / math.sqrt(C) if i % 2 == 0 else r.standard_normal(C) for i in range(8))


def _scaled_after(expected, d):
    return [(np.asarray(expected) / math.sqrt(d), f"your weights' rows sum to 1/√d = {1 / math.sqrt(d):.3g}: "
             "the scale 1/√d goes on the scores, before the softmax")]


@check("5.1", "class_attention", "q from u[:, :1] only; k and v from all tokens; scores scaled by 1/√d before "
       "the softmax; output (B, 1, C)")
def _(m):
    x, w = _identity_case()
    got = m.class_attention(x, *w, 1)
    shape(got, (1, 1, 2), "class_attention of (1, 3, 2) tokens")
    close(got, [[[1 / 3, 1 / 3]]], "a zero query weighs the 3 values equally: mean of (0,0), (1,0), (0,1)",
          atol=1e-12, mistakes=_scaled_after([[[1 / 3, 1 / 3]]], 2))
    out, attn = m.class_attention(x, *w, 1, return_attention=True)
    shape(attn, (1, 1, 1, 3), "the weights with return_attention=True (B, h, 1, 1 + N)")
    close(attn, np.full((1, 1, 1, 3), 1 / 3), "equal weights for a zero query", atol=1e-12,
          mistakes=_scaled_after(np.full((1, 1, 1, 3), 1 / 3), 2))
    x, w = np.random.default_rng(11).standard_normal((2, 1 + 4, 6)), _random_weights(6, 12)
    got = m.class_attention(x, *w, 3)
    shape(got, (2, 1, 6), "class_attention of (2, 1 + 4, 6) tokens, 3 heads")
    close(got, _torch_class_attention(x, w, 3), "3 heads of d = 2, random weights: vs PyTorch's ops", atol=1e-10)


@check("5.2", "class_attention(class_token_in_keys=False)", "keys and values from u[:, 1:], the query still "
       "from u[:, :1]")
def _(m):
    x, w = _identity_case()
    got = m.class_attention(x, *w, 1, class_token_in_keys=False)
    shape(got, (1, 1, 2), "class_attention(..., class_token_in_keys=False)")
    close(got, [[[0.5, 0.5]]], "the mean of the 2 patches only", atol=1e-12,
          mistakes=[([[[1 / 3, 1 / 3]]], "the class token is still among the keys: use u[:, 1:] for k and v")]
          + _scaled_after([[[0.5, 0.5]]], 2))
    x, w = np.random.default_rng(13).standard_normal((2, 1 + 4, 6)), _random_weights(6, 14)
    close(m.class_attention(x, *w, 3, class_token_in_keys=False), _torch_class_attention(x, w, 3, False),
          "3 heads of d = 2, random weights, class_token_in_keys=False: vs PyTorch's ops", atol=1e-10)


@check("5.3", "TalkingHeadAttention", "a (B, h, N, N) -> permute(0, 2, 3, 1) -> proj_l -> permute back; "
       "softmax; the same with proj_w")
def _(m):
    import torch
    import torch.nn.functional as F

    att = m.TalkingHeadAttention(8, 2)
    want = {"qkv.weight": (24, 8), "qkv.bias": (24,), "proj_l.weight": (2, 2), "proj_l.bias": (2,),
            "proj_w.weight": (2, 2), "proj_w.bias": (2,), "proj.weight": (8, 8), "proj.bias": (8,)}
    got = {k: tuple(v.shape) for k, v in att.state_dict().items()}
    if got != want:
        raise Fail(f"state_dict: expected {want}, got {got}")
    r = np.random.default_rng(7)
    sd = {k: 0.5 * r.standard_normal(s) for k, s in want.items()}
    sd.update({"proj_l.weight": np.eye(2), "proj_l.bias": np.zeros(2), "proj_w.weight": np.eye(2),
               "proj_w.bias": np.zeros(2)})
    att = load_module(att, sd)
    x = torch.from_numpy(r.standard_normal((2, 5, 8)))
    t = {k: torch.from_numpy(v) for k, v in sd.items()}
    q, k, v = F.linear(x, t["qkv.weight"], t["qkv.bias"]).reshape(2, 5, 3, 2, 4).permute(2, 0, 3, 1, 4)
    plain = F.linear(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(2, 5, 8),
                     t["proj.weight"], t["proj.bias"])
    with torch.no_grad():
        close(att(x).numpy(), plain.numpy(), "with identity head mixing it is plain multi-head attention",
              atol=1e-10)
    # proj_l = [[1, 0], [1, 1]]: before the softmax, head 1's scores become head 0's + head 1's
    with torch.no_grad():
        att.proj_l.weight.copy_(torch.tensor([[1.0, 0.0], [1.0, 1.0]]))
        s = q @ k.transpose(-2, -1) / 2.0                                          # d = 4: scale 1/2
        w = torch.softmax(torch.stack([s[:, 0], s[:, 0] + s[:, 1]], dim=1), dim=-1)
        mixed = F.linear((w @ v).transpose(1, 2).reshape(2, 5, 8), t["proj.weight"], t["proj.bias"])
        close(att(x).numpy(), mixed.numpy(), "proj_l = [[1, 0], [1, 1]] mixes the scores before the softmax: "
              "head 1 gets head 0's + head 1's", atol=1e-10)


# ---- 06 factorized attention --------------------------------------------------------------------

@check("6.1", "factorized_attention", "softmax(k) over axis -2 (the tokens); context = softmax(k)ᵀ v is "
       "(d, d); out = q @ context / √d")
def _(m):
    q, k, v = np.array([[1.0], [2.0]]), np.array([[0.0], [math.log(3.0)]]), np.array([[4.0], [8.0]])
    got = m.factorized_attention(q, k, v)
    shape(got, (2, 1), "factorized attention of 2 tokens, d = 1")
    close(got, [[7.0], [14.0]], "softmax over the tokens [1/4, 3/4], context 1/4·4 + 3/4·8 = 7", atol=1e-12)
    import torch

    r = np.random.default_rng(15)
    q, k, v = (r.standard_normal((2, 3, 5, 4)) for _ in range(3))                # 2 images, 3 heads
    t = [torch.from_numpy(a) for a in (q, k, v)]
    expected = (t[0] @ (torch.softmax(t[1], dim=-2).transpose(-1, -2) @ t[2]) / 2.0).numpy()
    close(m.factorized_attention(q, k, v), expected, "2 images, 3 heads, 5 tokens, d = 4: vs PyTorch's ops",
          atol=1e-10)


@check("6.2", "factorized_attention_flops + crossover", "per head: 2·N²·d (softmax) vs 2·N·d² "
       "(factorized), d = C/h; summed over the h heads")
def _(m):
    got = tuple(m.factorized_attention_flops(196, 64, 1))
    if got != (2 * 196 * 196 * 64, 2 * 196 * 64 * 64):
        raise Fail(f"factorized_attention_flops(196, 64, 1): expected (4917248, 1605632), got {got}")
    got = tuple(m.factorized_attention_flops(196, 64, 8))
    if got != (2 * 196 * 196 * 64, 2 * 196 * 8 * 8 * 8):
        raise Fail(f"factorized_attention_flops(196, 64, 8): expected (4917248, 200704), got {got}")
    if m.crossover_num_tokens(64, 1) != 65:
        raise Fail(f"crossover_num_tokens(64, 1): expected 65, got {m.crossover_num_tokens(64, 1)}")


# ---- 07 convolutional position encodings --------------------------------------------------------

@check("7.1", "clipped_relative_indices", "np.arange(N)[None, :] - np.arange(N)[:, None], then np.clip")
def _(m):
    got = m.clipped_relative_indices(6, 3)
    shape(got, (6, 6), "clipped_relative_indices(6, 3)")
    close(np.asarray(got)[4], [-1, -1, -1, -1, 0, 1], "row i = 4 (offsets j - i clipped to ±1)", atol=0)
    expect_error(ValueError, lambda: m.clipped_relative_indices(6, 4), "an even window")


@check("7.2", "depthwise_conv2d", "pad by d·(k // 2), then sum w[c, 0, u, v] · xp[:, c, i + d·u, j + d·v] over the "
       "kernel (no flip)")
def _(m):
    x = np.arange(12.0).reshape(1, 1, 3, 4)
    w = np.zeros((1, 1, 3, 3))
    w[0, 0, 0, 0] = 1.0                                       # out[i, j] = x[i - d, j - d]
    got = m.depthwise_conv2d(x, w)
    shape(got, (1, 1, 3, 4), "a 3x3 depthwise conv of a (1, 1, 3, 4) image")
    expected = np.zeros((1, 1, 3, 4))
    expected[..., 1:, 1:] = x[..., :-1, :-1]
    close(got, expected, "a top-left 1 shifts the image down and right by one pixel", atol=1e-12)
    x = np.arange(30.0).reshape(1, 1, 5, 6)
    got = m.depthwise_conv2d(x, w, dilation=2)
    shape(got, (1, 1, 5, 6), "a 3x3 depthwise conv with dilation 2 of a (1, 1, 5, 6) image")
    expected = np.zeros((1, 1, 5, 6))
    expected[..., 2:, 2:] = x[..., :-2, :-2]
    close(got, expected, "with dilation 2 the top-left tap reads two pixels up and left", atol=1e-12,
          mistakes=[(np.pad(x[..., :-1, :-1], ((0, 0), (0, 0), (1, 0), (1, 0))),
                     "dilation 2 gives the same as dilation 1: space the taps d pixels apart")])


@check("7.3", "conv_rel_pos_enc", "v's image tokens -> (B, h·d, H, W), head-major (channel h_i·d + c); "
       "per group, in the lists' order, depthwise_conv2d; back to (B, h, H·W, d); times q's image tokens; a "
       "zero row in front")
def _(m):
    import torch
    import torch.nn.functional as F

    r = np.random.default_rng(8)
    B, h, d, (H, W) = 2, 3, 2, (3, 4)                     # 3 heads in 2 groups, a 3x4 grid
    q, v = r.standard_normal((B, h, 1 + H * W, d)), r.standard_normal((B, h, 1 + H * W, d))
    weights = [r.standard_normal((1 * d, 1, 5, 5)), r.standard_normal((2 * d, 1, 3, 3))]   # {5: 1, 3: 2}
    biases = [r.standard_normal(1 * d), r.standard_normal(2 * d)]
    got = m.conv_rel_pos_enc(q, v, (H, W), weights, biases)
    shape(got, q.shape, "CRPE of (2, 3 heads, 1 + 3·4, 2) tokens")
    t = {"q": torch.from_numpy(q), "v": torch.from_numpy(v)}
    img = t["v"][:, :, 1:].transpose(-1, -2).reshape(B, h * d, H, W)                    # head-major channels
    conv = torch.cat([F.conv2d(img[:, :d], torch.from_numpy(weights[0]), torch.from_numpy(biases[0]), padding=2,
                               groups=d),
                      F.conv2d(img[:, d:], torch.from_numpy(weights[1]), torch.from_numpy(biases[1]), padding=1,
                               groups=2 * d)], dim=1)
    ev = t["q"][:, :, 1:] * conv.reshape(B, h, d, H * W).transpose(-1, -2)
    expected = torch.cat([torch.zeros_like(t["q"][:, :, :1]), ev], dim=2).numpy()
    close(np.asarray(got)[:, :, 0], np.zeros((B, h, d)), "the class token's row (all zeros)", atol=0)
    close(got, expected, "EV = q ⊙ conv(v): 3 heads in groups {5: 1, 3: 2}, a 3x4 grid, vs F.conv2d(groups=C)",
          atol=1e-10)


# ---- 08 co-scale --------------------------------------------------------------------------------

def _torch_resize(x, size, align_corners=False):
    import torch
    import torch.nn.functional as F

    return F.interpolate(torch.as_tensor(x, dtype=torch.float64), size=size, mode="bilinear",
                         align_corners=align_corners).numpy()


@check("8.1", "bilinear_resize", "align_corners=False: src = (i + 0.5)·n_in/n_out − 0.5, clamped at 0; "
       "align_corners=True: src = i·(n_in − 1)/(n_out − 1); i0 = floor(src), i1 = min(i0 + 1, n_in − 1), "
       "λ = src − i0")
def _(m):
    x = np.array([[[[1.0, 2.0], [3.0, 4.0]]]])
    got = m.bilinear_resize(x, (4, 4))
    shape(got, (1, 1, 4, 4), "bilinear_resize of a 2x2 image to (4, 4)")
    close(got[0, 0, 0], [1.0, 1.25, 1.75, 2.0], "the first row (as F.interpolate, align_corners=False)", atol=1e-12,
          mistakes=[([1.0, 4 / 3, 5 / 3, 2.0], "this is align_corners=True: with align_corners=False the "
                                              "centres sit at i + 0.5")])
    close(got[0, 0, :, 0], [1.0, 1.5, 2.5, 3.0], "the first column", atol=1e-12)
    got = m.bilinear_resize(x, (3, 3), align_corners=True)
    shape(got, (1, 1, 3, 3), "bilinear_resize of a 2x2 image to (3, 3), align_corners=True")
    close(got[0, 0], [[1.0, 1.5, 2.0], [2.0, 2.5, 3.0], [3.0, 3.5, 4.0]],
          "align_corners=True keeps the corners and puts the midpoints between them", atol=1e-12)
    x = np.random.default_rng(16).standard_normal((2, 3, 3, 5))                   # a 3x5 image, 3 channels
    for size, corners in [((7, 4), False), ((2, 8), True)]:
        got = m.bilinear_resize(x, size, align_corners=corners)
        shape(got, (2, 3) + size, f"bilinear_resize of a 3x5 image to {size}, align_corners={corners}")
        close(got, _torch_resize(x, size, corners), f"a 3x5 image to {size[0]}x{size[1]}, align_corners={corners}: "
              "vs F.interpolate", atol=1e-10)


@check("8.2", "interpolate_tokens", "cls = x[:, :1]; image = x[:, 1:].transpose(1, 2).reshape(B, C, H, W); "
       "F.interpolate; flatten back; cat")
def _(m):
    import torch

    x = torch.zeros(1, 5, 2, dtype=torch.float64)
    x[0, 0] = torch.tensor([7.0, -7.0])                       # the class token
    x[0, 1:, 0] = torch.tensor([1.0, 2.0, 3.0, 4.0])           # channel 0: the grid [[1, 2], [3, 4]]
    got = m.interpolate_tokens(x, (2, 2), (4, 4))
    shape(got, (1, 17, 2), "interpolate_tokens of (1, 1 + 2·2, 2) to a 4x4 grid")
    got = got.detach().numpy()
    close(got[0, 0], [7.0, -7.0], "the class token, carried over unchanged", atol=0)
    close(got[0, 1:5, 0], [1.0, 1.25, 1.75, 2.0], "channel 0 of the first grid row", atol=1e-12)
    close(got[0, 1:, 1], np.zeros(16), "channel 1 (all zeros in the input)", atol=1e-12)
    x = torch.from_numpy(np.random.default_rng(17).standard_normal((2, 1 + 2 * 3, 4)))   # a 2x3 grid, C = 4
    got = m.interpolate_tokens(x, (2, 3), (3, 5))
    shape(got, (2, 1 + 3 * 5, 4), "interpolate_tokens of (2, 1 + 2·3, 4) to a 3x5 grid")
    img = x[:, 1:].transpose(1, 2).reshape(2, 4, 2, 3)
    expected = torch.cat([x[:, :1], torch.from_numpy(_torch_resize(img.numpy(), (3, 5))).flatten(2).transpose(1, 2)],
                         dim=1)
    close(got.detach().numpy(), expected.numpy(), "a 2x3 grid of 4 channels to 3x5: vs F.interpolate", atol=1e-10)
