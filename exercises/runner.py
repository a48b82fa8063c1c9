"""The learner's side of the judge: the only code that shares a process with a submission.

``python -m exercises.grade`` (the judge, :mod:`exercises.session`) starts this file as a
*zygote*: a fresh interpreter (``python -I -B runner.py``) that imports NumPy, PyTorch, einops,
``scipy.special`` and the library (``vit_scratch``) once -- never the hidden tests, the
references or the scoring code, which it cannot read either -- and then forks one process per
exercise. That process

1. starts a session of its own, asks the kernel to kill it when the zygote dies
   (``PR_SET_PDEATHSIG``), closes every inherited file descriptor except its two pipes and its
   output file, sets its resource limits (CPU time, address space, file size, one process:
   no fork and no thread can start) and, when the judge runs as root, drops to a uid and gid
   of the submission's own;
2. installs the rules, before a line of the learner's code runs: a PEP 578 audit hook (which
   cannot be removed), a profiler (the "no calls to the answer" guard) and a tracer (the
   Python-step count of the loop check), see :func:`make_rules`;
3. answers the judge's requests, one at a time: import the learner's module, call a function
   or a method with these inputs, count the Python steps of a call, measure its peak memory,
   run a backward pass. The inputs and the outputs travel as data only -- a JSON header and
   raw array bytes (:func:`pack`, :func:`encode`, :func:`decode`), never pickle -- and each
   answer carries the request's nonce, so bytes the learner writes to the pipe are a
   protocol error, not an answer.

Every score is computed by the judge from the outputs; this process never sees an expected
value. It runs its own code from a private copy of this module (:func:`_boot`) whose globals
and builtins the learner cannot reach, and it keeps its state in closures.
"""
from __future__ import annotations

import builtins
import json
import json.encoder
import json.scanner
import os
import struct
import sys

import numpy as np

# ---- the wire format (shared with exercises.session) ---------------------------------------------

MAX_MESSAGE = 64 << 20          # bytes of one message from a child
MAX_DEPTH = 24                  # nesting of one value
MAX_NODES = 200_000             # values in one message
MAX_TEXT = 20_000               # characters of one string
ARRAY_DTYPES = frozenset({"|b1", "|i1", "<i2", "<i4", "<i8", "|u1", "<u2", "<u4", "<u8",
                          "<f2", "<f4", "<f8", "<c8", "<c16"})
TORCH_DTYPES = ("float16", "float32", "float64", "bfloat16", "int8", "int16", "int32", "int64",
                "uint8", "bool", "complex64", "complex128")

_scan = json.scanner.c_make_scanner(json.JSONDecoder())      # the C scanner and encoder: nothing
_encoder = json.encoder.c_make_encoder(                      # a submission patches in json's
    None, None, json.encoder.encode_basestring_ascii, None,  # Python layer reaches them
    ":", ",", False, False, True)
_frombuffer = np.frombuffer
_asarray = np.asarray
_ascontiguousarray = np.ascontiguousarray
_struct_pack, _struct_unpack = struct.pack, struct.unpack
_realpath, _fsdecode, _dirname = os.path.realpath, os.fsdecode, os.path.dirname
_SEP = os.sep
_ndarray = np.ndarray
_generic = np.generic
_np_dtype = np.dtype
_float_hex = float.hex
_float_fromhex = float.fromhex


class ProtocolError(Exception):
    """A message that is not what the protocol allows (only ever raised on the judge's side)."""


class Opaque:
    """An output of a type that does not travel (a module, a generator ...): its type's name."""

    def __init__(self, type_name: str):
        self.type_name = type_name

    def __repr__(self):
        return f"<{self.type_name} object>"


def dumps(obj) -> bytes:
    return "".join(_encoder(obj, 0)).encode("ascii")


def loads(data: bytes):
    text = data.decode("ascii")
    obj, end = _scan(text, 0)
    if end != len(text):
        raise ProtocolError("trailing bytes after the JSON header")
    return obj


def pack(header: dict, blobs=()) -> bytes:
    """One message: 8-byte length, 4-byte header length, the JSON header, the blobs."""
    header = dict(header)
    header["blobs"] = [len(b) for b in blobs]
    head = dumps(header)
    body = b"".join(blobs)
    return _struct_pack("<QI", 4 + len(head) + len(body), len(head)) + head + body


def unpack(payload: bytes):
    """(header, blobs) of a message body (without its 8-byte length); ProtocolError if malformed."""
    if len(payload) < 4:
        raise ProtocolError("message too short")
    (head_len,) = _struct_unpack("<I", payload[:4])
    if head_len > len(payload) - 4 or head_len > 4 << 20:
        raise ProtocolError("header length out of range")
    try:
        header = loads(payload[4:4 + head_len])
    except (ValueError, UnicodeDecodeError, RecursionError) as err:
        raise ProtocolError(f"header is not JSON ({type(err).__name__})") from None
    if type(header) is not dict:
        raise ProtocolError("header is not an object")
    sizes = header.get("blobs")
    if type(sizes) is not list or any(type(s) is not int or s < 0 for s in sizes):
        raise ProtocolError("bad blob table")
    if 4 + head_len + sum(sizes) != len(payload):
        raise ProtocolError("blob sizes do not add up")
    blobs, pos = [], 4 + head_len
    for s in sizes:
        blobs.append(payload[pos:pos + s])
        pos += s
    return header, blobs


