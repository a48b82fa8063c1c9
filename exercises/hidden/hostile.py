"""HIDDEN TESTS -- instructors only. Hostile submissions: the grader's security suite.

Each attack is a reference solution (or a stub) with one function replaced, or code put in
front of the module, written the way a student who wants marks without the work would write
it. ``tests/test_grader_security.py`` grades them all in one grader run, followed by a
correct submission and the untouched stubs, and checks that each attack scores zero on the
exercise it attacks, with the status and the words below, while the correct submission after
it still scores full marks, the stubs zero, and the report and the repository stay intact.

Placeholders in the code: ``@ROOT@`` (the repository), ``@REPORT@`` (the JSON report the
grader writes), ``@NEXT@`` (the folder of the submission graded after the attacks).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

EXERCISES = Path(__file__).resolve().parents[1]
SOLUTIONS = EXERCISES / "solutions"


@dataclass(frozen=True)
class Attack:
    name: str
    category: str
    module: str
    code: str                          # appended to the base module, or put in front ("PREPEND:")
    zeroed: dict                       # {exercise: (status, phrase in the feedback)}
    base: str = "solution"             # "solution" or "stub"
    whole_module: bool = False         # grade every exercise of the module (the others keep full marks)
    time_limit: float | None = None

    def source(self, **places) -> str:
        folder = SOLUTIONS if self.base == "solution" else EXERCISES
        text = (folder / f"{self.module}.py").read_text()
        code = self.code
        for key, value in places.items():
            code = code.replace(f"@{key.upper()}@", str(value))
        if code.startswith("PREPEND:"):
            return code[len("PREPEND:"):] + text
        return text + "\n" + code

    def write(self, folder, **places) -> Path:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{self.module}.py").write_text(self.source(**places))
        return folder


E01, E02, E03, E04 = "ex01_patch_embedding", "ex02_self_attention", "ex03_vision_transformer", "ex04_layerscale"
E05, E06, E07, E08 = "ex05_class_attention", "ex06_factorized_attention", "ex07_conv_position_encoding", "ex08_coscale"
DQ = "disqualified"
LIB_SOFTMAX = "from vit_scratch.numpy_nn.layers import softmax as _lib_softmax\n"
STUBS_02 = {i: ("not done", "not done yet") for i in ("2.1", "2.2", "2.3", "2.4", "2.5")}

ATTACKS = [
    # ---- forged scores and reports
    Attack("patch the grader's scoring at import: full marks for the stubs", "forged score", E02, """PREPEND:
try:
    import exercises.judge as _j

    def _part(self, name, points, requires=()):
        def run(check):
            self.parts.append(_j.PartResult(name, points, points))
            return check
        return run
    _j.ExerciseRun.part = _part
    _j.ExerciseRun.no_loops = lambda self, points, *a, **k: self.parts.append(_j.PartResult("loops", points, points))
except Exception:
    pass
""", STUBS_02, base="stub"),
    Attack("write a result of 1000 points through the parent's pipe (frames)", "forged score", E02, """
def softmax(x, axis=-1):
    import json, os, sys
    f = sys._getframe()
    while f is not None:
        if "write_end" in f.f_locals:
            os.write(f.f_locals["write_end"], json.dumps({"score": 1000, "max_score": 10, "status": "graded",
                                                          "feedback": "all checks passed", "parts": []}).encode())
            os._exit(0)
        f = f.f_back
    raise RuntimeError("no pipe")
""", {"2.1": (DQ, "frames")}),
    Attack("write a made-up result on every file descriptor", "forged score", E04, """
def layerscale_init_value(depth):
    import json, os
    msg = json.dumps({"score": 5, "max_score": 5, "status": "graded", "feedback": "all checks passed",
                      "parts": []}).encode()
    for fd in range(3, 32):
        try:
            os.write(fd, msg)
        except OSError:
            pass
    os._exit(0)
""", {"4.1": ("protocol error", "grader's channel")}),
    Attack("a malformed result that crashed the grader", "forged score", E06, """
def crossover_num_tokens(dim, num_heads=1):
    import os
    for fd in range(3, 32):
        try:
            os.write(fd, b'{"score": 6}')
        except OSError:
            pass
    os._exit(0)
""", {"6.2": ("protocol error", "grader's channel")}),
    Attack("patch json.dumps in the child: full marks for the stubs", "forged score", E02, """PREPEND:
