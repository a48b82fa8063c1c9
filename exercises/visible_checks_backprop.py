"""The visible checks of notebook 10 (backprop by hand); registered in
``exercises.visible_checks``.
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


@check("10.1", "layer_norm_backward", "g = dout·weight; dx = (g − mean(g) − x̂·mean(g·x̂)) / σ; "
       "dweight = Σ dout·x̂ and dbias = Σ dout over every axis but the last")
def _(m):
    import torch.nn.functional as F

    r = np.random.default_rng(0)
    x, dout = r.standard_normal((2, 3, 4)), r.standard_normal((2, 3, 4))
    w, b = 1 + r.standard_normal(4), r.standard_normal(4)
    expected = _autograd(lambda x_, w_, b_: F.layer_norm(x_, (4,), w_, b_, eps=1e-6), (x, w, b), dout)
    _compare(m.layer_norm_backward(dout, x, w), ("dx", "dweight", "dbias"), expected, "x (2, 3, 4)")


@check("10.2", "softmax_backward", "dx = p ⊙ (dout − Σ dout ⊙ p), the sum along `axis` with "
       "keepdims=True")
def _(m):
    import torch

    r = np.random.default_rng(0)
    x, dout = r.standard_normal((3, 5)), r.standard_normal((3, 5))
    for axis in (-1, 0):
        p = torch.softmax(torch.tensor(x), dim=axis).numpy()
        (dx,) = _autograd(lambda t: torch.softmax(t, dim=axis), (x,), dout)
        _compare((m.softmax_backward(dout, p, axis=axis),), ("dx",), (dx,), f"(3, 5), axis {axis}")


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


@check("10.4", "factorized_attention_backward", "dkv = s·qᵀ dout, dq = s·dout kvᵀ, dk̃ = v dkvᵀ, "
       "dv = k̃ dkv, then the softmax backward down the tokens (axis -2)")
def _(m):
    import torch

    r = np.random.default_rng(0)
    q, k, v, dout = (r.standard_normal((2, 4, 3)) for _ in range(4))
    expected = _autograd(lambda q_, k_, v_: q_ @ (torch.softmax(k_, dim=-2).transpose(-2, -1) @ v_)
                         / math.sqrt(3), (q, k, v), dout)
    _compare(m.factorized_attention_backward(dout, q, k, v), ("dq", "dk", "dv"), expected, "(2, 4, 3)")
