"""The trainer's NumPy backend, ``python -m vit_scratch.train --backend numpy``: its runner and
optimiser, :class:`NumpyRunner` and :class:`NumpyAdamW`, live beside the PyTorch backend's in
``vit_scratch.training.runners`` (one interface for both); this module names them.
"""
from .training.runners import NumpyAdamW, NumpyRunner

__all__ = ["NumpyAdamW", "NumpyRunner"]
