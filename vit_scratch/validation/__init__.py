"""Validation at the library's edges: the checks, and the messages a learner reads.

Both rooms call the same functions, so a learner gets the same message from either: a
``ValueError`` that names the parameter, the value and what was expected, raised before any
einsum sees a wrong shape.  The functions take plain Python values (ints, tuples of ints, dtype
*names*), never arrays, so this package imports neither NumPy nor PyTorch.

Where the checks run (the rule) -- at the public entry points, once:

* a **config** checks itself when it is built (``ConfigMixin.__post_init__``: every field
  against its annotation, then the family's ranges), once per ``create_model``;
* **images** are checked where they enter a model, in ``prepare_images`` (both rooms);
* **checkpoints and params** when they are loaded (``vit_scratch.checkpoint_checks``);
* a **layer function a learner calls directly** (``linear``, ``multi_head_attention``,
  ``class_attention_block``, ...) and a **layer a learner builds by hand** (``Attention``,
  ``ClassAttention``, ``LayerScale``, ...) check their own arguments.

Inside a model nothing is checked again: the models call each layer function's unchecked core
(``_linear``, ``_layer_norm``, ...: the formula itself, which the checked public function calls
too), and build their layers from a config that has been validated.  One forward of a built
model calls only ``prepare_images``' checks (``tests/test_layout.py`` counts them).

Grouped by what they check:

* ``values``: :func:`to_2tuple`, :func:`check_int`, :func:`check_positive`, :func:`check_bool`,
  :func:`check_float`, :func:`check_probability`, :func:`check_choice` -- the building blocks;
* ``configs``: the field types (:func:`check_config_fields`, :func:`check_fields`), the sizes
  and ranges (:func:`grid_size`, :func:`head_dim`, :func:`hidden_width`,
  :func:`check_init_values`, :func:`check_divisible`, :func:`check_window_heads`) and a layer's
  arguments (:func:`check_layer_args`);
* ``images``: the dtype policy (:func:`check_image_dtype`), :func:`check_image_values`,
  :func:`check_images`;
* ``arrays`` given to functional entry points: :func:`check_ndim`, :func:`check_last_dim`,
  :func:`check_tokens`, :func:`check_token_grid`, :func:`check_qkv`, :func:`check_mask_dtype`,
  :func:`check_mask`, :func:`check_class_token`.
"""
from .arrays import (check_class_token, check_last_dim, check_mask, check_mask_dtype,
                     check_ndim, check_qkv, check_token_grid, check_tokens)
from .configs import (LAYER_BOOL_ARGS, LAYER_INT_ARGS, LAYER_RATE_ARGS, check_config_fields,
                      check_divisible, check_fields, check_init_values, check_layer_args,
                      check_value, check_window_heads, describe_type, grid_size, head_dim,
                      hidden_width)
from .images import (IMAGE_FLOAT_DTYPES, MAX_ABS_IMAGE, check_image_dtype, check_image_values,
                     check_images, dtype_name)
from .values import (check_bool, check_choice, check_float, check_int, check_positive,
                     check_positive_float, check_probability, describe_value, to_2tuple)

__all__ = [
    "LAYER_BOOL_ARGS", "LAYER_INT_ARGS", "LAYER_RATE_ARGS", "IMAGE_FLOAT_DTYPES", "MAX_ABS_IMAGE",
    "check_bool", "check_choice", "check_class_token", "check_config_fields", "check_divisible",
    "check_fields", "check_float", "check_image_dtype", "check_image_values", "check_images",
    "check_init_values", "check_int", "check_last_dim", "check_layer_args", "check_mask",
    "check_mask_dtype", "check_ndim", "check_positive", "check_positive_float",
    "check_probability", "check_qkv", "check_token_grid", "check_tokens", "check_value",
    "check_window_heads", "describe_type", "describe_value", "dtype_name", "grid_size",
    "head_dim", "hidden_width", "to_2tuple",
]