def encode(value, blobs: list, torch=None, limit: int = MAX_MESSAGE):
    """A JSON-able tree for ``value``; arrays go to ``blobs`` as raw little-endian bytes.

    Exact types only (no subclass's method runs): None, bool, int, float, str, tuple, list,
    dict, NumPy arrays and scalars of a numeric or boolean dtype, tensors, torch dtypes.
    Anything else becomes ``{"opaque": type name}``.
    """
    budget = [MAX_NODES, limit]
    tensor_type = torch.Tensor if torch is not None else None
    param_type = torch.nn.Parameter if torch is not None else None
    dtype_type = torch.dtype if torch is not None else None
    bfloat16 = torch.bfloat16 if torch is not None else None

    def array_node(arr, tag):
        arr = _ascontiguousarray(arr)
        dt = arr.dtype
        if dt.byteorder == ">":
            arr = arr.astype(dt.newbyteorder("<"))
            dt = arr.dtype
        if dt.str not in ARRAY_DTYPES:
            return {"opaque": f"array of dtype {dt}"}
        budget[1] -= arr.nbytes
        if budget[1] < 0:
            raise OverflowError("output too large")
        blobs.append(arr.tobytes())
        return {tag: len(blobs) - 1, "dtype": dt.str, "shape": list(arr.shape)}

    def walk(v, depth):
        budget[0] -= 1
        if budget[0] < 0 or depth > MAX_DEPTH:
            raise OverflowError("output too deeply nested or too large")
        t = type(v)
        if v is None or t is bool or t is str:
            return v if t is not str or len(v) <= MAX_TEXT else v[:MAX_TEXT]
        if t is int:
            return {"int": str(v)} if abs(v) >= 1 << 53 else v
        if t is float:
            return {"float": _float_hex(v)}
        if t is tuple or t is list:
            return {"tuple" if t is tuple else "list": [walk(x, depth + 1) for x in v]}
        if t is dict or (torch is not None and t is torch_odict):
            return {"dict": [[walk(k, depth + 1), walk(x, depth + 1)] for k, x in v.items()]}
        if t is _ndarray:
            return array_node(v, "nd")
        if isinstance(v, _generic) and t.__module__ == "numpy":
            return array_node(_asarray(v).reshape(1), "np")
        if tensor_type is not None and (t is tensor_type or t is param_type):
            d = v.detach()
            if d.dtype is bfloat16:
                d = d.float()
            node = array_node(d.cpu().resolve_conj().resolve_neg().numpy(), "pt")
            if "pt" in node:
                node["grad"] = bool(v.requires_grad)
            return node
        if dtype_type is not None and t is dtype_type:
            return {"tdtype": str(v).removeprefix("torch.")}
        return {"opaque": t.__name__ if isinstance(t.__name__, str) else "object"}

    torch_odict = __import__("collections").OrderedDict
    return walk(value, 0)


def decode(node, blobs, torch=None, strict: bool = True, refs=None):
    """The value of an :func:`encode` tree. ``strict``: raise ProtocolError on anything else
    (the judge reads a child's message); ``refs``: how to resolve ``{"handle": id}`` and
    ``{"call": ...}`` nodes (the child reads the judge's request)."""
    count = [0]

    def bad(why):
        raise ProtocolError(why)

    def array(n, tag):
        i, dt, shape = n.get(tag), n.get("dtype"), n.get("shape")
        if type(i) is not int or not 0 <= i < len(blobs) or dt not in ARRAY_DTYPES:
            bad("bad array reference")
        if type(shape) is not list or len(shape) > 32 or any(type(s) is not int or s < 0 for s in shape):
            bad("bad array shape")
        dtype = _np_dtype(dt)
        size = 1
        for s in shape:
            size *= s
        if size * dtype.itemsize != len(blobs[i]):
            bad("array bytes do not match its shape")
        return _frombuffer(blobs[i], dtype=dtype).reshape(shape).copy()

    def walk(n, depth):
        count[0] += 1
        if count[0] > MAX_NODES or depth > MAX_DEPTH:
            bad("message too large or too deeply nested")
        t = type(n)
        if n is None or t is bool or t is str:
            if t is str and len(n) > MAX_TEXT:
                bad("string too long")
            return n
        if t is int:
            return n
        if t is not dict or len(n) == 0:
            bad(f"unexpected {t.__name__} in a value")
        if "float" in n:
            try:
                return _float_fromhex(n["float"])
            except (TypeError, ValueError):
                bad("bad float")
        if "int" in n:
            text = n["int"]
            if type(text) is not str or len(text) > 4000:
                bad("bad int")
            try:
                return int(text)
            except ValueError:
                bad("bad int")
        for tag, kind in (("tuple", tuple), ("list", list)):
            if tag in n:
                items = n[tag]
                if type(items) is not list:
                    bad(f"bad {tag}")
                return kind(walk(x, depth + 1) for x in items)
        if "dict" in n:
            items = n["dict"]
            if type(items) is not list or any(type(p) is not list or len(p) != 2 for p in items):
                bad("bad dict")
            out = {}
            for k, v in items:
                key = walk(k, depth + 1)
                if type(key) not in (str, int, float, bool, tuple) and key is not None:
                    bad("bad dict key")
                out[key] = walk(v, depth + 1)
            return out
        if "nd" in n:
            return array(n, "nd")
        if "np" in n:
            return array(n, "np").reshape(())[()]
        if "pt" in n:
            if torch is None:
                bad("a tensor where no tensor can be made")
            t_ = torch.from_numpy(array(n, "pt"))
            if n.get("grad") is True and not strict:
                t_.requires_grad_(True)
            return t_
        if "tdtype" in n:
            if torch is None or n["tdtype"] not in TORCH_DTYPES:
                bad("bad torch dtype")
            return getattr(torch, n["tdtype"])
        if "opaque" in n:
            name = n["opaque"]
            if type(name) is not str:
                bad("bad opaque")
            return Opaque(name[:80])
        if refs is not None and ("handle" in n or "call" in n):
            return refs(n)
        bad(f"unknown value tag {sorted(n)[:3]}")

    return walk(node, 0)


# ---- the rules inside the child ------------------------------------------------------------------

# What a disqualification is called in the child's message; the judge words the feedback.
KINDS = ("forbidden", "tracer", "frames", "code", "compile", "thread", "process", "signal", "ctypes",
         "write", "read", "gc", "import", "network", "limits", "channel", "recursion", "internal")

RUNNER, CHECKING, ALLOWED = 0, 1, 2                 # the mode of a running frame
DQ_EXIT, RECURSION_EXIT, INTERNAL_EXIT = 85, 86, 87  # how the child ends when a rule stops it
_LEARNER, _OWN, _ALLOWED, _OTHER = "learner", "own", "allowed", "other"

# Modules a submission may not import (they switch rules off or start processes).
BLOCKED_IMPORTS = frozenset({
    "ctypes", "_ctypes", "cffi", "_cffi_backend", "_lsprof", "cProfile", "profile", "pdb", "bdb",
    "trace", "faulthandler", "_testcapi", "_testinternalcapi", "_testbuffer", "_testmultiphase",
    "_xxsubinterpreters", "_xxinterpchannels", "_posixsubprocess", "subprocess", "multiprocessing",
    "concurrent", "pty", "socket", "_socket", "ssl", "asyncio", "mmap", "resource", "tracemalloc",
    "_tracemalloc", "code", "codeop"})
_WRITE_EVENTS = frozenset({"os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.chown",
                           "os.link", "os.symlink", "os.truncate", "os.utime", "os.chflags",
                           "os.lchflags", "os.setxattr", "os.removexattr", "os.mkfifo", "os.mknod",
                           "shutil.copyfile", "shutil.copymode", "shutil.copystat", "shutil.copytree",
                           "shutil.rmtree", "shutil.move", "shutil.chown", "shutil.make_archive",
                           "shutil.unpack_archive", "tempfile.mkstemp", "tempfile.mkdtemp"})
