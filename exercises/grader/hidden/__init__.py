"""HIDDEN TESTS -- instructors only (``python -m exercises.release`` leaves this folder out).

Importing this package registers every exercise's hidden test in
``exercises.grader.judge.REGISTRY``.
Each test compares the learner's code with an independent reference written here (PyTorch
ops, ``F.interpolate``, ``F.conv2d(groups=C)``, autograd, hand-worked cases) -- never with
``vit_scratch``, which holds the library's versions of several exercises.
"""
from . import (h01_patch_embedding, h02_self_attention, h03_vision_transformer,  # noqa: F401
               h04_layerscale, h05_class_attention, h06_factorized_attention,
               h07_conv_position_encoding, h08_coscale, h10_backprop, h11_distillation)
