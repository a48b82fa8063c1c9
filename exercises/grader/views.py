"""What an exercise's sandbox holds: the rule "no calls to the answer" kept by absence.

Each exercise names, in its hidden test, the prefixes it may not use (``forbid``: the whole
library ``vit_scratch``, ``torch`` in a NumPy exercise, ``einops``, ``scipy.special.softmax``
...) and the library functions it may (``allow``, e.g. 3.2's ``layers.linear``). From those
names alone :class:`Views` builds what the sandbox binds, so nothing here knows the library's
inner file list:

* **the library** -- a copy of the ``vit_scratch`` package in which the body of every function
  and method under a forbidden prefix is replaced by a call that raises "not allowed in
  exercise N.M" (:mod:`exercises.grader.sandbox.absent`). Kept whole: the allowed functions and
  the library functions they use (followed through the modules' imports), and the few the
  package itself calls while it is imported (found by importing it once, under a profiler:
  its registries and decorators);
* **a package** (``torch``, ``timm``, ``einops``, ``scipy.signal`` ...) -- a folder bound over
  the installed one, whose modules are placeholders: a file that also holds the PyTorch
  exercises still imports, and calling anything raises;
* **a function of a package** (``scipy.special.softmax``) -- its source file bound over by a copy
  with that function replaced.

The zygote that forks the exercise's process is chosen the same way: the first of the PyTorch
one (NumPy, PyTorch, einops, ``scipy.special`` in memory), the SciPy one (NumPy,
``scipy.special``) and the NumPy one whose memory holds nothing the exercise may not use. Switching a check off inside the process then gains nothing that copying the public
library by hand would not.
"""
from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import shutil
import sys
from pathlib import Path

LIBRARY_PACKAGE = "vit_scratch"
ABSENT_MODULE = "_grader_absent"
ABSENT_SOURCE = Path(__file__).resolve().parent / "sandbox" / "absent.py"
ZYGOTE_PRELOADS = {"torch": ("numpy", "torch", "einops", "scipy.special"), "scipy": ("numpy", "scipy.special"),
                   "numpy": ("numpy",)}


class ViewError(RuntimeError):
    """An exercise's names do not match the library or the installed packages (a grader bug)."""


def _matches(name: str, prefixes) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _overlaps(a: str, b: str) -> bool:
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


def zygote_kind(forbid, trusted: bool = False) -> str:
    """The first zygote (of :data:`ZYGOTE_PRELOADS`) that holds nothing ``forbid`` names in
    memory: 'torch', 'scipy' (NumPy and ``scipy.special``) or 'numpy'."""
    if trusted:
        return "torch"
    return next(kind for kind, preloads in ZYGOTE_PRELOADS.items()
                if not any(_overlaps(f, m) for f in forbid for m in preloads))


def replace_functions(source: str, name_of, tree: ast.AST | None = None) -> str | None:
    """``source`` with each function or method for which ``name_of(qualname)`` (the qualified
    name, as in ``co_qualname``) gives a name replaced by ``def f(*args, **kwargs): return
    absent(name)``, which raises; its decorators stay. None when nothing is replaced."""
    tree = ast.parse(source) if tree is None else tree
    spans = []

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, prefix + [child.name])
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                qual = ".".join(prefix + [child.name])
                name = name_of(qual)
                if name is None:
                    visit(child, prefix + [child.name, "<locals>"])
                else:
                    spans.append((child.lineno, child.end_lineno, child.col_offset, child.name, name))
            else:
                visit(child, prefix)

    visit(tree, [])
    if not spans:
        return None
    lines = source.splitlines(keepends=True)
    for first, last, col, fname, name in sorted(spans, reverse=True):
        pad = " " * col
        lines[first - 1:last] = [f"{pad}def {fname}(*args, **kwargs):\n",
                                 f"{pad}    return __import__({ABSENT_MODULE!r}).absent({name!r})\n"]
    return "".join(lines)