_PROCESS_EVENTS = frozenset({"os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.exec", "os.system",
                             "subprocess.Popen", "os.startfile", "pty.spawn", "os.setsid"})
_FRAME_ATTRS = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame", "f_back"})
_CODE_ATTRS = frozenset({"__code__", "gi_code", "cr_code", "ag_code"})
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def code_objects(code, into: dict) -> None:
    """``code`` and every code object nested in its constants, keyed by id (kept alive)."""
    stack = [code]
    while stack:
        c = stack.pop()
        if id(c) in into:
            continue
        into[id(c)] = c
        stack.extend(k for k in c.co_consts if type(k) is type(c))


def package_tables(packages) -> dict:
    """For each package: its directories, the ids of the Python code objects defined in them
    (functions, methods, nested code), of its C functions and of its types. Built once, in the
    zygote; a package that is not loaded (timm) gets its directories only."""
    import importlib.util
    from types import BuiltinFunctionType, FunctionType

    tables = {}
    for pkg in packages:
        dirs, codes, cfuncs, types_ = set(), {}, {}, {}
        mods = [m for name, m in list(sys.modules.items())
                if m is not None and (name == pkg or name.startswith(pkg + "."))]
        for mod in mods:
            path = vars(mod).get("__path__")
            locs = list(path) if isinstance(path, list) or type(path).__name__ == "_NamespacePath" else []
            f = vars(mod).get("__file__")
            for d in [p for p in locs if isinstance(p, str)] + ([os.path.dirname(f)] if isinstance(f, str) else []):
                dirs.update({_realpath(d) + os.sep, d + os.sep})
        if not mods:
            try:
                spec = importlib.util.find_spec(pkg)
            except (ImportError, ValueError):
                spec = None
            for loc in (spec.submodule_search_locations or []) if spec else []:
                dirs.update({_realpath(loc) + os.sep, loc + os.sep})
        roots = tuple(dirs)

        def ours(fn):            # Python code: by identity for the library (small), by folder for the rest
            return pkg == "vit_scratch" and isinstance(fn, FunctionType) and fn.__code__.co_filename.startswith(roots)

        def our_c(fn):
            owner = getattr(fn, "__self__", None)
            mod = getattr(owner, "__name__", None) if owner is not None else getattr(fn, "__module__", None)
            q = getattr(fn, "__qualname__", "") or ""
            return (isinstance(mod, str) and (mod == pkg or mod.startswith(pkg + "."))) or \
                (pkg == "torch" and q.startswith("_VariableFunctionsClass."))

        for mod in mods:
            for value in list(vars(mod).values()):
                if ours(value):
                    code_objects(value.__code__, codes)
                elif isinstance(value, BuiltinFunctionType):
                    if our_c(value):
                        cfuncs[id(value)] = value
                elif isinstance(value, type) and str(getattr(value, "__module__", "")).split(".")[0] == pkg:
                    types_[id(value)] = value
                    for member in list(vars(value).values()) if pkg == "vit_scratch" else ():
                        member = getattr(member, "__func__", member)
                        for fn in (member, getattr(member, "fget", None), getattr(member, "fset", None)):
                            if ours(fn):
                                code_objects(fn.__code__, codes)
                            elif isinstance(fn, BuiltinFunctionType) and our_c(fn):
                                cfuncs[id(fn)] = fn
        tables[pkg] = {"dirs": tuple(sorted(dirs)), "codes": codes, "cfuncs": cfuncs, "types": types_}
    return tables


def resolve_prefix(prefix: str):
    """A dotted name ('scipy.special.softmax', 'scipy.signal') -> the loaded function or module,
    the folder of a module that is not loaded (a str), or None. Imports nothing."""
    import importlib.util

    if prefix in sys.modules:
        return sys.modules[prefix]
    parts = prefix.split(".")
    for i in range(len(parts) - 1, 0, -1):
        mod = sys.modules.get(".".join(parts[:i]))
        if mod is None:
            continue
        obj = mod
        for p in parts[i:]:
            obj = vars(obj).get(p) if hasattr(obj, "__dict__") else None
            if obj is None:
                break
        if obj is not None:
            return obj
        try:
            spec = importlib.util.find_spec(prefix)
        except (ImportError, ValueError, AttributeError):
            return None
        locs = spec.submodule_search_locations if spec else None
        return (list(locs)[0] if locs else os.path.dirname(spec.origin)) if spec and (locs or spec.origin) else None
    return None