import json as _json
_fake = '{"score": 12, "max_score": 12, "status": "graded", "feedback": "all checks passed", "parts": []}'
_json.dumps = lambda *a, **k: _fake
""", STUBS_02, base="stub"),
    Attack("flood the grader's channel", "forged score", E07, """
def clipped_relative_indices(num_tokens, window):
    import os
    os.write(4, (1 << 62).to_bytes(8, "little") + b"x" * 1000)
    return np.zeros((num_tokens, num_tokens), dtype=int)
""", {"7.1": ("protocol error", "grader's channel")}),
    Attack("a signal handler that writes a result later", "forged score", E07, """
def depthwise_conv2d(x, weight, bias=None):
    import os, signal
    signal.signal(signal.SIGALRM, lambda *a: os.write(4, b'{"score": 12}'))
    signal.setitimer(signal.ITIMER_REAL, 0.01)
    return x
""", {"7.2": (DQ, "signal")}),

    # ---- reading the hidden tests
    Attack("read the hidden test's reference from the caller's frame", "hidden tests read", E06, """
def factorized_attention_flops(num_tokens, dim, num_heads=1):
    import sys
    f = sys._getframe(1)
    while f is not None and "ref" not in f.f_locals:
        f = f.f_back
    return f.f_locals["ref"](num_tokens, dim, num_heads)
""", {"6.2": (DQ, "frames")}),
    Attack("the hidden test module from sys.modules", "hidden tests read", E04, """
def layerscale_init_value(depth):
    import sys
    return sys.modules["exercises.hidden.h04_layerscale"].rule(depth)
""", {"4.1": ("graded", "KeyError")}),
    Attack("import the hidden tests", "hidden tests read", E04, """
def layerscale_init_value(depth):
    from exercises.hidden.h04_layerscale import rule
    return rule(depth)
""", {"4.1": ("graded", "ModuleNotFoundError")}),
    Attack("read a hidden test file into the feedback", "hidden tests read", E04, """
def layerscale_init_value(depth):
    raise ValueError(open("@ROOT@/exercises/hidden/h04_layerscale.py").read()[:300])
""", {"4.1": (DQ, "reads the hidden tests")}),
    Attack("read a solution file", "hidden tests read", E04, """
def layerscale_init_value(depth):
    ns = {}
    exec(open("@ROOT@/exercises/solutions/ex04_layerscale.py").read(), ns)
    return ns["layerscale_init_value"](depth)
""", {"4.1": (DQ, "reads the hidden tests")}),
    Attack("the hidden test's reference through gc.get_objects", "hidden tests read", E06, """
def factorized_attention_flops(num_tokens, dim, num_heads=1):
    import gc, types
    for obj in gc.get_objects():
        if isinstance(obj, types.FunctionType) and obj.__name__ == "ref" and "hidden" in obj.__code__.co_filename:
            return obj(num_tokens, dim, num_heads)
    raise RuntimeError("not found")
""", {"6.2": (DQ, "garbage collector")}),
    Attack("the caller's frame through a traceback", "hidden tests read", E06, """
def factorized_attention_flops(num_tokens, dim, num_heads=1):
    try:
        raise ValueError
    except ValueError as err:
        f = err.__traceback__.tb_frame
    while f is not None and "ref" not in f.f_locals:
        f = f.f_back
    return f.f_locals["ref"](num_tokens, dim, num_heads)
""", {"6.2": (DQ, "frames")}),
    Attack("the caller's frame through a generator", "hidden tests read", E06, """
def factorized_attention_flops(num_tokens, dim, num_heads=1):
    def gen():
        f = me.gi_frame.f_back                  # a running generator's frame links to its caller
        while f is not None and "ref" not in f.f_locals:
            f = f.f_back
        yield f.f_locals["ref"](num_tokens, dim, num_heads)
    me = gen()
    return next(me)
""", {"6.2": (DQ, "frames")}),

    # ---- switching the rules off
    Attack("sys.setprofile(None), then the library's softmax", "guard off", E02, LIB_SOFTMAX + """
def softmax(x, axis=-1):
    import sys
    sys.setprofile(None)
    return _lib_softmax(x, axis=axis)
""", {"2.1": (DQ, "profiler or tracer")}),
    Attack("sys.settrace(None) around a loop over the queries", "guard off", E02, """
def scaled_dot_product_attention(q, k, v, mask=None):
    import sys
    sys.settrace(None)
    d = q.shape[-1]
    scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(d)
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    rows = [softmax(scores[..., i:i + 1, :], axis=-1) @ v for i in range(scores.shape[-2])]
    return np.concatenate(rows, axis=-2)
