"""The learner's code at a distance: what a hidden test holds instead of the learner's functions.

A hidden test calls :meth:`ExerciseRun.fn` and :meth:`ExerciseRun.cls` (:mod:`.judge`) and gets
a :class:`RemoteFunction` or a :class:`RemoteClass`: calling one sends the inputs to the
exercise's process (:mod:`.session`) and brings back its outputs -- arrays, tensors and plain
values, never code -- while the expected values, the references and the points stay in the
judge. :class:`Call` is a call to be run later (for the loop and memory checks, or nested:
``merge.later(split.later(x, 2))``). An answer that is not what was asked for ends the exercise
(:class:`~.session.ChildGone`); the learner's exceptions come back as Python's own types
(:func:`rebuild_error`), and a call of something the exercise may not use -- absent from its
sandbox -- as :class:`Disqualified`. Text from the child is cleaned before it is shown
(:func:`clean`).
"""
from __future__ import annotations

import re
import unicodedata

from exercises.feedback import Fail
from exercises.grader.sandbox import wire
from exercises.grader.session import ChildGone


class NotDone(BaseException):
    """The learner's code raised NotImplementedError: the exercise is not attempted yet."""


class Disqualified(BaseException):
    """Zero for the whole exercise (forbidden call, sys.exit ...), with the reason."""


class LearnerError(Exception):
    """An exception of the learner's code whose type is not one of Python's own."""


_BUILTIN_ERRORS = {cls.__name__: cls for cls in (
    ValueError, TypeError, IndexError, KeyError, RuntimeError, AttributeError, ZeroDivisionError,
    AssertionError, RecursionError, MemoryError, OverflowError, FloatingPointError, ArithmeticError,
    LookupError, NameError, UnboundLocalError, UnicodeError, OSError, NotImplementedError,
    StopIteration, ImportError, ModuleNotFoundError)}


# What no text from a submission may carry onto a screen or into a report: control characters
# (escape sequences start with one), format characters (bidirectional overrides), surrogates,
# private-use and unassigned characters, and the line and paragraph separators U+2028, U+2029.
_UNSAFE = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


def printable(text, limit: int = 2000) -> str:
    """The sanitiser of every text a submission controls (messages, type names, folder names),
    for the report and the screen: each unsafe character (:data:`_UNSAFE`) but the newline
    replaced by '?', at most ``limit`` characters."""
    text = text if isinstance(text, str) else str(text)
    return "".join(c if c == "\n" or unicodedata.category(c) not in _UNSAFE else "?" for c in text[:limit])


def clean(text, limit: int = 160) -> str:
    """Text from the child as one line: :func:`printable`, with newlines replaced too (and
    anything but a string made empty)."""
    text = text if isinstance(text, str) else ""
    return printable(text[:limit * 2].replace("\n", " "), limit)


_NOT_ALLOWED = re.compile(r"([\w.]+) is not allowed in exercise ")


def forbidden_reason(spec, name: str) -> str:
    """Why ``name`` scores zero in the exercise ``spec``: the reason of the longest forbidden
    prefix it falls under."""
    prefixes = [p for p in spec.forbid if name == p or name.startswith(p + ".")]
    if not prefixes:
        return f"calls {name}, which this exercise does not allow"
    prefix = max(prefixes, key=len)
    return spec.reasons.get(prefix, "calls {name}, which this exercise does not allow").format(name=name)


def rebuild_error(head: dict) -> Exception:
    """The learner's exception, as an instance of the nearest builtin type (so that
    ``expect_error(ValueError, ...)`` works), with its type name and place attached."""
    bases = head.get("bases") if isinstance(head.get("bases"), list) else []
    cls = LearnerError
    for name in bases:
        if isinstance(name, str) and name in _BUILTIN_ERRORS:
            cls = _BUILTIN_ERRORS[name]
            break
    message = clean(head.get("message"), 300)
    err = cls.__new__(cls)
    Exception.__init__(err, message)
    err.learner_type = clean(head.get("type"), 60) or cls.__name__
    err.learner_where = clean(head.get("where"), 80)
    return err


# ---- the learner's code, at a distance -----------------------------------------------------------

