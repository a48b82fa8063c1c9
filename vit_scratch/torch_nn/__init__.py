"""The PyTorch room: the same blocks as ``vit_scratch.numpy_nn``, as ``nn.Module``s.

Module and parameter names are timm's, so a timm (or official DeiT) ``state_dict`` loads with
``strict=True`` and gives the same logits.

    layers        Mlp, DropPath
    patch_embed   PatchEmbed, resize_pos_embed, adapt_input_conv
    attention     attention_weights, scaled_dot_product_attention, Attention,
                  mix_heads, TalkingHeadAttention (CaiT)
    vit           Block, VisionTransformer (ViT, DeiT, DeiT III: blocks of the config's form)
    layerscale    LayerScale, ScalarGate, Block (= ResidualBlock: the ViT family's block, in
                  every residual form), LayerScaleBlock (CaiT)
    class_attention  ClassAttention, LayerScaleBlockClassAttn (CaiT)
    cait          Cait
    factorized_attention    key_softmax, factorized_attention, FactorAttnConvRelPosEnc (CoaT)
    conv_position_encoding  depthwise_conv2d, ConvPosEnc (CPE), ConvRelPosEnc (CRPE)
    coscale       bilinear_resize, interpolate_tokens, ParallelBlock
    coat          ScalePatchEmbed, SerialBlock, CoaT (CoaT and CoaT-Lite)
    base          ModelBase: the interface every model answers (timm's)
    features      FeatureGetter, FeatureInfo: a model as a backbone of feature maps
    _fast         mix_heads' faster twin: what the models run, tested equal to the formula
"""
from . import attention, layers, patch_embed, vit  # noqa: F401
from . import cait, class_attention, layerscale  # noqa: F401
from . import coat, conv_position_encoding, coscale, factorized_attention  # noqa: F401
from . import base, features  # noqa: F401
