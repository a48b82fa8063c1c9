"""HIDDEN TESTS -- instructors only. Notebook 05: class attention and talking heads."""
import math

import numpy as np
import torch
import torch.nn.functional as F

from exercises.feedback import Fail, close, expect_error
from exercises.grader.judge import exercise

from .h03_vision_transformer import check_keys, forward, grads_reach_everything, load
from .references import NUMPY_ONLY, N, T, attention, rng

MOD = "ex05_class_attention"
TH_FORWARD = "forward vs an independent reference (float64, random weights)"


def ca_params(C, seed, bias=True):
    r = rng(seed)
    p = {f"{n}.weight": r.standard_normal((C, C)) / math.sqrt(C) for n in ("q", "k", "v", "proj")}
    p["proj.bias"] = 0.3 * r.standard_normal(C)
    if bias:
        p.update({f"{n}.bias": 0.3 * r.standard_normal(C) for n in ("q", "k", "v")})
    return p


def weights(p):
    """The library's argument order: q/k/v weight and bias, then proj weight and bias."""
    return (p["q.weight"], p.get("q.bias"), p["k.weight"], p.get("k.bias"), p["v.weight"], p.get("v.bias"),
            p["proj.weight"], p["proj.bias"])


def class_attn_ref(x, p, h, class_token_in_keys=True, scale="before", heads="hd", queries="cls", kv="first",
                   return_attention=False):
    """Class attention in float64 torch ops, with switches for the classic mistakes: the scale
    'none', 'after' the softmax or 'C' (1/√C, the whole width), the heads split (d h), every
    token a query, the last token left out of the keys instead of the class token."""
    t = {k: T(np.asarray(v, dtype=np.float64)) for k, v in p.items() if v is not None}
    x = T(np.asarray(x, dtype=np.float64))
    B, n_tok, C = x.shape
    d = C // h
    kv_tokens = x if class_token_in_keys else (x[:, 1:] if kv == "first" else x[:, :-1])
    q_tokens = x[:, :1] if queries == "cls" else x

    def proj(u, name):
        return F.linear(u, t[name + ".weight"], t.get(name + ".bias"))

    def split(u):
        b, m, _ = u.shape
        if heads == "hd":
            return u.reshape(b, m, h, d).transpose(1, 2)
        return u.reshape(b, m, d, h).permute(0, 3, 1, 2)

    q, k, v = split(proj(q_tokens, "q")), split(proj(kv_tokens, "k")), split(proj(kv_tokens, "v"))
    s = q @ k.transpose(-2, -1)
    if scale == "before":
        s = s / math.sqrt(d)
    elif scale == "C":
        s = s / math.sqrt(C)
    w = torch.softmax(s, dim=-1)
    if scale == "after":
        w = w / math.sqrt(d)
    out = w @ v
    m = out.shape[2]
    out = out.transpose(1, 2).reshape(B, m, C) if heads == "hd" else out.permute(0, 2, 3, 1).reshape(B, m, C)
    out = N(proj(out, "proj"))
    return (out, N(w)) if return_attention else out


def ca_mistakes(x, p, h, class_token_in_keys=True):
    d = x.shape[-1] // h
    out = [(class_attn_ref(x, p, h, class_token_in_keys, scale="after"),
            f"the weights' rows sum to 1/√d = {1 / math.sqrt(d):.3g}, not 1: the scale 1/√d goes on the "
            "scores, before the softmax"),
           (class_attn_ref(x, p, h, class_token_in_keys, scale="none"), "the scores need the scale 1/√d "
                                                              "(d = C / num_heads)"),
           (class_attn_ref(x, p, h, class_token_in_keys, scale="C") if h > 1 else np.zeros(0),
            f"scaled by 1/√C = 1/√{x.shape[-1]}, the whole width: each head's scores are scaled by 1/√d, "
            f"d = C / num_heads = {d}"),
           (class_attn_ref(x, p, h, class_token_in_keys, queries="all"), "only the class token is a query: the "
                                                                 "result is (B, 1, C), the update of the "
                                                                 "class token alone")]
    if class_token_in_keys:
        out.append((class_attn_ref(x, p, h, class_token_in_keys=False),
                    "the class token is missing from the keys: in CaiT it attends to itself and to the "
                    "patches (keys and values from all 1 + N tokens)"))
    else:
        out += [(class_attn_ref(x, p, h, class_token_in_keys=True),
                 "with class_token_in_keys=False the class token must not be among the keys and values "
                 "(use the patches u[:, 1:] only)"),
                (class_attn_ref(x, p, h, class_token_in_keys=False, kv="last"),
                 "the class token is the first token: leave out u[:, 0], not the last token")]
    C = x.shape[-1]
    if h > 1 and C // h > 1:
        out.append((class_attn_ref(x, p, h, class_token_in_keys, heads="dh"),
                    "heads split in the wrong order: channels are head-major, (h d), not (d h)"))
    return out


