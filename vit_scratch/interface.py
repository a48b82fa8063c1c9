"""The model interface every family answers, in both rooms (timm's names).

Attributes
    cfg               the family's config dataclass
    num_classes       0 means no head: ``forward`` returns the pooled features
    num_features      channels of the pooled features that feed the head
    embed_dim         channels of the tokens (the last stage's for multi-stage models)
    num_prefix_tokens tokens before the patch tokens in ``forward_features`` (class tokens)
    pretrained_cfg    what the weights expect: ``input_size``, ``mean``, ``std``, ``crop_pct``, ...

Methods
    forward_features(images)            the final-normed tokens (family shape, documented there)
    forward_head(features, pre_logits)  pool (and classify unless ``pre_logits``)
    __call__ / forward(images)          logits (B, num_classes)
    forward_intermediates(images, indices=None, norm=False, output_fmt="NCHW",
                          intermediates_only=False)
                                        per-block (ViT, CaiT) or per-scale (CoaT) feature maps
    get_intermediate_layers(images, n=1, reshape=False, norm=False)   (timm's older API)
    get_attention_maps(images)          raw attention, one entry per attention layer (shape per family)
    get_attention_grids(images)         one (B, heads, gh, gw) map per attention layer: where
                                        the readout looks, on the patch grid, ready to draw
PyTorch room only (timm's, as timm's own test suite asks: tests/test_timm_suite.py)
    in_chans, head_hidden_size, global_pool ("token", "avg"; ViT and CaiT also "": no pooling),
    dynamic_img_size, grad_checkpointing         attributes
    get_classifier(), reset_classifier(num_classes, global_pool=None), no_weight_decay(),
    adapt_state_dict(sd), set_grad_checkpointing(enable=True), group_matcher(coarse=False),
    prune_intermediate_layers(indices, prune_norm=False, prune_head=True), set_input_size(img_size)
    forward_intermediates(..., stop_early=False, return_prefix_tokens=False, output_dict=False)
    torch.jit.script(model) and torch.fx tracing; features_only=True in create_model (a backbone
    of feature maps: torch_nn.features)

This module holds the pieces both rooms share; it imports neither NumPy nor PyTorch
(einops works on arrays and tensors alike).
"""
from __future__ import annotations

from typing import Sequence

from einops import rearrange, reduce

from . import validation

ATTRIBUTES = ("cfg", "num_classes", "num_features", "embed_dim", "num_prefix_tokens",
              "pretrained_cfg")
METHODS = ("forward_features", "forward_head", "forward_intermediates",
           "get_intermediate_layers", "get_attention_maps", "get_attention_grids")
TORCH_ATTRIBUTES = ATTRIBUTES + ("in_chans", "head_hidden_size", "global_pool",
                                 "dynamic_img_size", "grad_checkpointing")
TORCH_METHODS = METHODS + ("get_classifier", "reset_classifier", "no_weight_decay",
                           "adapt_state_dict", "set_grad_checkpointing", "group_matcher",
                           "prune_intermediate_layers", "set_input_size")
OUTPUT_FORMATS = ("NCHW", "NLC")


def resolve_indices(indices, count: int, what: str = "blocks", name: str = "indices") -> list[int]:
    """Which of ``count`` layers to return, as sorted non-negative indices (timm's convention).

    ``None`` -> all; an int n -> the last n; a sequence -> those indices (negative ones count
    from the end).  Anything out of range, and an empty sequence, is a ``ValueError`` naming
    the value as ``name`` (the caller's argument: ``out_indices`` for a backbone)."""
    if indices is None:
        return list(range(count))
    if isinstance(indices, int) and not isinstance(indices, bool):
        if not 0 < indices <= count:
            raise ValueError(f"{name}={indices} asks for the last {indices} of {count} {what}; "
                             f"expected 1..{count}")
        return list(range(count - indices, count))
    if isinstance(indices, Sequence) and not isinstance(indices, str):
        out = []
        for i in indices:
            if isinstance(i, bool) or not isinstance(i, int) or not -count <= i < count:
                raise ValueError(f"{name} contains {i!r}, but there are {count} {what} "
                                 f"(valid: {-count}..{count - 1})")
            out.append(i % count)
        if not out:
            raise ValueError(f"{name} is empty: ask for at least one of the {count} {what} "
                             f"(None: all of them)")
        return sorted(set(out))
    raise ValueError(f"{name} must be None, an int or a list of ints, got {indices!r}")