class _Library:
    """The library's modules, parsed once: their functions, classes and imports."""

    def __init__(self, package: Path):
        self.package = package
        self.files = {}
        for path in sorted(package.rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            rel = path.relative_to(package.parent).with_suffix("").parts
            name = ".".join(rel[:-1] if rel[-1] == "__init__" else rel)
            self.files[name] = (path, ast.parse(path.read_text()), rel[-1] == "__init__")
        self.index = {name: self._index(name) for name in self.files}

    def _index(self, module):
        _, tree, is_package = self.files[module]
        defs, classes, imports = {}, {}, {}
        base = module if is_package else module.rpartition(".")[0]
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                defs[node.name] = node
            elif isinstance(node, ast.ClassDef):
                classes[node.name] = node
            elif isinstance(node, ast.Import):
                for a in node.names:
                    imports[a.asname or a.name.split(".")[0]] = ("module", a.name if a.asname else a.name.split(".")[0])
            elif isinstance(node, ast.ImportFrom):
                parts = base.split(".")
                stem = ".".join(parts[:len(parts) - node.level + 1] if node.level else [])
                target = ".".join(p for p in (stem, node.module or "") if p) if node.level else node.module
                for a in node.names:
                    sub = f"{target}.{a.name}"
                    imports[a.asname or a.name] = ("module", sub) if sub in self.files else ("member", target, a.name)
        return defs, classes, imports

    def functions(self, module: str, name: str, depth: int = 0) -> list[tuple[str, str, ast.AST]]:
        """(module, qualname, node) of the function ``name`` of ``module``, or of every method of
        the class ``name`` (following imports)."""
        if module not in self.index or depth > 8:
            return []
        defs, classes, imports = self.index[module]
        if name in defs:
            return [(module, name, defs[name])]
        if name in classes:
            return [(module, qual, node) for qual, node in self._methods(classes[name], name)]
        hit = imports.get(name)
        if hit and hit[0] == "member":
            return self.functions(hit[1], hit[2], depth + 1)
        return []

    @staticmethod
    def _methods(cls, prefix):
        for node in cls.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield f"{prefix}.{node.name}", node
            elif isinstance(node, ast.ClassDef):
                yield from _Library._methods(node, f"{prefix}.{node.name}")

    def uses(self, module: str, node) -> list[tuple[str, str, ast.AST]]:
        """The library functions ``node`` names: in its module, imported, or ``module.function``."""
        _, _, imports = self.index[module]
        found = []
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name):
                found += self.functions(module, sub.id)
            elif isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name):
                hit = imports.get(sub.value.id)
                if hit and hit[0] == "module":
                    found += self.functions(hit[1], sub.attr)
        return found

    def closure(self, names) -> set[tuple[str, str]]:
        """(module, qualname) of the functions ``names`` (dotted: module.function) and of every
        library function they use, transitively. A name the library does not define: ViewError."""
        work = []
        for full in names:
            module, _, name = full.rpartition(".")
            found = self.functions(module, name)
            if not found:
                raise ViewError(f"{full} is not a function of the library (an exercise allows it)")
            work += found
        seen = set()
        while work:
            module, qual, node = work.pop()
            if (module, qual) in seen:
                continue
            seen.add((module, qual))
            work += self.uses(module, node)
        return seen


def import_time_functions(package: Path) -> set[tuple[str, str]]:
    """(module, qualname) of every library function that runs while the package's modules are
    imported (its registries, decorators, lazy attributes): they stay whole."""
    import pkgutil

    name = package.name
    saved = {k: v for k, v in sys.modules.items() if k == name or k.startswith(name + ".")}
    for k in saved:
        del sys.modules[k]
    prefix = str(package) + os.sep
    called = set()

    def profile(frame, event, arg):
        if event == "call" and frame.f_code.co_filename.startswith(prefix):
            rel = Path(frame.f_code.co_filename[len(prefix):]).with_suffix("").parts
            module = ".".join((name,) + (rel[:-1] if rel[-1] == "__init__" else rel))
            called.add((module, frame.f_code.co_qualname))

    sys.path.insert(0, str(package.parent))
    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        top = importlib.import_module(name)
        for info in pkgutil.walk_packages(top.__path__, name + "."):
            try:
                importlib.import_module(info.name)
            except Exception:                           # noqa: BLE001 - a module that needs an extra
                pass
    finally:
        sys.setprofile(previous)
        sys.path.remove(str(package.parent))
        for k in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
            del sys.modules[k]
        sys.modules.update(saved)
    return called