def attn_mistakes(x, p, h, class_token_in_keys=True):
    d = x.shape[-1] // h
    return [(class_attn_ref(x, p, h, class_token_in_keys, scale="after", return_attention=True)[1],
             f"the weights' rows sum to 1/√d = {1 / math.sqrt(d):.3g}, not 1: scale the scores before the "
             "softmax"),
            (class_attn_ref(x, p, h, class_token_in_keys, scale="none", return_attention=True)[1],
             "the weights come from unscaled scores: divide q kᵀ by √d before the softmax"),
            (class_attn_ref(x, p, h, class_token_in_keys, scale="C", return_attention=True)[1] if h > 1
             else np.zeros(0), f"scaled by 1/√C, the whole width: each head's scores are scaled by 1/√d, "
                               f"d = C / num_heads = {d}")]


def large_scores_case(seed):
    """Inputs whose scores q·k/√d reach the thousands: exp() overflows unless each row's maximum
    is subtracted first."""
    return 100 * rng(seed).standard_normal((2, 9, 8)), ca_params(8, seed + 1)


def _finite(got, what):
    if not np.isfinite(np.asarray(got, dtype=float)).all():
        raise Fail(f"{what}: NaN or inf for large scores: exp() overflowed -- subtract each row's maximum "
                   "before exp()")


def _pair(got, what):
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        raise Fail(f"{what}: with return_attention=True return the pair (out, weights)")
    return got


def _hand_case():
    x = np.array([[[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]]])       # cls = 0: its query is 0
    eye = {f"{n}.weight": np.eye(2) for n in ("q", "k", "v", "proj")}
    eye.update({f"{n}.bias": np.zeros(2) for n in ("q", "k", "v", "proj")})
    return x, eye