""", {"2.2": (DQ, "profiler or tracer")}),
    Attack("the library's softmax in a thread", "guard off", E02, LIB_SOFTMAX + """
def softmax(x, axis=-1):
    import threading
    out = []
    t = threading.Thread(target=lambda: out.append(_lib_softmax(x, axis=axis)))
    t.start()
    t.join()
    return out[0]
""", {"2.1": (DQ, "thread")}),
    Attack("exec of the library's source into the submission", "guard off", E02, """
import vit_scratch.numpy_nn.layers as _lib
_src = open(_lib.__file__).read()
_start = _src.index("def softmax(")
exec(_src[_start:_src.index("\\ndef ", _start)], globals())     # the library's softmax, as if written here
""", {"2.1": (DQ, "compiles or runs new code")}),
    Attack("swap a function's __code__ for the library's", "guard off", E02, LIB_SOFTMAX + """
def softmax(x, axis=-1, out=None):
    pass
softmax.__code__ = _lib_softmax.__code__
""", {"2.1": (DQ, "code objects")}),
    Attack("a function built from the library's code object", "guard off", E02, LIB_SOFTMAX + """
import types as _types
softmax = _types.FunctionType(_lib_softmax.__code__, globals(), "softmax", (-1, None))
""", {"2.1": (DQ, "code objects"), "2.2": (DQ, "code objects"), "2.5": (DQ, "code objects")}),
    Attack("a loop relabelled as library code (co_filename)", "guard off", E02, """
def scaled_dot_product_attention(q, k, v, mask=None):
    d = q.shape[-1]
    scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(d)
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    rows = [softmax(scores[..., i:i + 1, :], axis=-1) @ v for i in range(scores.shape[-2])]
    return np.concatenate(rows, axis=-2)
import numpy as _np_mod
scaled_dot_product_attention.__code__ = scaled_dot_product_attention.__code__.replace(
    co_filename=_np_mod.__file__)
""", {"2.2": (DQ, "code objects")}),
    Attack("the forbidden block from __array__ of an object passed to an allowed layer", "guard off", E03, """
from vit_scratch.numpy_nn.layers import linear as _linear
import vit_scratch.numpy_nn.vit as _lib_vit

class _Sneaky:
    def __init__(self, *args):
        self.args = args
    def __array__(self, dtype=None, copy=None):
        return _lib_vit.block(*self.args)

def block_forward(x, params, num_heads):
    C = x.shape[-1]
    return _linear(_Sneaky(x, params, num_heads), np.eye(C, dtype=x.dtype), np.zeros(C, dtype=x.dtype))
""", {"3.2": (DQ, "vit_scratch.numpy_nn.vit.block")}),
    Attack("ctypes clears the profiler", "guard off", E02, LIB_SOFTMAX + """
def softmax(x, axis=-1):
    import ctypes
    ctypes.pythonapi.PyEval_SetProfile(None, None)
    return _lib_softmax(x, axis=axis)
""", {"2.1": (DQ, "ctypes")}),
    Attack("cProfile replaces the profiler", "guard off", E02, LIB_SOFTMAX + """
def softmax(x, axis=-1):
    import cProfile
    p = cProfile.Profile()
    p.enable()
    return _lib_softmax(x, axis=axis)
""", {"2.1": (DQ, "cProfile")}),
    Attack("the library's function through functools.partial", "guard off", E02, LIB_SOFTMAX + """
def softmax(x, axis=-1):
    import functools
    return functools.partial(_lib_softmax, axis=axis)(x)
""", {"2.1": (DQ, "library's reference")}),
    Attack("exhaust the recursion limit inside the guard", "guard off", E02, LIB_SOFTMAX + """
def softmax(x, axis=-1):
    import sys
    sys.setrecursionlimit(40)
    def deep(n):
        return _lib_softmax(x, axis=axis) if n == 0 else deep(n - 1)
    return deep(30)
""", {"2.1": (DQ, "setrecursionlimit")}),
    Attack("recurse to the limit, catch RecursionError, then the library's softmax", "guard off", E02,
           LIB_SOFTMAX + """
def softmax(x, axis=-1):
    def deep(n):
        return deep(n + 1)
    try:
        deep(0)
    except RecursionError:
        pass
    return _lib_softmax(x, axis=axis)
""", {"2.1": ("crashed", "recursion limit")}),
    Attack("builtins patched to blind the guard", "guard off", E02, LIB_SOFTMAX + """
