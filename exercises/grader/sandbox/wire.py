"""The wire format between the judge and a sandboxed exercise: data only, never pickle.

A message is an 8-byte length, a 4-byte header length, a JSON header and raw array bytes
(:func:`pack`, :func:`unpack`). A value travels as a JSON tree (:func:`encode`): plain values,
tuples, lists and dicts, NumPy arrays and scalars of a numeric or boolean dtype and tensors (their
bytes go in the blobs), torch dtypes; anything else arrives as :class:`Opaque`, its type's name.
:func:`decode` rebuilds the value and, on the judge's side (``strict``), raises
:class:`ProtocolError` on anything the format does not allow: a malformed message from the
child ends its exercise with zero; it never reaches the scores.

Both sides import this file: the judge (:mod:`exercises.grader.session`,
:mod:`exercises.grader.remote`) and the sandboxed server (:mod:`.server`), which holds its own
private copy of the functions below, so a submission that patches ``json`` or NumPy changes
nothing here. The module defines no method a submission could reach.
"""
from __future__ import annotations

import collections
import json
import json.encoder
import json.scanner
import os
import struct

import numpy as np

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
_ndarray = np.ndarray
_generic = np.generic
_np_dtype = np.dtype
_float_hex = float.hex
_float_fromhex = float.fromhex
_OrderedDict = collections.OrderedDict
_read, _write = os.read, os.write


class ProtocolError(Exception):
    """A message that is not what the protocol allows."""


class Opaque(str):
    """An output of a type that does not travel (a module, a generator ...): its type's name.

    It has no method of its own: a class of this module that a submission could find (through
    ``object.__subclasses__()``) must not lead to this module's globals."""

    __slots__ = ()
    type_name = property(str.__str__)


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
        if t is dict or t is _OrderedDict:
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


def fd_channel(fd: int):
    """(recv, send) of whole messages on a file descriptor; recv() returns the body without its
    8-byte length, or None at the end of the stream."""

    def recv():
        head = b""
        while len(head) < 8:
            chunk = _read(fd, 8 - len(head))
            if not chunk:
                return None
            head += chunk
        (n,) = _struct_unpack("<Q", head)
        parts, got = [], 0
        while got < n:
            chunk = _read(fd, min(n - got, 1 << 20))
            if not chunk:
                return None
            parts.append(chunk)
            got += len(chunk)
        return b"".join(parts)

    def send(data):
        view = memoryview(data)
        while view:
            view = view[_write(fd, view):]

    return recv, send