@exercise("5.1", "class_attention", MOD, 12, forbid=NUMPY_ONLY)
def class_attention(g):
    f = g.fn("class_attention")

    @g.part("worked example: a zero query averages the values", 2)
    def _():
        x, eye = _hand_case()
        close(f(x, *weights(eye), 1), [[[1 / 3, 1 / 3]]], "identity weights, class token 0, 1 head",
              atol=1e-12, mistakes=lambda: ca_mistakes(x, eye, 1))

    @g.part("random inputs vs an independent reference", 3)
    def _():
        r = rng(501)
        for B, n, C, h in [(2, 6, 12, 3), (1, 9, 8, 2), (3, 1, 6, 1), (2, 16, 16, 4), (1, 4, 10, 5)]:
            x, p = r.standard_normal((B, 1 + n, C)), ca_params(C, int(r.integers(1 << 30)))
            close(f(x, *weights(p), h), class_attn_ref(x, p, h),
                  f"class attention (B={B}, N={n}, C={C}, {h} heads)", atol=1e-10,
                  mistakes=lambda: ca_mistakes(x, p, h))

    @g.part("return_attention=True: the (B, h, 1, 1 + N) weights", 1)
    def _():
        x, p = rng(510).standard_normal((2, 1 + 5, 8)), ca_params(8, 511)
        out, attn = _pair(f(x, *weights(p), 2, return_attention=True), "class_attention(..., return_attention=True)")
        ref_out, ref_attn = class_attn_ref(x, p, 2, return_attention=True)
        close(attn, ref_attn, "the attention weights", atol=1e-10, mistakes=lambda: attn_mistakes(x, p, 2))
        close(out, ref_out, "the output next to the weights", atol=1e-10)

    @g.part("no q/k/v biases (None)", 1)
    def _():
        x, p = rng(502).standard_normal((2, 5, 8)), ca_params(8, 503, bias=False)
        close(f(x, *weights(p), 2), class_attn_ref(x, p, 2), "class attention with q/k/v biases None",
              atol=1e-10, mistakes=lambda: ca_mistakes(x, p, 2))

    @g.part("float32 in, float32 out", 1)
    def _():
        x = rng(504).standard_normal((2, 7, 8)).astype(np.float32)
        p = {k: v.astype(np.float32) for k, v in ca_params(8, 505).items()}
        close(f(x, *weights(p), 2), class_attn_ref(x, p, 2), "float32 class attention", atol=1e-5,
              dtype=np.float32, mistakes=lambda: ca_mistakes(x, p, 2))

    @g.part("large scores stay finite", 2)
    def _():
        x, p = large_scores_case(506)
        got = f(x, *weights(p), 2)
        _finite(got, "class attention with scores in the thousands")
        close(got, class_attn_ref(x, p, 2), "class attention with large scores", atol=1e-8, rtol=1e-10,
              mistakes=lambda: ca_mistakes(x, p, 2))

    def make(n=3, h=2):
        C = 2 * h
        x, p = rng(508).standard_normal((1, 1 + n, C)), ca_params(C, 509)
        return f.later(x, *weights(p), h)

    g.no_loops(2, make, {"tokens": ({"n": 3}, {"n": 19}, 16), "heads": ({"h": 2}, {"h": 12}, 10)},
               requires=["random inputs vs an independent reference"])


@exercise("5.2", "class_attention(class_token_in_keys=False)", MOD, 8, forbid=NUMPY_ONLY)
def class_attention_without_cls_key(g):
    f = g.fn("class_attention")

    @g.part("worked example: the class token sees the patches only", 2)
    def _():
        x, eye = _hand_case()
        close(f(x, *weights(eye), 1, class_token_in_keys=False), [[[0.5, 0.5]]],
              "identity weights, class_token_in_keys=False", atol=1e-12,
              mistakes=lambda: ca_mistakes(x, eye, 1, class_token_in_keys=False))

    @g.part("random inputs vs an independent reference, large scores too", 2)
    def _():
        r = rng(521)
        for B, n, C, h in [(2, 6, 12, 3), (1, 9, 8, 2), (3, 2, 6, 1), (2, 16, 16, 4)]:
            x, p = r.standard_normal((B, 1 + n, C)), ca_params(C, int(r.integers(1 << 30)))
            close(f(x, *weights(p), h, class_token_in_keys=False), class_attn_ref(x, p, h, class_token_in_keys=False),
                  f"class_token_in_keys=False (B={B}, N={n}, C={C}, {h} heads)", atol=1e-10,
                  mistakes=lambda: ca_mistakes(x, p, h, class_token_in_keys=False))
        x, p = large_scores_case(528)
        got = f(x, *weights(p), 2, class_token_in_keys=False)
        _finite(got, "class_token_in_keys=False with scores in the thousands")
        close(got, class_attn_ref(x, p, 2, class_token_in_keys=False), "class_token_in_keys=False with large scores",
              atol=1e-8, rtol=1e-10)

    @g.part("return_attention=True: the (B, h, 1, N) weights", 1)
    def _():
        x, p = rng(526).standard_normal((2, 1 + 5, 8)), ca_params(8, 527)
        _, attn = _pair(f(x, *weights(p), 2, class_token_in_keys=False, return_attention=True),
                        "class_attention(..., class_token_in_keys=False, return_attention=True)")
        close(attn, class_attn_ref(x, p, 2, class_token_in_keys=False, return_attention=True)[1],
              "the weights over the N patches", atol=1e-10,
              mistakes=lambda: attn_mistakes(x, p, 2, class_token_in_keys=False))

    @g.part("one patch: its value, projected", 1)
    def _():
        x, p = rng(522).standard_normal((2, 2, 6)), ca_params(6, 523)
        v = x[:, 1:] @ p["v.weight"].T + p["v.bias"]
        close(f(x, *weights(p), 3, class_token_in_keys=False), v @ p["proj.weight"].T + p["proj.bias"],
              "a single key gets weight 1, so the output is proj(v(patch))", atol=1e-10)

    def make(n=3, h=2):
        C = 2 * h
        x, p = rng(524).standard_normal((1, 1 + n, C)), ca_params(C, 525)
        return f.later(x, *weights(p), h, class_token_in_keys=False)

    g.no_loops(2, make, {"tokens": ({"n": 3}, {"n": 19}, 16), "heads": ({"h": 2}, {"h": 12}, 10)},
               requires=["random inputs vs an independent reference, large scores too"])


