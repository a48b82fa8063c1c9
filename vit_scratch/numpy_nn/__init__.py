"""The NumPy room: every ViT building block as a plain function on arrays.

Functions take the weights explicitly, laid out exactly like the PyTorch ``state_dict``
(``Linear.weight`` is ``(out_features, in_features)``), and keep the input's dtype: float64 in,
float64 out, so the tests can compare with PyTorch near machine precision.  A public function
checks its arguments and calls its core ``_f``, the formula itself; the models call the cores,
so nothing inside a model's forward is checked twice (``vit_scratch.validation``: the rule).

    layers        linear, layer_norm, gelu, softmax, mlp
    patch_embed   patchify, unpatchify, patch_embed, add_class_token, sin-cos position embeddings
    attention     scaled_dot_product_attention, split_heads, merge_heads, multi_head_attention,
                  mix_heads, talking_heads_attention (CaiT)
    vit           block, VisionTransformer (a callable model built from a state_dict of arrays:
                  ViT, DeiT, DeiT III, its blocks of the config's residual form)
    layerscale    layer_scale, scalar_gate, residual_block (the ViT family's block, in every
                  residual form), layerscale_block (CaiT)
    class_attention  class_attention, class_attention_block (CaiT)
    cait          Cait (a callable model built from a state_dict of arrays)
    factorized_attention    key_softmax, factorized_attention, conv_attention (CoaT)
    conv_position_encoding  depthwise_conv2d, conv_pos_enc (CPE), conv_rel_pos_enc (CRPE),
                            clipped_relative_indices
    coscale       bilinear_resize, interpolate_tokens, parallel_block, cross_scale_attention
    coat          scale_patch_embed, serial_block, CoaT (CoaT and CoaT-Lite)
    _fast         faster twins of gelu and depthwise_conv2d, and split_batch (threads over a
                  batch): what the models run, each tested equal to its plain formula

Learning: each module above also has, for each of its functions ``f``, ``f_forward -> (out,
cache)`` and ``f_backward(dout, cache) -> gradients`` right after it (CS231n's pattern), and
each model a ``forward_with_cache`` and a ``backward``:

    backprop      Cache, check_backward (the pattern), trainable_params, model_gradients
    layers        + cross_entropy, drop_path_mask, drop_path
    layerscale    + residual_forward, residual_backward: one residual branch, x + m·s(f(LN(x)))
    training      AdamW, lr_at, decays, loss_and_grads, train_step
"""
from . import attention, layers, patch_embed, vit  # noqa: F401
from . import cait, class_attention, layerscale  # noqa: F401
from . import coat, conv_position_encoding, coscale, factorized_attention  # noqa: F401
from . import backprop, training  # noqa: F401
