"""HIDDEN TESTS -- instructors only. Hostile submissions for the grader's tests.

Each case is a reference solution with one function replaced (or code put in front of the
module), and what the grader must say. ``tests/test_exercise_grading.py`` grades them all.
(This lives here, not in tests/, because the positive control is a working solution of 3.2.)
"""
from pathlib import Path

SOLUTIONS = Path(__file__).resolve().parents[1] / "solutions"

# name: (module, code appended to the reference solution (it redefines one function) or put in
#        front of it ("PREPEND:"), {exercise: (status, phrase in the feedback)} for the exercises
#        that must get zero -- every other exercise of the module must keep full marks.
HOSTILE = {
    "hang in a busy loop": ("ex04_layerscale", """
def layerscale_init_value(depth):
    while True:
        pass
""", {"4.1": ("timeout", "time limit")}),
    "hang in sleep": ("ex06_factorized_attention", """
def crossover_num_tokens(dim, num_heads=1):
    import time
    time.sleep(3600)
""", {"6.2": ("timeout", "time limit")}),
    "sys.exit": ("ex01_patch_embedding", """
def conv_weight_to_hwc_linear(weight):
    import sys
    sys.exit(0)
""", {"1.3": ("disqualified", "sys.exit")}),
    "os._exit": ("ex07_conv_position_encoding", """
def clipped_relative_indices(num_tokens, window):
    import os
    os._exit(3)
""", {"7.1": ("exited", "exit status 3")}),
    "segfault": ("ex05_class_attention", """
import ctypes
_segfault = ctypes.string_at

class TalkingHeadAttention(nn.Module):
    \"\"\"Exercise 5.3\"\"\"
    def __init__(self, dim, num_heads, qkv_bias=True):
        super().__init__()
        _segfault(0)
""", {"5.3": ("crashed", "SIGSEGV")}),
    "output flood": ("ex08_coscale", """
def interpolate_tokens(x, size, new_size):
    while True:
        print("flood " * 200)
""", {"8.2": ("output flood", "output flood")}),
    "the library's softmax": ("ex02_self_attention", """
from vit_scratch.numpy_nn.layers import softmax as _library_softmax

def softmax(x, axis=-1):
    return _library_softmax(x, axis=axis)
""", {"2.1": ("disqualified", "library's reference"),      # 2.2 and 2.5 call this softmax too
      "2.2": ("disqualified", "library's reference"), "2.5": ("disqualified", "library's reference")}),
    "the library's block": ("ex03_vision_transformer", """
import vit_scratch.numpy_nn.vit as _library_vit

def block_forward(x, params, num_heads):
    return _library_vit.block(x, params, num_heads)
""", {"3.2": ("disqualified", "vit_scratch.numpy_nn.vit.block")}),
    "torch in a NumPy exercise": ("ex08_coscale", """
def bilinear_resize(x, size):
    return F.interpolate(torch.from_numpy(x), size=size, mode="bilinear", align_corners=False).numpy()
""", {"8.1": ("disqualified", "NumPy exercise")}),
    "crash at import": ("ex06_factorized_attention", "PREPEND:raise RuntimeError('boom')\n",
                        {"6.1": ("import error", "RuntimeError: boom"), "6.2": ("import error", "RuntimeError: boom")}),
    "sys.exit at import": ("ex04_layerscale", "PREPEND:import sys\nsys.exit(1)\n",
                           {"4.1": ("import error", "sys.exit(1)"), "4.2": ("import error", "sys.exit(1)")}),
    # Not hostile: 3.2 may use the library's elementary layers (its docstring says so).
    "allowed library helpers": ("ex03_vision_transformer", """
from vit_scratch.numpy_nn.layers import gelu, layer_norm, linear, softmax as _softmax

def block_forward(x, params, num_heads):
    B, N, C = x.shape
    d = C // num_heads
    t = layer_norm(x, params["norm1.weight"], params["norm1.bias"])
    qkv = linear(t, params["attn.qkv.weight"], params["attn.qkv.bias"])
    q, k, v = qkv.reshape(B, N, 3, num_heads, d).transpose(2, 0, 3, 1, 4)
    w = _softmax(q @ k.swapaxes(-1, -2) / math.sqrt(d))
    x = x + linear((w @ v).transpose(0, 2, 1, 3).reshape(B, N, C), params["attn.proj.weight"],
                   params["attn.proj.bias"])
    t = gelu(linear(layer_norm(x, params["norm2.weight"], params["norm2.bias"]),
                    params["mlp.fc1.weight"], params["mlp.fc1.bias"]))
    return x + linear(t, params["mlp.fc2.weight"], params["mlp.fc2.bias"])
""", {}),
}
SHORT_LIMIT = {"hang in a busy loop": 1.5, "hang in sleep": 1.5}


def hostile_source(module, code):
    source = (SOLUTIONS / f"{module}.py").read_text()
    if code.startswith("PREPEND:"):
        return code[len("PREPEND:"):] + source
    return source + "\n" + code