def th_params(C, h, seed):
    r = rng(seed)
    return {"qkv.weight": r.standard_normal((3 * C, C)) / math.sqrt(C), "qkv.bias": 0.3 * r.standard_normal(3 * C),
            "proj_l.weight": r.standard_normal((h, h)) / math.sqrt(h), "proj_l.bias": 0.3 * r.standard_normal(h),
            "proj_w.weight": r.standard_normal((h, h)) / math.sqrt(h), "proj_w.bias": 0.3 * r.standard_normal(h),
            "proj.weight": r.standard_normal((C, C)) / math.sqrt(C), "proj.bias": 0.3 * r.standard_normal(C)}


def talking_heads_ref(x, p, h, swap=False, transpose_mix=False, post_mix=True, scale=True, softmax_dim=-1):
    t = {k: T(np.asarray(v, dtype=np.float64)) for k, v in p.items()}
    x = T(np.asarray(x, dtype=np.float64))
    B, n, C = x.shape
    d = C // h
    q, k, v = F.linear(x, t["qkv.weight"], t["qkv.bias"]).reshape(B, n, 3, h, d).permute(2, 0, 3, 1, 4)
    a = (q * (d ** -0.5 if scale else 1.0)) @ k.transpose(-2, -1)            # (B, h, N, N)
    first, second = ("proj_w", "proj_l") if swap else ("proj_l", "proj_w")

    def mix(a, name):
        w = t[name + ".weight"].T if transpose_mix else t[name + ".weight"]
        return torch.einsum("bhij,gh->bgij", a, w) + t[name + ".bias"][None, :, None, None]

    a = mix(a, first).softmax(dim=softmax_dim)
    if post_mix:
        a = mix(a, second)
    out = (a @ v).transpose(1, 2).reshape(B, n, C)
    return N(F.linear(out, t["proj.weight"], t["proj.bias"]))


def th_mistakes(x, p, h):
    out = [(talking_heads_ref(x, p, h, swap=True), "proj_l mixes the heads before the softmax, proj_w after it"),
           (talking_heads_ref(x, p, h, post_mix=False), "the heads must be mixed again after the softmax (proj_w)"),
           (talking_heads_ref(x, p, h, scale=False), "the scores need the scale d^-½"),
           (talking_heads_ref(x, p, h, softmax_dim=1), "the softmax runs over the keys (the last axis), "
                                                       "not over the heads"),
           (talking_heads_ref(x, p, h, softmax_dim=-2) if x.shape[1] > 1 else np.zeros(0),
            "the softmax runs over the queries (axis -2): each query's weights over the keys (the last "
            "axis) must sum to 1 -- a.softmax(dim=-1)")]
    if h > 1:
        out.append((talking_heads_ref(x, p, h, transpose_mix=True),
                    "the heads are mixed with the transposed matrix: apply the Linear to the head axis "
                    "(permute the heads last), so output head g = Σ_h W[g, h]·a_h + b_g"))
    return out


