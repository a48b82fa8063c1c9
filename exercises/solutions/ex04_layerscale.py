"""Exercises for notebook 04 -- LayerScale.

Write your code where it says ``TODO Exercise N.M`` (replace the ``raise NotImplementedError``).
Nothing from ``vit_scratch`` may be called here: the library's LayerScale is the answer.

CaiT: Touvron, Cord, Sablayrolles, Synnaeve, Jégou, "Going deeper with Image Transformers",
ICCV 2021, https://arxiv.org/abs/2103.17239.

Check your work:   python -m exercises.check 04
"""
import torch
import torch.nn.functional as F
from torch import nn


def layerscale_init_value(depth: int) -> float:
    """Exercise 4.1 (try first) -- the initial value ε of LayerScale's diagonal, by depth.

    Notebook 04 explains why the initial value must be small and shrink with depth; try to
    write the CaiT rule from the paper (section 2, "LayerScale") before the notebook states it.

    depth:   the number of blocks, an int >= 1
    returns: ε as a float: 0.1 for networks up to 18 blocks deep (18 included), 1e-5 up to
             24 blocks (24 included), 1e-6 for deeper ones.
    Raises ValueError (naming the depth) for depth < 1.
    """
    ### BEGIN SOLUTION
    if depth < 1:
        raise ValueError(f"depth must be >= 1, got {depth}")
    if depth <= 18:
        return 0.1
    if depth <= 24:
        return 1e-5
    return 1e-6
    ### END SOLUTION


class LayerScaleBlock(nn.Module):
    """Exercise 4.2 (try first) -- a pre-norm block with LayerScale on both residual branches.

    Notebook 04 puts the three residual forms side by side (ViT's plain sum, ReZero/SkipInit's
    single scalar, LayerScale's per-channel diagonal). Write the LayerScale one:

        x = x + gamma_1 * attn(norm1(x))          gamma_1: (dim,), one factor per channel
        x = x + gamma_2 * mlp(norm2(x))           gamma_2: (dim,)

    LayerScaleBlock(dim, num_heads, mlp_ratio=4.0, qkv_bias=True, init_values=1e-5);
    forward: (B, N, C) -> (B, N, C).

    ``state_dict()`` keys: the keys of Exercise 3.4's ``Block`` (norm1, attn.qkv, attn.proj,
    norm2, mlp.fc1, mlp.fc2; the same shapes) plus ``gamma_1`` and ``gamma_2`` of shape (dim,),
    the names CaiT's checkpoints use. Both start at ``init_values`` in every channel and are
    learned. LayerNorm eps = 1e-6, exact GELU, plain softmax attention with the scale 1/√d.
    Raise ValueError (naming the value) when init_values <= 0, and when dim is not a multiple
    of num_heads.

    Hints: a learned tensor is an ``nn.Parameter``. Which axis of the (B, N, C) branch output
    does a per-channel factor scale? No loops over tokens or heads.
    """

    def __init__(self, dim: int, num_heads: int, mlp_ratio: float = 4.0, qkv_bias: bool = True,
                 init_values: float = 1e-5):
        super().__init__()
        ### BEGIN SOLUTION
        if init_values <= 0:
            raise ValueError(f"init_values must be > 0 for LayerScale, got {init_values}")
        if dim % num_heads:
            raise ValueError(f"dim={dim} is not a multiple of num_heads={num_heads}")
        self.num_heads = num_heads
        hidden = int(dim * mlp_ratio)
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = nn.Module()
        self.attn.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.attn.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = nn.Module()
        self.mlp.fc1 = nn.Linear(dim, hidden)
        self.mlp.fc2 = nn.Linear(hidden, dim)
        self.gamma_1 = nn.Parameter(torch.full((dim,), float(init_values)))
        self.gamma_2 = nn.Parameter(torch.full((dim,), float(init_values)))
        ### END SOLUTION

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ### BEGIN SOLUTION
        B, N, C = x.shape
        h = self.num_heads
        qkv = self.attn.qkv(self.norm1(x)).reshape(B, N, 3, h, C // h).permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2])     # (B, h, N, d)
        out = self.attn.proj(out.transpose(1, 2).reshape(B, N, C))       # (B, N, C)
        x = x + self.gamma_1 * out                                       # per channel: (C,) broadcasts over B, N
        mlp = self.mlp.fc2(F.gelu(self.mlp.fc1(self.norm2(x))))
        return x + self.gamma_2 * mlp
        ### END SOLUTION
