"""Model-family specs: one torch-free module per family (config, key/shape table, names).

    base.py    Family, ModelSpec, ConfigMixin, the normalisation constants
    vit.py     ViT / DeiT

``vit_scratch.registry`` imports every module here the first time it is asked for a name, so a
new family is one new file here plus its two room modules (``numpy_nn/`` and ``torch_nn/``).
"""