def check_flags(**flags) -> None:
    """Each keyword ``True`` or ``False`` (a NumPy bool too), else a ``ValueError`` naming it:
    ``norm='False'`` is a truthy string, which would switch the norm on without a word.  The
    rule of ``validation.check_bool``, the one every switch of the library follows."""
    for name, value in flags.items():
        validation.check_bool(value, name)


def check_output_fmt(output_fmt: str) -> str:
    if output_fmt not in OUTPUT_FORMATS:
        raise ValueError(f"output_fmt must be one of {OUTPUT_FORMATS}, got {output_fmt!r}")
    return output_fmt


def intermediates_result(final, maps: list, prefixes: list | None = None,
                         output_dict: bool = False):
    """What ``forward_intermediates`` returns, in timm's conventions: ``(final, maps)``, or
    ``maps`` alone when ``final`` is None (``intermediates_only``); with ``prefixes`` (the
    prefix tokens of each map, ``return_prefix_tokens``) each map becomes a ``(map, prefix)``
    pair; ``output_dict`` gives ``{"image_intermediates": maps, "image_features": final,
    "image_intermediates_prefix": prefixes}`` instead (the entries that exist)."""
    if output_dict:
        out = {"image_intermediates": maps}
        if prefixes is not None:
            out["image_intermediates_prefix"] = prefixes
        if final is not None:
            out["image_features"] = final
        return out
    if prefixes is not None:
        maps = list(zip(maps, prefixes))
    return maps if final is None else (final, maps)


def tokens_to_grid(tokens, grid: tuple[int, int], num_prefix_tokens: int = 0,
                   output_fmt: str = "NCHW"):
    """(B, prefix + gh·gw, C) tokens -> (B, C, gh, gw) feature map (or (B, gh·gw, C) for NLC);
    the prefix tokens are dropped.  Works on arrays and tensors."""
    x = tokens[:, num_prefix_tokens:]
    if check_output_fmt(output_fmt) == "NLC":
        return x
    return rearrange(x, "b (gh gw) c -> b c gh gw", gh=grid[0], gw=grid[1])


def readout_grid(weights, grid: tuple[int, int], num_prefix_tokens: int):
    """Attention weights (B, heads, N_q, prefix + gh·gw) -> row 0 (the class token's query) on
    the patch grid, (B, heads, gh, gw).  Works on arrays and tensors."""
    return rearrange(weights[:, :, 0, num_prefix_tokens:], "b h (gh gw) -> b h gh gw",
                     gh=grid[0], gw=grid[1])


# --- factorized attention (CoaT) has no N×N weights: what can be drawn instead ----------------
ATTENTION_VIEWS = ("class", "keys")


def check_attention_view(view: str) -> str:
    if view not in ATTENTION_VIEWS:
        raise ValueError(f"view must be one of {ATTENTION_VIEWS}, got {view!r}")
    return view


def factorized_attention_map(key_softmax, class_query, view: str = "class"):
    """One factorized-attention layer's drawable weights.  Works on arrays and tensors.

    key_softmax: (B, h, N, d), softmax(K) over the N tokens; class_query: (B, h, 1, d), the class
    token's query already times d^-½.

    ``view="class"`` -> (B, h, 1, N): the class token's *implicit* attention row
    ``d^-½ q_cls softmax(K)ᵀ``.  The class token's attention output is exactly this row times V
    (factorized attention is (Q softmax(K)ᵀ) V by associativity, and CRPE gives the class token
    a zero row), so it is the analogue of ViT's row 0 -- but it is not normalised and may be
    negative, and it is computed here for one query only, never as an N×N matrix.
    ``view="keys"`` -> (B, h, N, d): softmax(K) itself, for every key channel a distribution
    over the tokens (query-independent: where each channel pools its values from).
    """
    if check_attention_view(view) == "keys":
        return key_softmax
    return class_query @ rearrange(key_softmax, "b h n d -> b h d n")


def factorized_attention_grid(weights, grid: tuple[int, int], view: str = "class",
                              num_prefix_tokens: int = 1):
    """:func:`factorized_attention_map`'s output -> (B, h, gh, gw) on the token grid.

    ``"class"``: the class token's implicit weights on the image tokens; ``"keys"``: softmax(K)
    on the image tokens, averaged over each head's d channels (a head's mean pooling map).
    """
    if check_attention_view(view) == "class":
        return readout_grid(weights, grid, num_prefix_tokens)
    return reduce(weights[:, :, num_prefix_tokens:], "b h (gh gw) d -> b h gh gw", "mean",
                  gh=grid[0], gw=grid[1])