def make_rules(*, forbid, allow, tables, trusted_dirs, own_codes, send_dq, exit_now, hidden_dirs,
               protocol_fds, gate_code=None, import_roots=()):
    """The three hooks and their controls, as closures (nothing here is reachable from the
    learner's code: no module global holds them).

    forbid / allow: dotted prefixes ('vit_scratch', 'torch', 'scipy.special.softmax',
    'vit_scratch.numpy_nn.layers.layer_norm'); tables: :func:`package_tables`;
    trusted_dirs: directories whose code is the interpreter's or a library's (not the
    learner's); own_codes: ids of this runner's code objects; send_dq(kind, detail): report a
    disqualification; exit_now(status): leave at once.
    """
    from types import BuiltinFunctionType, FunctionType

    recursion_limit = sys.getrecursionlimit
    forbid_codes, forbid_cfuncs, forbid_types, forbid_dirs = {}, {}, {}, []
    allow_codes = {}
    for i, prefix in enumerate(forbid):
        table = tables.get(prefix)
        if table is not None:
            for cid in table["codes"]:
                forbid_codes[cid] = i
            for fid in table["cfuncs"]:
                forbid_cfuncs[fid] = i
            for tid in table["types"]:
                forbid_types[tid] = i
            forbid_dirs.extend((d, i) for d in table["dirs"])
            continue
        obj = resolve_prefix(prefix)
        obj = getattr(obj, "__func__", obj)
        if isinstance(obj, FunctionType):
            found = {}
            code_objects(obj.__code__, found)
            for cid in found:
                forbid_codes[cid] = i
        elif isinstance(obj, BuiltinFunctionType):
            forbid_cfuncs[id(obj)] = i
        elif isinstance(obj, str):
            forbid_dirs.extend(((obj.rstrip(os.sep) + os.sep, i), (_realpath(obj) + os.sep, i)))
        elif obj is not None and isinstance(getattr(obj, "__file__", None), str):
            d = os.path.dirname(obj.__file__)
            forbid_dirs.extend(((d + os.sep, i), (_realpath(d) + os.sep, i)))
    for prefix in allow:
        obj = resolve_prefix(prefix)
        obj = getattr(obj, "__func__", obj)
        if isinstance(obj, FunctionType):
            code_objects(obj.__code__, allow_codes)
    for cid in allow_codes:
        forbid_codes.pop(cid, None)
    forbid_dirs = tuple(forbid_dirs)
    trusted = tuple(trusted_dirs)
    import_roots = tuple(sorted(import_roots, key=len, reverse=True))
    hidden = tuple(hidden_dirs)

    # C functions a submission may never call itself: they start threads or processes, switch
    # the guard off, or reach the grader's channel.
    always = {}

    def mark(obj, kind, direct_only=False):
        if isinstance(obj, BuiltinFunctionType):
            always[id(obj)] = (kind, direct_only, obj)

    import _imp
    import _thread
    import gc
    import signal

    for name in ("start_new_thread", "start_new", "start_joinable_thread", "interrupt_main"):
        mark(getattr(_thread, name, None), "thread")
    for name in dir(_imp):
        mark(getattr(_imp, name), "code", direct_only=True)      # importlib calls them too
    for name in ("signal", "setitimer", "alarm", "pthread_kill", "siginterrupt", "set_wakeup_fd",
                 "pthread_sigmask", "raise_signal"):
        mark(getattr(signal, name, None), "signal")
    for name in ("setrecursionlimit", "setswitchinterval", "_clear_type_cache", "settrace",
                 "setprofile", "call_tracing", "setdlopenflags"):
        mark(getattr(sys, name, None), "tracer")
    for name in ("_getframe", "_current_frames"):
        mark(getattr(sys, name, None), "frames")
    for name in ("get_objects", "get_referrers", "get_referents", "disable", "freeze"):
        mark(getattr(gc, name, None), "gc")
    for mod_name in ("_tracemalloc", "_posixsubprocess", "_lsprof"):
        mod = sys.modules.get(mod_name)
        for name in dir(mod) if mod is not None else ():
            mark(getattr(mod, name), "process" if mod_name == "_posixsubprocess" else "tracer")
    for name in ("fork", "forkpty", "kill", "killpg", "setsid", "setpgid"):
        mark(getattr(os, name, None), "process")

    category = {}                         # id(code) -> (code, category, prefix index)
    learner = {}                          # id -> code: the submission's own code objects
    approved = {}                         # id -> code: module code the runner may exec
    modes, codes = [RUNNER], [None]
    state = {"strict": False, "count": None, "in_hook": False, "last_pyc": None, "where": {}}

    def classify(code):
        cid = id(code)
        hit = category.get(cid)
        if hit is not None:
            return hit
        if cid in learner:
            hit = (code, _LEARNER, -1)
        elif cid in own_codes:
            hit = (code, _OWN, -1)
        elif cid in allow_codes:
            hit = (code, _ALLOWED, -1)
        elif cid in forbid_codes:
            hit = (code, _OTHER, forbid_codes[cid])
        else:
            fn = code.co_filename
            if not (fn.startswith(trusted) or fn.startswith("<frozen ")):
                hit = (code, _LEARNER, -1)                  # unknown code counts as the learner's
            else:
                hit = (code, _OTHER, -1)
                for d, i in forbid_dirs:
                    if fn.startswith(d):
                        hit = (code, _OTHER, i)
                        break
        category[cid] = hit
        return hit

    def qualname(code):
        """'vit_scratch.numpy_nn.vit.block' for a code object of a file under an import root."""
        fn, name = code.co_filename, getattr(code, "co_qualname", code.co_name)
        for root in import_roots:
            if fn.startswith(root):
                mod = fn[len(root):].removesuffix(".py").replace(_SEP, ".").removesuffix(".__init__")
                return f"{mod}.{name}"
        return f"{fn.rsplit(_SEP, 1)[-1]}:{name}"

    def c_name(fn):
        q = getattr(fn, "__qualname__", None)
        return q if isinstance(q, str) else "?"

    type_hits = {}

    def forbidden_c(fn):
        """The forbid index for a C function, or -1."""
        hit = forbid_cfuncs.get(id(fn))
        if hit is not None:
            return hit
        owner = getattr(fn, "__self__", None)
        if owner is None:
            q = c_name(fn)
            if q.startswith("_VariableFunctionsClass.") and "torch" in forbid:
                return forbid.index("torch")
            return -1
        t = owner if isinstance(owner, type) else type(owner)
        key = id(t)
        hit = type_hits.get(key)
        if hit is None:
            hit = -1
            for base in t.__mro__:
                if id(base) in forbid_types:
                    hit = forbid_types[id(base)]
                    break
            type_hits[key] = hit
        return hit

    def dq(kind, detail):
        try:
            send_dq(kind, str(detail)[:200])
        finally:
            exit_now(DQ_EXIT)

    # -- the profiler: the "no calls to the answer" guard
    def profile(frame, event, arg):
        try:
            if event == "call":
                code = frame.f_code
                _, cat, idx = classify(code)
                parent = modes[-1]
                if cat is _LEARNER or (gate_code is not None and code is gate_code):
                    mode = CHECKING
                elif parent == RUNNER or cat is _OWN:
                    mode = parent
                elif parent == ALLOWED:
                    mode = ALLOWED
                elif cat is _ALLOWED:
                    mode = ALLOWED
                elif idx >= 0:
                    dq("forbidden", f"{idx}|{qualname(code)}")
                    mode = parent
                else:
                    mode = CHECKING
                modes.append(mode)
                codes.append(code)
            elif event == "return":
                if len(modes) > 1:
                    modes.pop()
                    codes.pop()
            elif event == "c_call" and modes[-1] != RUNNER:
                hit = always.get(id(arg))
                if hit is not None and (not hit[1] or classify(codes[-1])[1] is _LEARNER):
                    dq(hit[0], c_name(arg))
                if modes[-1] == CHECKING:
                    idx = forbidden_c(arg)
                    if idx >= 0:
                        dq("forbidden", f"{idx}|{c_name(arg)}")
        except BaseException as err:                        # noqa: BLE001 - never leave the hook
            exit_now(RECURSION_EXIT if type(err) is RecursionError else INTERNAL_EXIT)

    # -- the tracer: Python steps in the learner's code, and where its exceptions pass
    def local(frame, event, arg):
        if event == "opcode":
            if state["count"] is not None:
                state["count"] += 1
        elif event == "exception":
            where = state["where"]
            key = id(arg[1])
            if key not in where and len(where) < 64:
                where[key] = (frame.f_code.co_filename, frame.f_lineno, arg[1])
        return local

    def trace(frame, event, arg):
        try:
            if event != "call":
                return None
            if classify(frame.f_code)[1] is _LEARNER:
                if state["count"] is not None:
                    frame.f_trace_opcodes = True
                return local
            return None
        except BaseException as err:                        # noqa: BLE001
            exit_now(RECURSION_EXIT if type(err) is RecursionError else INTERNAL_EXIT)

    # -- the audit hook: what no graded code may do (installed once, never removed)
    hook_code = []

    def context():
        """(mode, code) of the frame that raised the event (below the hook's own frame)."""
        i = len(modes) - 1
        if i > 0 and hook_code and codes[i] is hook_code[0]:
            i -= 1
        return modes[i], codes[i]

    def trusted_file_bytes(path):
        if not isinstance(path, str) or not path.startswith(trusted):
            return None
        state["in_hook"] = True
        try:
            with open(path, "rb") as fh:
                return fh.read()
        except OSError:
            return None
        finally:
            state["in_hook"] = False

    def audit(event, args):
        if not state["strict"] or state["in_hook"]:
            return
        try:
            mode, caller = context()
            if mode == RUNNER:
                if event in ("sys.setprofile", "sys.settrace"):
                    dq("tracer", event)
                return
            if event == "open":
                path, mode_, flags = (tuple(args) + (None, None, None))[:3]
                writes = (isinstance(mode_, str) and any(c in mode_ for c in "wax+")) or \
                         (isinstance(flags, int) and flags & _WRITE_FLAGS)
                if writes:
                    dq("write", f"open({path!r}, {mode_!r})")
                if isinstance(path, int):
                    if path in protocol_fds:
                        dq("channel", f"open({path})")
                    return
                p = _fsdecode(path) if isinstance(path, (str, bytes)) else ""
                real = _realpath(p) if p else p
                if real.startswith(hidden) or p.startswith(hidden):
                    dq("read", p)
                if real.startswith("/proc/") and (real.endswith("/mem") or "/mem" in real.rsplit("/", 1)[-1]):
                    dq("read", p)
                if p.endswith(".pyc") and p.startswith(trusted):
                    state["last_pyc"] = p
                return
            if event in ("sys.setprofile", "sys.settrace") and len(modes) > recursion_limit() - 100:
                exit_now(RECURSION_EXIT)                    # CPython unhooks a hook that hit the limit
            if event in ("sys.setprofile", "sys.settrace", "sys._current_frames", "sys.addaudithook",
                         "sys.setrecursionlimit"):
                dq("tracer", event)
            if event == "sys._getframe":
                dq("frames", "sys._getframe")
            if event == "object.__getattr__":
                name = args[1] if len(args) > 1 else ""
                if name in _FRAME_ATTRS:
                    dq("frames", f".{name}")
                if name in _CODE_ATTRS and caller is not None and classify(caller)[1] is _LEARNER:
                    dq("code", f".{name}")
                return
            if event in ("object.__setattr__", "object.__delattr__"):
                name = args[1] if len(args) > 1 else ""
                if name in _CODE_ATTRS or name in ("__globals__", "__closure__", "__builtins__"):
                    dq("code", f"sets .{name}")
                return
            if event in ("code.__new__", "function.__new__", "code.replace"):
                dq("code", event)
            if event == "compile":
                source, filename = (tuple(args) + (None, None))[:2]
                data = trusted_file_bytes(filename)
                if data is None or (source if isinstance(source, bytes) else str(source).encode()) != data:
                    dq("compile", f"compile(..., {str(filename)[:60]!r})")
                return
            if event == "exec":
                code = args[0] if args else None
                if id(code) in approved:
                    return
                fn = getattr(code, "co_filename", "")
                if getattr(code, "co_name", "") == "<module>" and isinstance(fn, str) and \
                        (fn.startswith(trusted) or fn.startswith("<frozen ")):
                    return
                dq("compile", "exec/eval of new code")
            if event in ("marshal.loads", "marshal.load"):
                data = args[0] if args else None
                pyc = state["last_pyc"]
                whole = trusted_file_bytes(pyc) if pyc else None
                if isinstance(data, bytes) and whole is not None and whole[16:] == data:
                    return
                dq("compile", event)
            if event == "import":
                name = args[0] if args else ""
                if isinstance(name, str) and name.split(".")[0] in BLOCKED_IMPORTS:
                    dq("import", name)
                return
            if event in _WRITE_EVENTS:
                dq("write", event)
            if event in _PROCESS_EVENTS:
                dq("process", event)
            if event in ("os.kill", "os.killpg", "signal.pthread_kill"):
                dq("signal", event)
            if event.startswith("gc."):
                dq("gc", event)
            if event.startswith("ctypes."):
                dq("ctypes", event)
            if event.startswith("socket."):
                dq("network", event)
            if event.startswith("resource."):
                dq("limits", event)
        except BaseException as err:                        # noqa: BLE001
            exit_now(RECURSION_EXIT if type(err) is RecursionError else INTERNAL_EXIT)

    hook_code.append(audit.__code__)

    # -- controls (held by the serve loop only)
    def add_learner_code(module_code):
        code_objects(module_code, learner)
        approved[id(module_code)] = module_code

    def strict():
        state["strict"] = True

    def count_start():
        state["count"] = 0

    def count_stop():
        n, state["count"] = state["count"], None
        return n

    def where(exc):
        hit = state["where"].get(id(exc))
        state["where"].clear()
        if hit is None or hit[2] is not exc:
            return ""
        return f"{hit[0].rsplit(_SEP, 1)[-1]}, line {hit[1]}"

    def reset_where():
        state["where"].clear()

    return {"profile": profile, "trace": trace, "audit": audit, "add_learner_code": add_learner_code,
            "strict": strict, "count_start": count_start, "count_stop": count_stop, "where": where,
            "reset_where": reset_where, "classify": classify}


