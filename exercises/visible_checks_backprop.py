"""The visible checks of notebooks 10 and 11 (backprop by hand; distillation and stochastic
depth); registered in ``exercises.visible_checks``.
"""
from __future__ import annotations

import math

import numpy as np

from exercises.feedback import Fail, close
from exercises.visible_checks import check, shape

# ---- 10 backprop by hand ------------------------------------------------------------------------

def _autograd(fn, arrays, dout):
    import torch

    ts = [torch.tensor(np.asarray(a, dtype=np.float64), requires_grad=True) for a in arrays]
    fn(*ts).backward(torch.tensor(dout))
    return [t.grad.numpy() for t in ts]


def _compare(got, names, expected, what):
    if not isinstance(got, (tuple, list)) or len(got) != len(names):
        raise Fail(f"return the tuple ({', '.join(names)})")
    for name, mine, ref in zip(names, got, expected):
        shape(mine, ref.shape, name)
        close(mine, ref, f"{name} vs autograd ({what})", atol=1e-10)


@check("10.1", "gelu_tanh_backward", "dx = dout · (½(1 + tanh u) + ½·x·(1 − tanh²u)·u′), "
       "u′ = √(2/π)(1 + 3·0.044715·x²)")
def _(m):
    import torch.nn.functional as F

    r = np.random.default_rng(0)
    x, dout = 2 * r.standard_normal((3, 4)), r.standard_normal((3, 4))
    (dx,) = _autograd(lambda t: F.gelu(t, approximate="tanh"), (x,), dout)
    _compare((m.gelu_tanh_backward(dout, x),), ("dx",), (dx,), "x of shape (3, 4)")


@check("10.2", "talking_heads_backward", "backward in reverse: dv, dw = dout vᵀ; a head mix's backward "
       "mixes with Wᵀ and dW[g, h] = Σ dy_g·a_h; the softmax backward over the keys; dq = s·da k, "
       "dk = s·daᵀ q")
def _(m):
    import torch

    r = np.random.default_rng(0)
    B, h, n, d = 2, 3, 4, 2
    q, k, v, dout = (r.standard_normal((B, h, n, d)) for _ in range(4))
    wl, ww = r.standard_normal((h, h)), r.standard_normal((h, h))              # not symmetric
    bl, bw = r.standard_normal(h), r.standard_normal(h)

    def forward(q_, k_, v_, wl_, bl_, ww_, bw_):
        a = q_ @ k_.transpose(-2, -1) / math.sqrt(d)
        a = torch.einsum("gh,bhij->bgij", wl_, a) + bl_[:, None, None]
        a = torch.einsum("gh,bhij->bgij", ww_, a.softmax(dim=-1)) + bw_[:, None, None]
        return a @ v_

    names = ("dq", "dk", "dv", "dproj_l_weight", "dproj_l_bias", "dproj_w_weight", "dproj_w_bias")
    expected = _autograd(forward, (q, k, v, wl, bl, ww, bw), dout)
    _compare(m.talking_heads_backward(dout, q, k, v, wl, bl, ww, bw), names, expected, "B=2, 3 heads, N=4")


@check("10.3", "class_attention_backward", "the softmax backward as in 10.2; dW = Σ dyᵀ x over "
       "batch and tokens; x[:, 0] gets dq @ q_weight too")
