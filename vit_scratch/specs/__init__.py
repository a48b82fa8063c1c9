"""Model-family specs: one torch-free module per family (config, key/shape table, names).

    base.py    ConfigMixin (every config field checked against its annotation), PatchGridMixin,
               ModelSpec, ModelTable (a family's registered names), the normalisation constants
    vit.py     ViT / DeiT / DeiT III: ViTConfig, the residual forms, vit_param_shapes, MODELS
    cait.py    CaiT: CaitConfig, LayerScale's depth rule, cait_param_shapes, MODELS
    coat.py    CoaT / CoaT-Lite: CoaTConfig, coat_param_shapes, shared_keys, MODELS

A new family is one new file here, its two room modules (``numpy_nn/`` and ``torch_nn/``) and
one line in the factory's table (``vit_scratch.models.FAMILIES``).  A variant of a family is
registrations in its file: DeiT III is ViT's config with ``init_values`` and ``no_embed_class``
under timm's ``deit3_*`` names, and both rooms build it from the config.
"""