# ---- the zygote and the per-exercise process -----------------------------------------------------

PRELOAD = ("numpy", "torch", "torch.nn", "torch.nn.functional", "einops", "scipy.special", "math",
           "vit_scratch")
PACKAGES = ("vit_scratch", "torch", "einops", "scipy", "timm")
GRADER_FILES = frozenset({"__init__.py", "check.py", "grade.py", "judge.py", "session.py", "runner.py",
                          "feedback.py", "visible_checks.py", "release.py", "test_visible.py"})


def _preload():
    """Import what graded code may use, and run each once so that lazy imports happen here."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import einops
    import scipy.special  # noqa: F401
    import torch
    import torch.nn.functional as F
    from torch import nn

    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    import vit_scratch
    import vit_scratch.numpy_nn  # noqa: F401
    import vit_scratch.torch_nn  # noqa: F401
    import pkgutil
    import importlib

    for pkg in (vit_scratch.numpy_nn, vit_scratch.torch_nn):
        for info in pkgutil.iter_modules(pkg.__path__):
            importlib.import_module(f"{pkg.__name__}.{info.name}")

    for name in ("itertools", "functools", "operator", "collections", "typing", "dataclasses", "fractions",
                 "statistics", "random", "copy", "string", "re", "time", "enum", "numbers", "decimal", "heapq",
                 "bisect", "array", "textwrap", "warnings", "contextlib", "cmath", "math"):
        importlib.import_module(name)     # graded code may import these after the uid drop too
    x = np.linspace(-1, 1, 24).reshape(1, 2, 3, 4)
    einops.rearrange(x, "b c h w -> b (h w) c")
    einops.reduce(x, "b c h w -> b c", "mean")
    np.einsum("bchw,c->bhw", x, np.ones(2))
    np.linalg.norm(x, axis=-1)
    np.lib.stride_tricks.sliding_window_view(x, (2, 2), axis=(2, 3))
    scipy.special.erf(x)
    t = torch.from_numpy(x).requires_grad_()
    einops.rearrange(t, "b c h w -> b (h w) c")
    m = nn.Sequential(nn.LayerNorm(4, eps=1e-6), nn.Linear(4, 4), nn.GELU(), nn.Dropout(0.0)).double()
    m.load_state_dict(m.state_dict())
    y = m(t).softmax(-1)
    y = y + F.interpolate(t, size=(3, 4), mode="bilinear", align_corners=False)
    y = y + F.conv2d(t, torch.ones(2, 1, 3, 3, dtype=torch.float64), padding=1, groups=2)
    q = t.reshape(1, 2, 3, 4)
    y = y + F.scaled_dot_product_attention(q, q, q)
    y = y + F.layer_norm(t, (4,)) + F.gelu(t) + F.linear(t, torch.ones(4, 4, dtype=torch.float64))
    y.sum().backward()
    with torch.no_grad():
        torch.einsum("bchw,c->bhw", t, torch.ones(2, dtype=torch.float64))
    import tracemalloc

    tracemalloc.start()
    tracemalloc.reset_peak()
    tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return torch


def _fd_channel(fd):
    """Read and write whole messages on a file descriptor (captured functions only)."""
    read, write = os.read, os.write

    def recv():
        head = b""
        while len(head) < 8:
            chunk = read(fd, 8 - len(head))
            if not chunk:
                return None
            head += chunk
        (n,) = _struct_unpack("<Q", head)
        parts, got = [], 0
        while got < n:
            chunk = read(fd, min(n - got, 1 << 20))
            if not chunk:
                return None
            parts.append(chunk)
            got += len(chunk)
        return b"".join(parts)

    def send(data):
        view = memoryview(data)
        while view:
            view = view[write(fd, view):]

    return recv, send


def _prctl(option, value):
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):
        return -1


PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS = 1, 4, 38


def zygote_main(control_fd: int, repo_root: str) -> None:
    """Preload, then serve the judge's spawn and reap requests on a Unix socket."""
    import signal
    import socket

    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    parent = os.getppid()
    torch = _preload()
    sock = socket.socket(fileno=control_fd)
    trusted = sorted({os.path.dirname(os.path.realpath(p)) + os.sep for p in
                      (os.__file__, json.__file__, np.__file__)} | _site_dirs() |
                     {os.path.realpath(os.path.join(repo_root, "vit_scratch")) + os.sep,
                      os.path.join(repo_root, "vit_scratch") + os.sep, os.path.realpath(__file__)})
    tables = package_tables(PACKAGES)
    own = {}
    for value in list(globals().values()):
        if callable(value) and hasattr(value, "__code__"):
            code_objects(value.__code__, own)
    sock.sendall(dumps({"ready": True, "pid": os.getpid()}) + b"\n")
    buf = b""
    while True:
        msg, fds, _, _ = socket.recv_fds(sock, 1 << 16, 8)
        if not msg:
            os._exit(0)
        buf += msg
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            req = loads(line)
            if req["op"] == "spawn":
                pid = os.fork()
                if pid == 0:
                    try:
                        sock.close()
                        _child_main(req, fds, torch, tables, trusted, own, repo_root)
                    except BaseException:                   # noqa: BLE001 - a bug of the runner
                        import traceback

                        traceback.print_exc()
                    finally:
                        os._exit(70)
                for fd in fds:
                    os.close(fd)
                fds = []
                sock.sendall(dumps({"pid": pid}) + b"\n")
            elif req["op"] == "reap":
                pid = req["pid"]
                for kill in (os.killpg, os.kill):
                    try:
                        kill(pid, signal.SIGKILL)
                    except (ProcessLookupError, PermissionError):
                        pass
                try:
                    _, status, usage = os.wait4(pid, 0)
                    cpu = usage.ru_utime + usage.ru_stime
                except ChildProcessError:
                    status, cpu = -1, 0.0
                sock.sendall(dumps({"status": status, "cpu": cpu}) + b"\n")
            elif req["op"] == "quit":
                os._exit(0)
        if os.getppid() != parent:
            os._exit(0)


