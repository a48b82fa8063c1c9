"""HIDDEN TESTS -- instructors only. Mutants: the reference solutions with one classic mistake each.

``tests/test_exercise_grading.py`` grades every mutant and checks that it loses points, and that
the feedback names the mistake (``expect``). A mutant is a list of exact text replacements in
one solution module; each ``old`` text must occur exactly once.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

SOLUTIONS = Path(__file__).resolve().parents[1] / "solutions"


@dataclass(frozen=True)
class Mutant:
    name: str
    exercise: str
    module: str
    edits: tuple          # ((old, new), ...)
    expect: str           # a phrase the feedback must contain

    def source(self) -> str:
        text = (SOLUTIONS / f"{self.module}.py").read_text()
        for old, new in self.edits:
            count = text.count(old)
            if count != 1:
                raise ValueError(f"mutant {self.name}: {old!r} occurs {count} times in {self.module}.py")
            text = text.replace(old, new)
        return text

    def write(self, folder) -> Path:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{self.module}.py").write_text(self.source())
        return folder


def M(name, exercise, module, *edits, expect):
    return Mutant(name, exercise, module, tuple(edits), expect)


E01, E02, E03, E04 = "ex01_patch_embedding", "ex02_self_attention", "ex03_vision_transformer", "ex04_layerscale"
E05, E06, E07, E08 = "ex05_class_attention", "ex06_factorized_attention", "ex07_conv_position_encoding", "ex08_coscale"
E10 = "ex10_backprop"

MUTANTS = [
    # notebook 01
    M("patchify: channel last (row, col, channel)", "1.1", E01,
      ("x.transpose(0, 2, 4, 1, 3, 5)", "x.transpose(0, 2, 4, 3, 5, 1)"), expect="(row, col, channel)"),
    M("unpatchify: grid read column by column", "1.2", E01,
      ("x = patches.reshape(B, gh, gw, C, P, P)            # (B, gh, gw, C, p1, p2)\n"
       "    x = x.transpose(0, 3, 1, 4, 2, 5)",
       "x = patches.reshape(B, gw, gh, C, P, P)\n    x = x.transpose(0, 3, 2, 4, 1, 5)"),
      expect="column by column"),
    M("hwc linear: plain reshape of the conv weight", "1.3", E01,
      ("weight.transpose(0, 2, 3, 1).reshape(E, -1)", "weight.reshape(E, -1)"), expect="plain reshape"),
    M("similarity: class token not skipped", "1.4", E01,
      ("pe = pos_embed[0, num_prefix_tokens:]", "pe = pos_embed[0]"), expect="prefix tokens"),
    # notebook 02
    M("softmax: no max subtracted (overflow)", "2.1", E02,
      ("z = x - x.max(axis=axis, keepdims=True)", "z = x"), expect="overflow"),
    M("softmax over the wrong axis", "2.1", E02,
      ("z = x - x.max(axis=axis, keepdims=True)", "z = x - x.max(axis=-1, keepdims=True)"),
      ("return e / e.sum(axis=axis, keepdims=True)", "return e / e.sum(axis=-1, keepdims=True)"),
      expect="last axis"),
    M("attention: scale after the softmax", "2.2", E02,
      ("scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(d)", "scores = q @ np.swapaxes(k, -1, -2)"),
      ("return softmax(scores, axis=-1) @ v", "return softmax(scores, axis=-1) / math.sqrt(d) @ v"),
      expect="scale after the softmax"),
    M("attention: mask ignored", "2.2", E02,
      ("scores = np.where(mask, scores, -np.inf)", "scores = scores"), expect="mask is ignored"),
    M("attention: softmax over the queries", "2.2", E02,
      ("return softmax(scores, axis=-1) @ v", "return softmax(scores, axis=-2) @ v"),
      expect="over the queries"),
    M("attention: scaled by 1/d", "2.2", E02,
      ("scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(d)", "scores = q @ np.swapaxes(k, -1, -2) / d"),
      expect="scaled by 1/d"),
    M("attention: k not transposed (a shape only when N_k = d)", "2.2", E02,
      ("scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(d)", "scores = q @ k / math.sqrt(d)"),
      expect="k is not transposed"),
    M("attention: a Python loop over the queries", "2.2", E02,
      ("return softmax(scores, axis=-1) @ v",
       "return np.concatenate([softmax(scores[..., i:i + 1, :], axis=-1) @ v\n"
       "                           for i in range(scores.shape[-2])], axis=-2)"),
      expect="loop over tokens"),
    M("padding mask inverted", "2.3", E02,
      ("keep = np.arange(num_tokens) < lengths[:, None]", "keep = np.arange(num_tokens) >= lengths[:, None]"),
      expect="inverted"),
    M("heads split in the wrong order (d h)", "2.4", E02,
      ("x.reshape(B, N, num_heads, C // num_heads).transpose(0, 2, 1, 3)",
       "x.reshape(B, N, C // num_heads, num_heads).transpose(0, 3, 1, 2)"), expect="head-major"),
    M("softmax backward without the row term", "2.5", E02,
      ("dS = P * (dP - (dP * P).sum(axis=-1, keepdims=True))", "dS = P * dP"), expect="second term"),
    # notebook 03
    M("parameter count: class token without a position", "3.1", E03,
      ("tokens = C + (1 + N) * C", "tokens = C + N * C"), expect="position embedding too"),
    M("parameter count: round() for the MLP's hidden size", "3.1", E03,
      ("hidden = int(C * mlp_ratio)", "hidden = round(C * mlp_ratio)"), expect="rounded down"),
    M("block: softmax without subtracting the maximum", "3.2", E03,
      ("scores = np.exp(scores - scores.max(axis=-1, keepdims=True))", "scores = np.exp(scores)"),
      expect="subtract each row's maximum"),
    M("block: softmax subtracting the minimum", "3.2", E03,
      ("scores = np.exp(scores - scores.max(axis=-1, keepdims=True))",
       "scores = np.exp(scores - scores.min(axis=-1, keepdims=True))"), expect="subtract each row's maximum"),
    M("block: tanh GELU", "3.2", E03,
      ("t = 0.5 * t * (1.0 + scipy.special.erf(t / math.sqrt(2.0)))",
       "t = 0.5 * t * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (t + 0.044715 * t**3)))"),
      expect="tanh"),
    M("block: LayerNorm eps 1e-5", "3.2", E03,
      ("def layer_norm(t, w, b, eps=1e-6):", "def layer_norm(t, w, b, eps=1e-5):"), expect="eps"),
    M("rollout without the residual identity", "3.3", E03,
      ("a = attn.mean(axis=1) + np.eye(attn.shape[-1])", "a = attn.mean(axis=1)"), expect="residual"),
    M("Block: nn.LayerNorm's default eps", "3.4", E03,
      ("self.norm1 = nn.LayerNorm(dim, eps=1e-6)\n        self.attn = nn.Module()",
       "self.norm1 = nn.LayerNorm(dim)\n        self.attn = nn.Module()"), expect="eps"),
    M("Block: round() for the MLP's hidden size", "3.4", E03,
      ("hidden = int(dim * mlp_ratio)", "hidden = round(dim * mlp_ratio)"), expect="rounded down"),
    M("Block: tanh GELU", "3.4", E03,
      ("self.mlp.act = nn.GELU()", "self.mlp.act = nn.GELU(approximate='tanh')"), expect="tanh"),
    # notebook 04
    M("LayerScale rule: depth 18 excluded", "4.1", E04,
      ("if depth <= 18:", "if depth < 18:"), expect="included"),
    M("LayerScale over the token axis", "4.2", E04,
      ("x = x + self.gamma_1 * out", "x = x + self.gamma_1[:, None] * out"),
      ("return x + self.gamma_2 * mlp", "return x + self.gamma_2[:, None] * mlp"), expect="scales the tokens"),
    # notebook 05
    M("class attention: class token missing from the keys", "5.1", E05,
      ("z = u if class_token_in_keys else u[:, 1:]", "z = u[:, 1:]"), expect="missing from the keys"),
    M("class_token_in_keys=False drops the last token", "5.2", E05,
      ("z = u if class_token_in_keys else u[:, 1:]", "z = u if class_token_in_keys else u[:, :-1]"),
      expect="first token"),
    M("class attention: scale after the softmax", "5.1", E05,
      ("scores = (q / math.sqrt(d)) @ np.swapaxes(k, -1, -2)", "scores = q @ np.swapaxes(k, -1, -2)"),
      ("weights = scores / scores.sum(axis=-1, keepdims=True)",
       "weights = scores / scores.sum(axis=-1, keepdims=True) / math.sqrt(d)"), expect="before the softmax"),
    M("class attention: heads split (d h)", "5.1", E05,
      ("q = linear(u[:, :1], q_weight, q_bias).reshape(B, 1, h, d).transpose(0, 2, 1, 3)",
       "q = linear(u[:, :1], q_weight, q_bias).reshape(B, 1, d, h).transpose(0, 3, 1, 2)"),
      ("k = linear(z, k_weight, k_bias).reshape(B, M, h, d).transpose(0, 2, 1, 3)",
       "k = linear(z, k_weight, k_bias).reshape(B, M, d, h).transpose(0, 3, 1, 2)"),
      ("v = linear(z, v_weight, v_bias).reshape(B, M, h, d).transpose(0, 2, 1, 3)",
       "v = linear(z, v_weight, v_bias).reshape(B, M, d, h).transpose(0, 3, 1, 2)"),
      ("out = (weights @ v).transpose(0, 2, 1, 3).reshape(B, 1, C)",
       "out = (weights @ v).transpose(0, 2, 3, 1).reshape(B, 1, C)"), expect="head-major"),
    M("talking heads: proj_l and proj_w swapped", "5.3", E05,
      ("a = self.proj_l(a.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)                 # mix heads before",
       "a = self.proj_w(a.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)"),
      ("a = self.proj_w(a.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)                 # ... and after",
       "a = self.proj_l(a.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)"), expect="before the softmax"),
    # notebook 06
    M("factorized: softmax over channels instead of tokens", "6.1", E06,
      ("k = np.exp(k - k.max(axis=-2, keepdims=True))", "k = np.exp(k - k.max(axis=-1, keepdims=True))"),
      ("k = k / k.sum(axis=-2, keepdims=True)", "k = k / k.sum(axis=-1, keepdims=True)"),
      expect="over the tokens"),
    M("factorized: (q softmax(k)ᵀ) v builds an N×N matrix", "6.1", E06,
      ("context = np.swapaxes(k, -1, -2) @ v                        # (..., d, d)\n"
       "    return (q @ context) / math.sqrt(d)",
       "return ((q @ np.swapaxes(k, -1, -2)) @ v) / math.sqrt(d)"), expect="peak memory"),
    M("factorized: key softmax summed over the channels without keepdims (N = d only)", "6.1", E06,
      ("k = k / k.sum(axis=-2, keepdims=True)", "k = k / k.sum(axis=-1)[..., None, :]"),
      expect="over the tokens"),
    M("flops: heads ignored", "6.2", E06,
      ("factorized_ops = num_heads * 2 * num_tokens * d * d", "factorized_ops = 2 * num_tokens * dim * dim"),
      expect="per head"),
    # notebook 07
    M("relative indices: i - j instead of j - i", "7.1", E07,
      ("np.clip(idx[None, :] - idx[:, None],", "np.clip(idx[:, None] - idx[None, :],"), expect="i - j"),
    M("depthwise conv: flipped kernel", "7.2", E07,
      ('np.einsum("bchwij,cij->bchw", windows[..., ::d, ::d], weight[:, 0])',
       'np.einsum("bchwij,cij->bchw", windows[..., ::d, ::d], weight[:, 0, ::-1, ::-1])'), expect="flipped"),
    M("depthwise conv: dilation ignored", "7.2", E07,
      ("d = int(dilation)", "d = 1"), expect="dilation is ignored"),
    M("CRPE without the zero class row", "7.3", E07,
      ("return np.concatenate([np.zeros_like(q[:, :, :1]), ev], axis=2)", "return ev"),
      expect="row of zeros"),
    # notebook 08
    M("bilinear: align_corners=True", "8.1", E08,
      ("src = np.maximum((i + 0.5) * (n_in / n_out) - 0.5, 0.0)",
       "src = i * ((n_in - 1) / max(n_out - 1, 1))"), expect="align_corners=True"),
    M("bilinear: source index not clamped at 0", "8.1", E08,
      ("src = np.maximum((i + 0.5) * (n_in / n_out) - 0.5, 0.0)", "src = (i + 0.5) * (n_in / n_out) - 0.5"),
      expect="clamp src at 0"),
    M("bilinear: align_corners=True done the align_corners=False way", "8.1", E08,
      ("if align_corners:", "if False:"), expect="this is align_corners=False"),
    M("interpolate tokens: reshape without the transpose", "8.2", E08,
      ("img = img.transpose(1, 2).reshape(B, C, H, W)", "img = img.reshape(B, C, H, W)"),
      ("torch.cat([cls, img.flatten(2).transpose(1, 2)], dim=1)", "torch.cat([cls, img.reshape(B, -1, C)], dim=1)"),
      expect="channels-last"),
    # notebook 10
    M("LayerNorm backward: the mean term forgotten", "10.1", E10,
      ("dx = (g - g.mean(axis=-1, keepdims=True)\n          - xhat", "dx = (g\n          - xhat"),
      expect="mean term is forgotten"),
    M("LayerNorm backward: dweight summed over the first axis only", "10.1", E10,
      ("return dx, (dout * xhat).sum(axis=lead), dout.sum(axis=lead)",
       "return dx, (dout * xhat).sum(axis=0), dout.sum(axis=0)"), expect="wrong axis"),
    M("softmax backward: the Jacobian without its diagonal", "10.2", E10,
      ("return p * (dout - (dout * p).sum(axis=axis, keepdims=True))",
       "return -p * (dout * p).sum(axis=axis, keepdims=True)"), expect="missing its diagonal"),
    M("softmax backward: summed over the last axis", "10.2", E10,
      ("return p * (dout - (dout * p).sum(axis=axis, keepdims=True))",
       "return p * (dout - (dout * p).sum(axis=-1, keepdims=True))"), expect="summed over the last axis"),
    M("class attention backward: the query path of the class token forgotten", "10.3", E10,
      ("dx[:, :1] += dq @ q_weight", "dx[:, :1] += 0.0"), expect="query path"),
    M("class attention backward: weight gradients averaged over the batch", "10.3", E10,
      ('dk_weight = np.einsum("bnc,bne->ce", dk, x)', 'dk_weight = np.einsum("bnc,bne->ce", dk, x) / B'),
      expect="averaged over the batch"),
    M("factorized attention backward: softmax backward summed over the channels", "10.4", E10,
      ("dk = kt * (dkt - (dkt * kt).sum(axis=-2, keepdims=True))",
       "dk = kt * (dkt - (dkt * kt).sum(axis=-1, keepdims=True))"), expect="summed over the channels"),
]