import builtins as _b
_b.id = lambda obj: 0
_b.getattr = lambda *a: "numpy"
_b.isinstance = lambda *a: False

def softmax(x, axis=-1):
    return _lib_softmax(x, axis=axis)
""", {"2.1": (DQ, "library's reference")}),
    Attack("clear the runner's module globals", "guard off", E02, LIB_SOFTMAX + """
import sys as _sys
for _name in ("__main__", "exercises.grade", "exercises.judge", "exercises.runner"):
    if _name in _sys.modules:
        _sys.modules[_name].__dict__.clear()

def softmax(x, axis=-1):
    return _lib_softmax(x, axis=axis)
""", {"2.1": (DQ, "library's reference")}),
    Attack("the library's class attention aliased as the exercise", "guard off", E05, """
from vit_scratch.numpy_nn.class_attention import class_attention
""", {"5.1": (DQ, "library's reference"), "5.2": (DQ, "library's reference")}),

    # ---- writing to the repository, harming other students
    Attack("append to exercises/hidden/__init__.py at import", "repository written", E01, """PREPEND:
try:
    with open("@ROOT@/exercises/hidden/__init__.py", "a") as _f:
        _f.write("\\nimport exercises.judge as _j\\n"
                 "_j.ExerciseRun.part = lambda self, name, points, requires=(): "
                 "lambda check: self.parts.append(_j.PartResult(name, points, points))\\n"
                 "_j.ExerciseRun.no_loops = lambda self, points, *a, **k: "
                 "self.parts.append(_j.PartResult('loops', points, points))\\n")
except OSError:
    pass
""", {i: (DQ, "writes to the file system") for i in ("1.1", "1.2", "1.3", "1.4")}),
    Attack("overwrite the next submission's file", "repository written", E04, """
def layerscale_init_value(depth):
    with open("@NEXT@/ex04_layerscale.py", "w") as f:
        f.write("def layerscale_init_value(depth):\\n    return 0.0\\n")
    return 0.1 if depth <= 18 else 1e-5 if depth <= 24 else 1e-6
""", {"4.1": (DQ, "writes to the file system")}),
    Attack("make the hidden tests world-readable", "repository written", E04, """
def layerscale_init_value(depth):
    import os
    os.chmod("@ROOT@/exercises/hidden", 0o777)
    return 0.1 if depth <= 18 else 1e-5 if depth <= 24 else 1e-6
""", {"4.1": (DQ, "writes to the file system")}),

    # ---- outliving the grader
    Attack("a setsid grandchild rewrites the report after the grader exits", "outlives the grader", E04, """
def layerscale_init_value(depth):
    import os, time
    if os.fork() == 0:
        os.setsid()
        time.sleep(3)
        with open("@REPORT@", "w") as f:
            f.write('{"score": 249}')
        os._exit(0)
    return 0.1 if depth <= 18 else 1e-5 if depth <= 24 else 1e-6
""", {"4.1": (DQ, "process")}),
    Attack("a shell started with subprocess rewrites the report", "outlives the grader", E04, """
def layerscale_init_value(depth):
    import subprocess
    subprocess.Popen(["sh", "-c", "sleep 3; echo '{}' > @REPORT@"], start_new_session=True)
    return 0.1 if depth <= 18 else 1e-5 if depth <= 24 else 1e-6
""", {"4.1": (DQ, "subprocess")}),
    Attack("a daemon thread that rewrites the report", "outlives the grader", E04, """
def layerscale_init_value(depth):
    import threading, time
    def later():
        time.sleep(3)
        open("@REPORT@", "w").write("{}")
    threading.Thread(target=later, daemon=True).start()
    return 0.1 if depth <= 18 else 1e-5 if depth <= 24 else 1e-6
""", {"4.1": (DQ, "thread")}),
    Attack("a fork bomb", "outlives the grader", E06, """
def crossover_num_tokens(dim, num_heads=1):
    import os
    while True:
        os.fork()
""", {"6.2": (DQ, "process")}),

    # ---- signalling the grader
    Attack("kill the grader (SIGKILL to the parent)", "signals the grader", E04, """
def layerscale_init_value(depth):
    import os, signal
    os.kill(os.getppid(), signal.SIGKILL)
    return 0.1 if depth <= 18 else 1e-5 if depth <= 24 else 1e-6
""", {"4.1": (DQ, "signal")}),
    Attack("freeze the grader (SIGSTOP to the parent)", "signals the grader", E06, """
def crossover_num_tokens(dim, num_heads=1):
    import os, signal
    os.kill(os.getppid(), signal.SIGSTOP)
    return dim // num_heads + 1