@exercise("5.3", "TalkingHeadAttention", MOD, 12)
def talking_head_attention(g):
    make = g.cls("TalkingHeadAttention")

    def keys(C, h, bias=True):
        k = {"qkv.weight": (3 * C, C), "qkv.bias": (3 * C,), "proj_l.weight": (h, h), "proj_l.bias": (h,),
             "proj_w.weight": (h, h), "proj_w.bias": (h,), "proj.weight": (C, C), "proj.bias": (C,)}
        if not bias:
            del k["qkv.bias"]
        return k

    @g.part(TH_FORWARD, 4)
    def _():
        r = rng(531)
        for B, n, C, h in [(2, 7, 12, 4), (1, 5, 8, 2), (3, 1, 6, 3), (2, 9, 10, 5)]:
            p = th_params(C, h, int(r.integers(1 << 30)))
            m = make(C, h)
            check_keys(m, keys(C, h), f"TalkingHeadAttention({C}, {h})")
            m = load(m, p)
            x = r.standard_normal((B, n, C))
            close(forward(m, x), talking_heads_ref(x, p, h), f"TalkingHeadAttention({C}, {h}) on (B={B}, N={n})",
                  atol=1e-10, mistakes=lambda: th_mistakes(x, p, h))

    @g.part("state_dict keys and shapes (timm's names)", 2, requires=[TH_FORWARD])
    def _():
        check_keys(make(12, 4), keys(12, 4), "TalkingHeadAttention(12, 4)")
        check_keys(make(8, 2, qkv_bias=False), keys(8, 2, bias=False), "TalkingHeadAttention(8, 2, qkv_bias=False)")

    @g.part("identity head mixing gives plain multi-head attention", 1)
    def _():
        C, h = 12, 3
        p = th_params(C, h, 532)
        p.update({"proj_l.weight": np.eye(h), "proj_l.bias": np.zeros(h),
                  "proj_w.weight": np.eye(h), "proj_w.bias": np.zeros(h)})
        x = rng(533).standard_normal((2, 6, C))
        qkv = (x @ p["qkv.weight"].T + p["qkv.bias"]).reshape(2, 6, 3, h, C // h).transpose(2, 0, 3, 1, 4)
        plain = attention(qkv[0], qkv[1], qkv[2]).transpose(0, 2, 1, 3).reshape(2, 6, C)
        close(forward(load(make(C, h), p), x), plain @ p["proj.weight"].T + p["proj.bias"],
              "talking heads with identity mixing vs multi-head attention", atol=1e-10,
              mistakes=lambda: th_mistakes(x, p, h))

    @g.part("gradients reach every parameter", 1, requires=[TH_FORWARD])
    def _():
        m = load(make(8, 2), th_params(8, 2, 534))
        grads_reach_everything(m, rng(535).standard_normal((2, 4, 8)))

    @g.part("ValueError when dim is not a multiple of num_heads", 1, requires=[TH_FORWARD])
    def _():
        expect_error(ValueError, lambda: make(10, 4), "TalkingHeadAttention(10, 4)")

    @g.part("float32 (PyTorch's default dtype)", 1)
    def _():
        p = {k: v.astype(np.float32) for k, v in th_params(8, 4, 536).items()}
        m = load(make(8, 4), p, dtype=torch.float32)
        x = rng(537).standard_normal((2, 5, 8)).astype(np.float32)
        close(forward(m, x), talking_heads_ref(x, p, 4), "float32 talking heads", atol=2e-5, dtype=np.float32,
              mistakes=lambda: th_mistakes(x, p, 4))

    def make_call(n=3, h=2):
        C = 2 * h
        m = load(make(C, h), th_params(C, h, 538))
        x = T(rng(539).standard_normal((1, n, C)))

        return m.later(x)

    g.no_loops(2, make_call, {"tokens": ({"n": 3}, {"n": 19}, 16), "heads": ({"h": 2}, {"h": 12}, 10)},
               requires=[TH_FORWARD])