class Views:
    """The files each exercise's sandbox binds, built once per grading run in ``workdir``."""

    def __init__(self, workdir: Path, library: Path):
        self.workdir, self.library = Path(workdir), Path(library)
        self._library = None
        self._keep = None
        self._views, self._stubs, self._files, self._specs = {}, {}, {}, {}

    def for_spec(self, spec, trusted: bool = False) -> dict:
        """{"kind": the zygote, "library": the folder to bind at /grader/lib, "overlays":
        [(source, target)] over the interpreter's packages}."""
        key = (spec.id, spec.forbid, spec.allow, trusted)
        if key not in self._specs:
            self._specs[key] = self._build(spec, trusted)
        return self._specs[key]

    def _build(self, spec, trusted: bool) -> dict:
        lib_forbid = tuple(sorted(p for p in spec.forbid if _matches(p, [LIBRARY_PACKAGE])))
        lib_allow = tuple(sorted(p for p in spec.allow if _matches(p, [LIBRARY_PACKAGE])))
        overlays = []
        by_file = {}
        for prefix in spec.forbid:
            if _matches(prefix, [LIBRARY_PACKAGE]):
                continue
            where = self._locate(prefix)
            if where is None:
                continue                                # not installed: nothing to hide
            if where[0] == "package":
                overlays.append((self._stub(prefix), where[1]))
            elif where[0] == "module":
                overlays.append((self._stub(prefix) / "__init__.py", where[1]))
            else:
                by_file.setdefault(where[1], {})[where[2]] = prefix
        for path, names in sorted(by_file.items()):
            overlays.append((self._file_without(path, tuple(sorted(names.items()))), path))
        return {"kind": zygote_kind(spec.forbid, trusted), "library": self._view(lib_forbid, lib_allow),
                "overlays": overlays}

    # -- the library
    def _view(self, forbid, allow) -> Path:
        key = (forbid, allow)
        if key in self._views:
            return self._views[key]
        if self._library is None:
            self._library = _Library(self.library)
            self._keep = import_time_functions(self.library)
        keep = self._keep | self._library.closure(allow)
        dest = self.workdir / f"library{len(self._views)}"
        pkg_dest = dest / self.library.name
        for module, (path, tree, _) in self._library.files.items():
            target = pkg_dest / path.relative_to(self.library)
            target.parent.mkdir(parents=True, exist_ok=True)

            def name_of(qual, module=module):
                full = f"{module}.{qual}"
                return full if _matches(full, forbid) and not _matches(full, allow) and (module, qual) not in keep \
                    else None

            text = replace_functions(path.read_text(), name_of, tree) if forbid else None
            if text is None:
                shutil.copyfile(path, target)
            else:
                target.write_text(text)
        shutil.copyfile(ABSENT_SOURCE, dest / f"{ABSENT_MODULE}.py")
        self._views[key] = dest
        return dest

    # -- installed packages
    @staticmethod
    def _locate(prefix: str):
        """('package', folder) | ('module', file) | ('function', file, qualname) | None."""
        if importlib.util.find_spec(prefix.split(".")[0]) is None:
            return None
        try:
            spec = importlib.util.find_spec(prefix)
        except (ImportError, ValueError, AttributeError):
            spec = None
        if spec is not None:
            if spec.submodule_search_locations:
                return "package", list(spec.submodule_search_locations)[0]
            if spec.origin and os.path.isfile(spec.origin):
                return "module", spec.origin
        parent, _, attr = prefix.rpartition(".")
        obj = getattr(importlib.import_module(parent), attr, None)
        code = getattr(obj, "__code__", None)
        if code is None or not os.path.isfile(code.co_filename):
            raise ViewError(f"{prefix} cannot be made absent: it is not a function written in Python "
                            "(forbid its module instead)")
        return "function", code.co_filename, code.co_qualname

    def _stub(self, name: str) -> Path:
        if name not in self._stubs:
            folder = self.workdir / "stubs" / name
            folder.mkdir(parents=True)
            (folder / "__init__.py").write_text(
                f'"""{name}: not allowed in this exercise (the grader\'s sandbox)."""\n'
                f"__import__({ABSENT_MODULE!r}).stub_package(globals())\n")
            self._stubs[name] = folder
        return self._stubs[name]

    def _file_without(self, path: str, names: tuple) -> Path:
        """A copy of the installed file ``path`` without the functions ``names`` ((qualname, the
        name the exercise forbids), ...)."""
        key = (path, names)
        if key not in self._files:
            text = replace_functions(Path(path).read_text(), dict(names).get)
            dest = self.workdir / "files" / str(len(self._files)) / Path(path).name
            dest.parent.mkdir(parents=True)
            dest.write_text(text)
            os.utime(dest, (0, 0))                      # never the installed file's bytecode
            self._files[key] = dest
        return self._files[key]