class Call:
    """A call of the learner's code, to be run later in the child (nested calls allowed:
    ``merge.later(split.later(x, 2))``)."""

    def __init__(self, target: dict, args, kwargs, no_grad: bool = False):
        self.target, self.args, self.kwargs, self.no_grad = target, tuple(args), dict(kwargs), no_grad

    def spec(self, blobs: list) -> dict:
        return {"target": self.target, "args": _encode(list(self.args), blobs),
                "kwargs": _encode(dict(self.kwargs), blobs), "no_grad": self.no_grad}


def _encode(value, blobs):
    import torch

    if isinstance(value, Call):
        return {"call": value.spec(blobs)}
    if isinstance(value, RemoteModule):
        return {"handle": value.handle}
    if isinstance(value, (list, tuple)) and any(isinstance(v, (Call, RemoteModule, list, tuple, dict))
                                                for v in value):
        return {"tuple" if isinstance(value, tuple) else "list": [_encode(v, blobs) for v in value]}
    if isinstance(value, dict) and any(isinstance(v, (Call, RemoteModule)) for v in value.values()):
        return {"dict": [[wire.encode(k, blobs, torch=torch), _encode(v, blobs)] for k, v in value.items()]}
    return wire.encode(value, blobs, torch=torch, limit=1 << 40)


class Remote:
    """The exercise's process, as the hidden test sees it; ``spec``: the exercise (its forbidden
    prefixes and their reasons)."""

    def __init__(self, child, spec):
        self.child, self.spec = child, spec

    def not_allowed(self, head: dict) -> str | None:
        """The reason to zero the exercise when the learner's code called something absent."""
        match = _NOT_ALLOWED.match(head.get("message") or "") if head.get("type") == "NotAllowed" else None
        return forbidden_reason(self.spec, clean(match.group(1), 120)) if match else None

    def _ask(self, header: dict, blobs=()):
        head, got = self.child.request(header, blobs)
        status = head["status"]
        if status == "ok":
            return head, got
        if status == "raised":
            reason = self.not_allowed(head)
            if reason:
                raise Disqualified(reason)
            raise rebuild_error(head)
        if status == "notdone":
            raise NotDone(f"raises NotImplementedError({clean(head.get('message'), 120)!r})")
        if status == "exit":
            raise Disqualified(f"called sys.exit({clean(head.get('message'), 40)}) (or exit()/quit()): "
                               "never exit from an exercise function")
        if status == "toolarge":
            raise Fail(f"the result is too large to send back (over {wire.MAX_MESSAGE >> 20} MiB, "
                       "or nested too deeply)")
        raise ChildGone("protocol error", f"zero: an answer with status {status!r} to a call")

    def _value(self, node, blobs):
        import torch

        try:
            return wire.decode(node, blobs, torch=torch, strict=True)
        except wire.ProtocolError as err:
            raise ChildGone("protocol error", f"zero: a malformed result ({err})") from None

    def import_module(self, module: str) -> str | None:
        """Import the learner's module in the child; None, or the import problem in words."""
        head, _ = self.child.request({"op": "import", "module": module})
        if head["status"] == "ok":
            return None
        if head["status"] != "import":
            raise ChildGone("protocol error", "zero: an unexpected answer to the import")
        inner = head.get("error") if isinstance(head.get("error"), dict) else {}
        kind = inner.get("status")
        if kind == "exit":
            return f"{module}.py calls sys.exit({clean(inner.get('message'), 40)}) when imported"
        if kind == "notdone":
            return f"importing {module}.py raised NotImplementedError"
        if kind == "raised":
            err = rebuild_error(inner)
            where = f" ({err.learner_where})" if err.learner_where else ""
            return f"importing {module}.py failed: {err.learner_type}: {str(err)[:160]}{where}"
        return clean(head.get("message"), 300) or f"importing {module}.py failed"

    def call(self, call: Call, keep: bool = False):
        blobs = []
        head, got = self._ask({"op": "call", "call": call.spec(blobs), "keep": keep}, blobs)
        if keep:
            handle = head.get("handle")
            if type(handle) is not int:
                raise ChildGone("protocol error", "zero: a malformed answer to a constructor")
            return handle, head.get("module") is True
        return self._value(head.get("value"), got)

    def steps(self, call: Call) -> int:
        blobs = []
        head, _ = self._ask({"op": "steps", "call": call.spec(blobs)}, blobs)
        steps = head.get("steps")
        if type(steps) is not int or steps < 0:
            raise ChildGone("protocol error", "zero: a malformed step count")
        return steps

    def memory(self, call: Call) -> int:
        blobs = []
        head, _ = self._ask({"op": "memory", "call": call.spec(blobs)}, blobs)
        peak = head.get("peak")
        if type(peak) is not int or peak < 0:
            raise ChildGone("protocol error", "zero: a malformed memory reading")
        return peak

    def grad(self, call: Call, wrt):
        blobs = []
        head, got = self._ask({"op": "grad", "call": call.spec(blobs), "wrt": list(wrt)}, blobs)
        value = self._value(head.get("value"), got)
        grads = self._value(head.get("grads"), got) if head.get("grads") is not None else None
        return value, grads

    def module(self, handle: int, action: str, **payload):
        blobs = []
        header = {"op": "module", "handle": handle, "action": action}
        for key, value in payload.items():
            header[key] = _encode(value, blobs)
        head, got = self._ask(header, blobs)
        return self._value(head["value"], got) if "value" in head else None


