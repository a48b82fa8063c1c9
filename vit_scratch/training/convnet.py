"""A small convolutional network, the course's own: the convnet yardstick the trainer prints
beside a transformer's accuracy (``--baseline cnn``) and the teacher it trains first for
``--teacher auto``.

Three blocks of two 3 × 3 convolutions (each followed by BatchNorm and a ReLU) and a 2 × 2 max
pool, 16, 32 and 64 channels, then the mean over the positions and a linear head: 72,629
parameters for five classes.  A convnet's two inductive biases -- locality (each output sees a
3 × 3 neighbourhood) and translation equivariance (the same kernel everywhere) -- are what a
transformer trained from scratch has to learn from the data; on a few hundred pictures this small
network is the bar to clear (DeiT, Touvron et al. 2021, §5.3, distils from a convnet for the
same reason).  Written by hand, with ``torch.nn`` layers.
"""
from __future__ import annotations

import torch
from torch import nn


def conv_bn_relu(in_chans: int, out_chans: int) -> nn.Sequential:
    """A 3 × 3 convolution that keeps the picture's size, BatchNorm, ReLU."""
    return nn.Sequential(nn.Conv2d(in_chans, out_chans, 3, padding=1, bias=False),
                         nn.BatchNorm2d(out_chans), nn.ReLU(inplace=True))


class SmallConvNet(nn.Module):
    """(B, in_chans, H, W) -> logits (B, num_classes); H and W divisible by 8 keep every
    position (three 2 × 2 pools)."""

    def __init__(self, num_classes: int, in_chans: int = 3, widths=(16, 32, 64)):
        super().__init__()
        blocks, chans = [], in_chans
        for width in widths:
            blocks += [conv_bn_relu(chans, width), conv_bn_relu(width, width), nn.MaxPool2d(2)]
            chans = width
        self.features = nn.Sequential(*blocks)
        self.head = nn.Linear(chans, num_classes)
        self.num_classes = num_classes

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).mean(dim=(-2, -1)))  # (B, C, h, w) -> (B, C) -> logits

    def no_weight_decay(self) -> set:
        """Nothing beyond biases and norms (``recipe.param_groups`` skips those already)."""
        return set()