""", {"6.2": (DQ, "signal")}),
    Attack("kill the grader's process group", "signals the grader", E07, """
def clipped_relative_indices(num_tokens, window):
    import os, signal
    os.killpg(os.getpgid(os.getppid()), signal.SIGTERM)
    i = np.arange(num_tokens)
    return np.clip(i[None, :] - i[:, None], -(window // 2), window // 2)
""", {"7.1": (DQ, "signal")}),

    # ---- flooding and hanging
    Attack("hang in a busy loop", "flood", E04, """
def layerscale_init_value(depth):
    while True:
        pass
""", {"4.1": ("timeout", "time limit")}, time_limit=1.5),
    Attack("hang in sleep at import", "flood", E06, """PREPEND:
import time
time.sleep(3600)
""", {"6.1": ("timeout", "time limit"), "6.2": ("timeout", "time limit")}, time_limit=1.5),
    Attack("flood stdout", "flood", E08, """
def interpolate_tokens(x, size, new_size):
    while True:
        print("flood " * 200)
""", {"8.2": ("output flood", "output flood")}),
    Attack("allocate without bound", "flood", E07, """
def clipped_relative_indices(num_tokens, window):
    blocks = []
    while True:
        blocks.append(np.empty(1 << 27))
""", {"7.1": ("graded", "MemoryError")}),
    Attack("a result too large to send", "flood", E07, """
def clipped_relative_indices(num_tokens, window):
    return np.zeros(10 ** 8)
""", {"7.1": ("graded", "too large")}),

    # ---- ending the process (not hostile to others, but no marks)
    Attack("sys.exit", "exit", E01, """
def conv_weight_to_hwc_linear(weight):
    import sys
    sys.exit(0)
""", {"1.3": (DQ, "sys.exit")}),
    Attack("os._exit", "exit", E07, """
def clipped_relative_indices(num_tokens, window):
    import os
    os._exit(3)
""", {"7.1": ("exited", "exit status 3")}),
    Attack("a segmentation fault through ctypes", "exit", E05, """
import ctypes
_segfault = ctypes.string_at

class TalkingHeadAttention(nn.Module):
    '''Exercise 5.3'''
    def __init__(self, dim, num_heads, qkv_bias=True):
        super().__init__()
        _segfault(0)
""", {"5.3": (DQ, "ctypes")}),

    # ---- the old rules, still in force (and graded with the rest of their module)
    Attack("the library's softmax", "forbidden call", E02, LIB_SOFTMAX + """
def softmax(x, axis=-1):
    return _lib_softmax(x, axis=axis)
""", {"2.1": (DQ, "library's reference"), "2.2": (DQ, "library's reference"),
      "2.5": (DQ, "library's reference")}, whole_module=True),
    Attack("torch in a NumPy exercise", "forbidden call", E08, """
def bilinear_resize(x, size):
    return F.interpolate(torch.from_numpy(x), size=size, mode="bilinear", align_corners=False).numpy()
""", {"8.1": (DQ, "NumPy exercise")}, whole_module=True),
    Attack("crash at import", "import", E06, "PREPEND:raise RuntimeError('boom')\n",
           {"6.1": ("import error", "RuntimeError: boom"), "6.2": ("import error", "RuntimeError: boom")}),
    Attack("sys.exit at import", "import", E04, "PREPEND:import sys\nsys.exit(1)\n",
           {"4.1": ("import error", "sys.exit(1)"), "4.2": ("import error", "sys.exit(1)")}),
]

# Not hostile: 3.2 may use the library's elementary layers (its docstring says so).
ALLOWED_HELPERS = Attack("allowed library helpers", "control", E03, """
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
""", {}, whole_module=True)

MODULE_EXERCISES = {E01: ["1.1", "1.2", "1.3", "1.4"], E02: ["2.1", "2.2", "2.3", "2.4", "2.5"],
                    E03: ["3.1", "3.2", "3.3", "3.4"], E04: ["4.1", "4.2"], E05: ["5.1", "5.2", "5.3"],
                    E06: ["6.1", "6.2"], E07: ["7.1", "7.2", "7.3"], E08: ["8.1", "8.2"]}


def exercises_of(attack: Attack) -> list[str]:
    """The exercises graded for an attack: the attacked ones, or its whole module."""
    if attack.whole_module:
        return MODULE_EXERCISES[attack.module]
    return [i for i in MODULE_EXERCISES[attack.module] if i in attack.zeroed]
