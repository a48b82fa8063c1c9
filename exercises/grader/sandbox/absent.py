"""What stands in, inside the grader's sandbox, for what an exercise may not use.

The judge copies this file into every exercise's view of the library as ``_grader_absent.py``.
In that view, the body of each library function the exercise may not call is
``return __import__("_grader_absent").absent("vit_scratch.numpy_nn.layers.softmax")``, and
each package it may not use (``torch`` in a NumPy exercise, ``einops`` where the exercise is
the reshape) is a folder whose ``__init__.py`` calls :func:`stub_package`. The real code is
not in the sandbox at all: switching off a check inside the process gains nothing.

Calling what is absent raises :class:`NotAllowed`, naming the exercise; the judge turns it
into a zero for the exercise with the reason. While the learner's module is being imported
(``STRICT`` is still False) the attributes of an absent package are placeholders, so that a
file which also holds the PyTorch exercises still imports (``class Block(nn.Module)``, type
hints, ``@torch.no_grad()``); calling one once the module is imported raises.
"""
from __future__ import annotations

import os
import sys

STRICT = False


class NotAllowed(RuntimeError):
    """A call of something the exercise may not use."""


def _exercise() -> str:
    return os.environ.get("GRADER_EXERCISE", "this exercise")


def absent(name: str):
    raise NotAllowed(f"{name} is not allowed in exercise {_exercise()}")


class Placeholder:
    """An attribute of an absent package: attributes and calls give more placeholders while
    the learner's module is imported, and raise :class:`NotAllowed` afterwards."""

    def __init__(self, name: str):
        object.__setattr__(self, "_name", name)

    def __repr__(self):
        return f"<{self._name}: not allowed in exercise {_exercise()}>"

    def __getattr__(self, attr):
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        return Placeholder(f"{self._name}.{attr}")

    def __call__(self, *args, **kwargs):
        if STRICT:
            absent(self._name)
        return Placeholder(f"{self._name}(...)")

    def __mro_entries__(self, bases):
        return (_absent_class(self._name),)

    def __instancecheck__(self, obj):
        return False

    def __subclasscheck__(self, cls):
        return False

    def __getitem__(self, key):
        return self

    def __or__(self, other):
        return self

    __ror__ = __or__

    def __iter__(self):
        return iter(())

    def __bool__(self):
        return True


def _absent_class(name: str) -> type:
    def __init__(self, *args, **kwargs):
        if STRICT:
            absent(name)

    return type(name.rsplit(".", 1)[-1], (), {"__init__": __init__, "__module__": name.rpartition(".")[0]})


class _StubFinder:
    """Imports of ``package.anything`` for an absent package: more stub modules."""

    roots: set = set()

    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        if not any(fullname.startswith(root + ".") for root in cls.roots):
            return None
        from importlib.machinery import ModuleSpec

        return ModuleSpec(fullname, cls, is_package=True)

    @staticmethod
    def create_module(spec):
        return None

    @staticmethod
    def exec_module(module):
        stub_package(vars(module))


def stub_package(namespace: dict) -> None:
    """Make the module whose globals are ``namespace`` an absent package."""
    name = namespace["__name__"]
    namespace.setdefault("__path__", [])
    namespace["__getattr__"] = lambda attr: Placeholder(f"{name}.{attr}")
    _StubFinder.roots.add(name)
    if _StubFinder not in sys.meta_path:
        sys.meta_path.append(_StubFinder)