def _site_dirs():
    import site
    import sysconfig

    dirs = set()
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        p = sysconfig.get_paths().get(key)
        if p:
            dirs.update({os.path.realpath(p) + os.sep, p + os.sep})
    for p in site.getsitepackages() + [os.path.dirname(os.path.realpath(os.__file__))]:
        dirs.update({os.path.realpath(p) + os.sep, p + os.sep})
    return dirs


def _child_main(req, fds, torch, tables, trusted, own, repo_root):
    """The per-exercise process: confine, install the rules, serve the judge until told to stop."""
    import resource
    import signal

    zygote = os.getppid()
    os.setsid()
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != zygote:
        os._exit(0)
    req_fd, resp_fd, out_fd = fds
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(out_fd, 1)
    os.dup2(out_fd, 2)
    os.dup2(req_fd, 3)
    os.dup2(resp_fd, 4)
    os.closerange(5, 1 << 16)
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    limits = req["limits"]
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits["output"], limits["output"]))
    resource.setrlimit(resource.RLIMIT_CPU, (limits["cpu"], limits["cpu"] + 1))
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    try:
        with open("/proc/self/status") as fh:
            vm = next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmSize:"))
        resource.setrlimit(resource.RLIMIT_AS, (vm + limits["memory"], vm + limits["memory"]))
    except (OSError, StopIteration, ValueError):
        pass
    os.chdir("/")
    if req.get("uid") is not None and os.geteuid() == 0:
        os.setgroups([])
        os.setgid(req["gid"])
        os.setuid(req["uid"])
        if os.getuid() != req["uid"] or os.geteuid() != req["uid"]:
            os._exit(71)
    resource.setrlimit(resource.RLIMIT_NPROC, (1, 1))   # no fork, no thread (the kernel refuses)
    _prctl(PR_SET_NO_NEW_PRIVS, 1)
    _prctl(PR_SET_DUMPABLE, 0)
    _serve(req, torch, tables, trusted, own, repo_root)


