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
    # TODO Exercise 4.1: your code here (replace the line below)
    raise NotImplementedError("Exercise 4.1: layerscale_init_value")


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
        # TODO Exercise 4.2: your code here (replace the line below)
        raise NotImplementedError("Exercise 4.2: LayerScaleBlock.__init__")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # TODO Exercise 4.2: your code here (replace the line below)
        raise NotImplementedError("Exercise 4.2: LayerScaleBlock.forward")
