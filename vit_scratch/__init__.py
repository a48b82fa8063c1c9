"""vit-scratch: Vision Transformers from scratch, NumPy first, then PyTorch.

    import vit_scratch
    model = vit_scratch.create_model("vit_tiny_patch16_224", num_classes=10)   # PyTorch
    vit_scratch.load_checkpoint(model, "vit_tiny.safetensors")                  # any timm/DeiT file
    np_model = vit_scratch.create_numpy_model(
        "vit_tiny_patch16_224", vit_scratch.state_dict_to_numpy(model.state_dict()))
    vit_scratch.list_models()

The rooms: ``vit_scratch.numpy_nn`` (functions on arrays) and ``vit_scratch.torch_nn``
(``nn.Module``s with timm's parameter names).  timm is never imported here.
"""
from .config import ViTConfig
from .models import create_model, create_numpy_model, get_config, list_models
from .torch_nn.patch_embed import resize_pos_embed
from .weights import (
    CheckpointError,
    load_checkpoint,
    randomize_weights_,
    read_state_dict,
    save_checkpoint,
    state_dict_to_numpy,
)

__version__ = "0.1.0"

__all__ = [
    "CheckpointError",
    "ViTConfig",
    "create_model",
    "create_numpy_model",
    "get_config",
    "list_models",
    "load_checkpoint",
    "randomize_weights_",
    "read_state_dict",
    "resize_pos_embed",
    "save_checkpoint",
    "state_dict_to_numpy",
]
