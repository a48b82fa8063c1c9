"""Optional dependencies, by the extra of ``pyproject.toml`` that installs them.

``pip install vit-scratch`` is the library (models, checkpoints, preprocessing).  The rest is
optional, and a missing piece says which extra brings it:

    [train]   torchvision (folders of pictures, augmentation), tqdm (progress bar), matplotlib
              (figures), scikit-learn (the digits, the validation split, the metrics)
    [hub]     huggingface_hub (pretrained weights from the Hugging Face Hub)
    [course]  [train] plus Jupyter, for the notebooks
    [export]  onnx, onnxscript (PyTorch's ONNX exporter) and onnxruntime (the check of the file):
              ``python -m vit_scratch.export --formats onnx``
    [test]    [course], [hub] and [export], plus pytest, nbval, hypothesis and timm (the test
              oracle)
"""
from __future__ import annotations

import importlib

#: Top-level module -> (the extra that installs it, its name on PyPI).
EXTRAS = {
    "torchvision": ("train", "torchvision"),
    "tqdm": ("train", "tqdm"),
    "matplotlib": ("train", "matplotlib"),
    "sklearn": ("train", "scikit-learn"),
    "huggingface_hub": ("hub", "huggingface_hub"),
    "onnx": ("export", "onnx"),
    "onnxscript": ("export", "onnxscript"),
    "onnxruntime": ("export", "onnxruntime"),
}


def require(module: str, purpose: str):
    """``importlib.import_module(module)``; if its package is not installed, a
    ``ModuleNotFoundError`` that says what needs it and which extra installs it::

        ModuleNotFoundError: training on a folder of pictures needs torchvision, which is not
        installed: pip install -e '.[train]' in the vit-scratch folder (or: pip install
        torchvision)
    """
    top = module.split(".")[0]
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as error:
        if error.name is not None and error.name.split(".")[0] != top:
            raise  # the package is there but one of its own dependencies is missing
        extra, pip_name = EXTRAS[top]
        raise ModuleNotFoundError(
            f"{purpose} needs {pip_name}, which is not installed: pip install -e "
            f"'.[{extra}]' in the vit-scratch folder (or: pip install {pip_name})",
            name=top) from None