def _serve(req, torch, tables, trusted, own, repo_root):
    recv, send = _fd_channel(3)
    _, send_raw = _fd_channel(4)
    exit_now = os._exit
    getprofile, gettrace = sys.getprofile, sys.gettrace
    setprofile, settrace = sys.setprofile, sys.settrace
    import types

    ModuleType = types.ModuleType
    tm = __import__("_tracemalloc")
    tm_start, tm_stop, tm_peak, tm_reset, tm_tracing = (tm.start, tm.stop, tm.get_traced_memory,
                                                        tm.reset_peak, tm.is_tracing)
    no_grad, enable_grad = torch.no_grad, torch.enable_grad
    TensorBase = torch._C.TensorBase
    t_sum, t_mul = TensorBase.sum, TensorBase.mul
    t_backward = torch.autograd.backward
    t_isfinite, t_abs = torch.isfinite, TensorBase.abs
    Module = torch.nn.Module
    LayerNorm = torch.nn.LayerNorm
    Tensor = torch.Tensor
    current = {"nonce": req.get("nonce", "")}

    def reply(header, blobs=()):
        header = dict(header)
        header["nonce"] = current["nonce"]
        send_raw(pack(header, blobs))

    def send_dq(kind, detail):
        reply({"status": "disqualified", "kind": kind, "detail": detail})

    hidden = [os.path.join(repo_root, "exercises", d) + os.sep for d in ("hidden", "solutions")]

    def gate(fn, args, kwargs):
        return fn(*args, **kwargs)

    rules = make_rules(forbid=tuple(req["forbid"]), allow=tuple(req["allow"]), tables=tables,
                       trusted_dirs=trusted, own_codes=own, send_dq=send_dq, exit_now=exit_now,
                       hidden_dirs=hidden + [os.path.realpath(h) + os.sep for h in hidden],
                       protocol_fds=(3, 4), gate_code=gate.__code__,
                       import_roots=[p.rstrip(os.sep) + os.sep for p in sys.path if p and p.startswith("/")])
    profile, trace = rules["profile"], rules["trace"]
    sys.addaudithook(rules["audit"])
    setprofile(profile)
    settrace(trace)
    handles = {}
    state = {"module": None}

    def intact():
        if getprofile() is not profile or gettrace() is not trace:
            send_dq("tracer", "the profiler or the tracer was replaced")
            exit_now(DQ_EXIT)
        if tm_tracing() and state.get("tracing") is not True:
            send_dq("tracer", "tracemalloc was started")
            exit_now(DQ_EXIT)

    def resolve(n):
        if "handle" in n:
            obj = handles.get(n["handle"])
            if obj is None:
                raise KeyError("no such handle")
            return obj
        return run_call(n["call"])[0]

    def arguments(spec, blobs):
        args = decode(spec.get("args", {"list": []}), blobs, torch=torch, strict=False, refs=resolve)
        kwargs = decode(spec.get("kwargs", {"dict": []}), blobs, torch=torch, strict=False, refs=resolve)
        return list(args), dict(kwargs)

    blob_box = [()]

    def target_of(spec):
        tgt = spec["target"]
        if "handle" in tgt:
            obj = handles[tgt["handle"]]
            return obj if tgt.get("method") is None else gate(getattr, (obj, tgt["method"]), {})
        return gate(getattr, (state["module"], tgt["attr"]), {})

    def run_call(spec):
        args, kwargs = arguments(spec, blob_box[0])
        fn = target_of(spec)
        if spec.get("no_grad"):
            with no_grad():
                out = gate(fn, args, kwargs)
        else:
            out = gate(fn, args, kwargs)
        return out, args

    def outcome(header_fn):
        """Run header_fn() -> (header, blobs); translate the learner's exceptions."""
        rules["reset_where"]()
        try:
            header, blobs = header_fn()
        except NotImplementedError as err:
            intact()
            return {"status": "notdone", "message": safe_str(err)}, []
        except SystemExit as err:
            intact()
            return {"status": "exit", "message": safe_str(err.code)}, []
        except KeyboardInterrupt:
            intact()
            return {"status": "exit", "message": "KeyboardInterrupt"}, []
        except OverflowError as err:
            intact()
            if str(err) in ("output too large", "output too deeply nested or too large"):
                return {"status": "toolarge", "message": str(err)}, []
            return raised(err), []
        except BaseException as err:                        # noqa: BLE001 - the learner's error
            intact()
            return raised(err), []
        intact()
        return header, blobs

    def safe_str(x):
        try:
            return gate(str, (x,), {})[:300] if x is not None else ""
        except BaseException:                               # noqa: BLE001
            return "(an unprintable value)"

    def raised(err):
        kinds = []
        for base in type(err).__mro__:
            if base.__module__ == "builtins" and isinstance(base.__name__, str):
                kinds.append(base.__name__)
        return {"status": "raised", "type": type.__dict__["__name__"].__get__(type(err)),
                "bases": kinds[:8], "message": safe_str(err), "where": rules["where"](err)}

    def value_reply(value):
        blobs = []
        node = encode(value, blobs, torch=torch)
        return {"status": "ok", "value": node}, blobs

    def do_import(r):
        sources = r["sources"]
        compiled = {}
        for name, (label, text) in sources.items():
            try:
                compiled[name] = compile(text, label, "exec", dont_inherit=True)
            except SyntaxError as err:
                compiled[name] = ("syntax", f"SyntaxError at line {err.lineno}: {err.msg}")
            except (ValueError, TypeError) as err:
                compiled[name] = ("syntax", f"{type(err).__name__}: {err}")
        for c in compiled.values():
            if not isinstance(c, tuple):
                rules["add_learner_code"](c)

        class Finder:
            @staticmethod
            def find_spec(fullname, path=None, target=None):
                if fullname in compiled and path is None:
                    from importlib.machinery import ModuleSpec

                    return ModuleSpec(fullname, Loader, origin=sources[fullname][0])
                return None

        class Loader:
            @staticmethod
            def create_module(spec):
                return None

            @staticmethod
            def exec_module(module):
                c = compiled[module.__name__]
                if isinstance(c, tuple):
                    raise SyntaxError(c[1])
                module.__file__ = sources[module.__name__][0]
                exec(c, module.__dict__)

        for cls in (Finder, Loader):
            for v in vars(cls).values():
                fn = getattr(v, "__func__", v)
                if hasattr(fn, "__code__"):
                    code_objects(fn.__code__, own)
        sys.meta_path.insert(0, Finder)
        main = r["module"]
        if main not in compiled:
            return {"status": "import", "message": f"{main}.py is missing from the submission"}, []
        if isinstance(compiled[main], tuple):
            return {"status": "import", "message": f"{main}.py does not compile: {compiled[main][1]}"}, []
        module = ModuleType(main)
        module.__file__ = sources[main][0]
        module.__loader__ = Loader
        sys.modules[main] = module
        rules["strict"]()

        def body():
            exec(compiled[main], module.__dict__)
            return {"status": "ok"}, []

        header, blobs = outcome(body)
        if header["status"] != "ok":
            header = {"status": "import", "message": header.get("message", ""),
                      "error": header}
        else:
            state["module"] = module
        return header, blobs

    def do_call(r, blobs):
        def body():
            out, _ = run_call(r["call"])
            if r.get("keep"):
                handles[len(handles) + 1] = out
                is_module = isinstance(out, Module)
                return {"status": "ok", "handle": len(handles), "module": is_module}, []
            return value_reply(out)
        return outcome(body)

    def do_steps(r):
        def body():
            spec = r["call"]
            args, kwargs = arguments(spec, blob_box[0])
            fn = target_of(spec)
            rules["count_start"]()
            try:
                if spec.get("no_grad"):
                    with no_grad():
                        gate(fn, args, kwargs)
                else:
                    gate(fn, args, kwargs)
            finally:
                steps = rules["count_stop"]()
            return {"status": "ok", "steps": steps}, []
        return outcome(body)

    def do_memory(r):
        def body():
            spec = r["call"]
            args, kwargs = arguments(spec, blob_box[0])
            fn = target_of(spec)
            state["tracing"] = True
            tm_start(1)
            tm_reset()
            try:
                gate(fn, args, kwargs)
                if not tm_tracing():
                    send_dq("tracer", "tracemalloc was stopped")
                    exit_now(DQ_EXIT)
                peak = tm_peak()[1]
            finally:
                tm_stop()
                state["tracing"] = False
            return {"status": "ok", "peak": int(peak)}, []
        return outcome(body)

    def do_grad(r):
        def body():
            spec = r["call"]
            args, kwargs = arguments(spec, blob_box[0])
            fn = target_of(spec)
            with enable_grad():
                out = gate(fn, args, kwargs)
                if type(out) is not Tensor:
                    return {"status": "ok", "value": encode(out, [], torch=torch), "grads": None}, []
                gate(lambda: t_backward(t_sum(out)), (), {})
            grads = [args[i].grad if type(args[i]) is Tensor else None for i in r["wrt"]]
            blobs = []
            node = encode(out, blobs, torch=torch)
            gnode = encode(tuple(grads), blobs, torch=torch)
            return {"status": "ok", "value": node, "grads": gnode}, blobs
        return outcome(body)

    def do_module(r):
        obj = handles.get(r["handle"])
        action = r["action"]

        def body():
            if action == "state_dict":
                return value_reply(gate(lambda: dict(obj.state_dict()), (), {}))
            if action == "to":
                dtype = decode(r["dtype"], [], torch=torch, strict=False)
                res = gate(lambda: obj.to(dtype), (), {})
                if isinstance(res, Module):
                    handles[r["handle"]] = res
                return {"status": "ok"}, []
            if action in ("eval", "train"):
                gate(getattr(obj, action), (), {})
                return {"status": "ok"}, []
            if action == "load_state_dict":
                sd = decode(r["state"], blob_box[0], torch=torch, strict=False)
                gate(lambda: obj.load_state_dict(sd, strict=True), (), {})
                return {"status": "ok"}, []
            if action == "layer_norm_eps":
                return value_reply(gate(lambda: [float(m.eps) for m in obj.modules()
                                                 if isinstance(m, LayerNorm)], (), {}))
            if action == "param_grads":
                x = decode(r["x"], blob_box[0], torch=torch, strict=False).requires_grad_()

                def run():
                    obj.train()
                    for p in obj.parameters():
                        p.grad = None
                    out = obj(x)
                    w = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).reshape(out.shape)
                    t_backward(t_sum(t_mul(out, w)))
                    return [(n, p.grad is None or not bool(t_isfinite(p.grad).all()) or
                             float(t_sum(t_abs(p.grad))) == 0.0) for n, p in obj.named_parameters()]
                return value_reply(gate(run, (), {}))
            return {"status": "bad", "message": "unknown module action"}, []
        if obj is None:
            return {"status": "bad", "message": "no such handle"}, []
        return outcome(body)

    while True:
        data = recv()
        if data is None:
            exit_now(0)
        header, blobs = unpack(data)
        current["nonce"] = header.get("nonce", "")
        blob_box[0] = blobs
        op = header.get("op")
        if op == "import":
            resp = do_import(header)
        elif op == "call":
            resp = do_call(header, blobs)
        elif op == "steps":
            resp = do_steps(header)
        elif op == "memory":
            resp = do_memory(header)
        elif op == "grad":
            resp = do_grad(header)
        elif op == "module":
            resp = do_module(header)
        elif op == "bye":
            exit_now(0)
        else:
            resp = ({"status": "bad", "message": f"unknown op {op!r}"}, [])
        reply(*resp)


def _boot():
    """Run this file's code from a private namespace (its own builtins), so that nothing a
    submission patches -- builtins, json, this module's globals -- changes the runner."""
    ns = {"__builtins__": dict(vars(builtins)), "__name__": "exercises-runner", "__file__": __file__}
    with open(__file__, "rb") as fh:
        code = compile(fh.read(), __file__, "exec")
    exec(code, ns)
    control_fd, repo_root = int(sys.argv[1]), sys.argv[2]
    sys.path.insert(0, sys.argv[3])                     # a folder that holds vit_scratch only
    ns["zygote_main"](control_fd, repo_root)


if __name__ == "__main__":
    _boot()
