"""Model-family specs: one torch-free module per family (config, key/shape table, names).

    base.py    ConfigMixin (every config field checked against its annotation), PatchGridMixin,
               ModelSpec, ModelTable (a family's registered names), the normalisation constants
    vit.py     ViT / DeiT: ViTConfig, vit_param_shapes, MODELS
    cait.py    CaiT: CaitConfig, LayerScale's depth rule, cait_param_shapes, MODELS
    coat.py    CoaT / CoaT-Lite: CoaTConfig, coat_param_shapes, shared_keys, MODELS

A new family is one new file here, its two room modules (``numpy_nn/`` and ``torch_nn/``) and
one line in the factory's table (``vit_scratch.models.FAMILIES``).
"""