class RemoteFunction:
    """The learner's function ``name``: call it like the function; ``.later(...)`` makes a
    :class:`Call` for the loop and memory checks; ``.with_grad(...)`` runs a backward pass."""

    def __init__(self, remote: Remote, name: str):
        self.remote, self.__name__ = remote, name

    def later(self, *args, **kwargs) -> Call:
        return Call({"attr": self.__name__}, args, kwargs)

    def __call__(self, *args, **kwargs):
        return self.remote.call(self.later(*args, **kwargs))

    def with_grad(self, *args, wrt=(0,), **kwargs):
        """(output, gradients of output.sum() with respect to the arguments ``wrt``)."""
        return self.remote.grad(self.later(*args, **kwargs), wrt)


class RemoteClass:
    """The learner's ``nn.Module`` class ``name``: calling it builds one in the child."""

    def __init__(self, remote: Remote, name: str):
        self.remote, self.name = remote, name

    def __call__(self, *args, **kwargs) -> "RemoteModule":
        handle, is_module = self.remote.call(Call({"attr": self.name}, args, kwargs), keep=True)
        if not is_module:
            raise Fail(f"{self.name}(...) did not build an nn.Module")
        return RemoteModule(self.remote, handle)


class RemoteModule:
    """One of the learner's modules, living in the child. The methods the hidden tests use:
    forward (call it), ``state_dict``, ``to``, ``load_state_dict``, ``eval``, ``train``,
    ``layer_norm_eps`` and ``dead_parameters`` (the parameters no gradient reaches)."""

    def __init__(self, remote: Remote, handle: int):
        self.remote, self.handle = remote, handle

    def later(self, x) -> Call:
        return Call({"handle": self.handle, "method": None}, (x,), {}, no_grad=True)

    def __call__(self, x):
        return self.remote.call(self.later(x))

    def state_dict(self) -> dict:
        sd = self.remote.module(self.handle, "state_dict")
        if not isinstance(sd, dict) or not all(isinstance(k, str) for k in sd):
            raise Fail("state_dict() must return a mapping from names to tensors")
        return sd

    def to(self, dtype):
        self.remote.module(self.handle, "to", dtype=dtype)
        return self

    def load_state_dict(self, state: dict, strict: bool = True):
        assert strict
        self.remote.module(self.handle, "load_state_dict", state=state)

    def eval(self):
        self.remote.module(self.handle, "eval")
        return self

    def train(self):
        self.remote.module(self.handle, "train")
        return self

    def layer_norm_eps(self) -> list:
        eps = self.remote.module(self.handle, "layer_norm_eps")
        return eps if isinstance(eps, list) else []

    def dead_parameters(self, x) -> list[str]:
        """The parameters whose gradient is missing, not finite or zero after a backward pass
        of a weighted sum of forward(x) (in train mode)."""
        got = self.remote.module(self.handle, "param_grads", x=x)
        if not isinstance(got, list) or not all(isinstance(p, tuple) and len(p) == 2 for p in got):
            raise Fail("could not read the parameters' gradients")
        return [clean(name, 60) for name, dead in got if dead is not False]