def _(m):
    r = np.random.default_rng(0)
    B, n, C, h = 2, 3, 4, 2
    x, dout = r.standard_normal((B, n, C)), r.standard_normal((B, 1, C))
    ws = [r.standard_normal((C, C)) / 2 for _ in range(3)]

    def forward(x_, wq, wk, wv):
        import torch

        q = (x_[:, :1] @ wq.T).reshape(B, 1, h, C // h).transpose(1, 2)
        k = (x_ @ wk.T).reshape(B, n, h, C // h).transpose(1, 2)
        v = (x_ @ wv.T).reshape(B, n, h, C // h).transpose(1, 2)
        a = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(C // h), dim=-1)
        return (a @ v).transpose(1, 2).reshape(B, 1, C)

    expected = _autograd(forward, (x, *ws), dout)
    _compare(m.class_attention_backward(dout, x, *ws, h), ("dx", "dq_weight", "dk_weight", "dv_weight"),
             expected, "B=2, N=3, C=4, 2 heads")


@check("10.4", "conv_attention_backward", "the factorized term as in notebook 10, section 6 (mind s in dq); "
       "EV = q ⊙ conv(v) adds dout ⊙ conv(v) to dq and conv_backward(dout ⊙ q) to dv; the input's "
       "backward uses the kernel rotated by 180°")
def _(m):
    import torch
    import torch.nn.functional as F

    r = np.random.default_rng(0)
    B, h, d, (H, W) = 2, 3, 2, (3, 4)                     # 3 heads in 2 groups, a 3x4 grid
    q, k, v, dout = (r.standard_normal((B, h, 1 + H * W, d)) for _ in range(4))
    weights = [r.standard_normal((1 * d, 1, 3, 3)), r.standard_normal((2 * d, 1, 5, 5))]
    biases = [r.standard_normal(1 * d), r.standard_normal(2 * d)]

    def forward(q_, k_, v_, w0, w1, b0, b1):
        out = q_ @ (k_.softmax(dim=-2).transpose(-2, -1) @ v_) / math.sqrt(d)
        img = v_[:, :, 1:].transpose(-2, -1).reshape(B, h * d, H, W)     # head-major channels
        conv = torch.cat([F.conv2d(img[:, :d], w0, b0, padding=1, groups=d),
                          F.conv2d(img[:, d:], w1, b1, padding=2, groups=2 * d)], dim=1)
        conv = conv.reshape(B, h, d, H * W).transpose(-2, -1)
        return out + torch.cat([torch.zeros_like(q_[:, :, :1]), q_[:, :, 1:] * conv], dim=2)

    expected = _autograd(forward, (q, k, v, *weights, *biases), dout)
    got = m.conv_attention_backward(dout, q, k, v, (H, W), weights, biases)
    if not isinstance(got, (tuple, list)) or len(got) != 5:
        raise Fail("return the tuple (dq, dk, dv, dweights, dbiases)")
    if not all(isinstance(g, (tuple, list)) and len(g) == 2 for g in got[3:]):
        raise Fail("dweights and dbiases are lists with one array per head group (2 here)")
    names = ("dq", "dk", "dv", "dweights[0]", "dweights[1]", "dbiases[0]", "dbiases[1]")
    _compare([*got[:3], *got[3], *got[4]], names, expected, "B=2, 3 heads in groups {3: 1, 5: 2}, a 3x4 grid")


# ---- 11 distillation and stochastic depth -------------------------------------------------------

@check("11.1", "hard_distillation_heads", "y_t = argmax(teacher_logits); dz = ½(softmax(z) − target)/B for "
       "each head (smoothing on the labels only); dW = dzᵀ token, db = Σ dz; dtokens[:, 0] = dz W, "
       "dtokens[:, 1] = dz_dist W_dist, the other rows 0")
def _(m):
    import torch
    import torch.nn.functional as F

    r = np.random.default_rng(0)
    B, n, C, K = 3, 2, 4, 5
    tokens = r.standard_normal((B, 2 + n, C))
    w, b, w_dist, b_dist = r.standard_normal((K, C)), r.standard_normal(K), r.standard_normal((K, C)), \
        r.standard_normal(K)
    labels, teacher_logits = np.array([0, 3, 1]), r.standard_normal((B, K))
    teacher_logits[[0, 2], [0, 1]] += 5.0                      # the teacher agrees on images 0 and 2
    ts = [torch.tensor(a, requires_grad=True) for a in (tokens, w, b, w_dist, b_dist)]
    loss = 0.5 * F.cross_entropy(ts[0][:, 0] @ ts[1].T + ts[2], torch.from_numpy(labels), label_smoothing=0.1) \
        + 0.5 * F.cross_entropy(ts[0][:, 1] @ ts[3].T + ts[4], torch.from_numpy(teacher_logits.argmax(1)))
    loss.backward()
    got = m.hard_distillation_heads(tokens, w, b, w_dist, b_dist, labels, teacher_logits, label_smoothing=0.1)
    if not isinstance(got, (tuple, list)) or len(got) != 6:
        raise Fail("return the tuple (loss, dtokens, dhead_weight, dhead_bias, dhead_dist_weight, dhead_dist_bias)")
    close(float(got[0]), loss.item(), "the loss vs PyTorch's cross-entropies", atol=1e-10)
    _compare(got[1:], ("dtokens", "dhead_weight", "dhead_bias", "dhead_dist_weight", "dhead_dist_bias"),
             [t.grad.numpy() for t in ts], "3 images, 5 classes, ε = 0.1")


@check("11.2", "drop_path_residual and its backward", "m_b = keep_b / (1 − drop_prob) on the branch only "
       "(evaluation: m = 1); dx = dout + (m·dout) W, dW = Σ (m·dout)ᵀ x, db = Σ m·dout")
def _(m):
    import torch

    r = np.random.default_rng(0)
    x, dout = r.standard_normal((4, 3, 2)), r.standard_normal((4, 3, 2))
    w, b = r.standard_normal((2, 2)), r.standard_normal(2)
    keep, p = np.array([True, False, True, True]), 0.5
    for training in (True, False):
        factor = keep / (1 - p) if training else np.ones(4)

        def forward(x_, w_, b_):
            return x_ + torch.from_numpy(factor).reshape(-1, 1, 1) * (x_ @ w_.T + b_)

        ts = [torch.tensor(a, requires_grad=True) for a in (x, w, b)]
        out = forward(*ts)
        out.backward(torch.from_numpy(dout))
        mode = "training" if training else "evaluation"
        got = m.drop_path_residual(x, w, b, keep, p, training=training)
        shape(got, x.shape, f"drop_path_residual in {mode}")
        close(got, out.detach().numpy(), f"the output in {mode} (image 1 dropped, p = 0.5)", atol=1e-12)
        _compare(m.drop_path_residual_backward(dout, x, w, keep, p, training=training), ("dx", "dweight", "dbias"),
                 [t.grad.numpy() for t in ts], mode)
