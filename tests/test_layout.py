"""The package's layout: its import layers, no cycles, a NumPy room without torch, no timm, and a
tree whose names say what things are (no issue numbers, no history).

The layers, lowest first; a module may import from its own layer and the layers below, never
from above.  ``vit_scratch/__init__.py`` is the facade on top (it may import anything, lazily).
"""
import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

import vit_scratch

PACKAGE = Path(vit_scratch.__file__).parent
ROOT = PACKAGE.parent

#: (layer, modules): a module is named by its path below ``vit_scratch`` ("numpy_nn" covers the
#: whole room).  A new module needs a line here.
LAYERS = (
    (0, ("validation", "checkpoint_checks", "extras", "schedule")),  # checks and messages;
    # extras; the lr curve
    (1, ("specs",)),  # configs, key/shape tables, the names each family registers
    (2, ("interface",)),  # the model interface both rooms answer
    (3, ("numpy_nn", "torch_nn")),  # the two rooms; neither imports the other
    (4, ("models",)),  # the factory's table: a name -> its family's classes
    (5, ("weight_files", "weights")),  # checkpoints (they know the families through the table)
    (6, ("data", "hub")),  # images, datasets, preprocessing; models with weights (timm's way)
    (7, ("plotting",)),  # figures from a model's interface
    (8, ("distributed", "run_folder")),  # torchrun; run folders
    (9, ("training", "train", "numpy_backend")),  # the trainer, its command, its NumPy backend
    (10, ("evaluate", "predict", "export")),  # the commands that use what the trainer saved
)


def _layer_key(module: str) -> str:
    """``vit_scratch.numpy_nn.attention`` -> ``numpy_nn``; ``vit_scratch.models`` -> ``models``."""
    return module.split(".")[1]


LAYER_OF = {name: layer for layer, names in LAYERS for name in names}


def _modules() -> dict[str, Path]:
    """Every module of the package but the facade: dotted name -> path."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if len(parts) > 1:  # not vit_scratch/__init__.py
            out[".".join(parts)] = path
    return out


MODULES = _modules()


def _imports(module: str, path: Path, top_level_only: bool = False) -> set[str]:
    """The modules ``module`` imports (absolute dotted names), at module level or anywhere."""
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module
            submodules = {f"{stem}.{a.name}" for a in node.names if f"{stem}.{a.name}" in MODULES}
            # ``from . import sibling`` imports the sibling; the package it names is the
            # importer's own parent, which Python has already started importing
            if not (submodules and module.startswith(stem + ".")):
                found.add(stem)
            found |= submodules
    return {m for m in found if m != "vit_scratch"}  # the facade itself is not a dependency


def _internal(imports: set[str]) -> set[str]:
    return {m for m in imports if m in MODULES}


def test_every_module_has_a_layer():
    unknown = sorted(m for m in MODULES if _layer_key(m) not in LAYER_OF)
    assert not unknown, f"give these modules a layer in tests/test_layout.py's LAYERS: {unknown}"


def test_no_module_imports_from_a_layer_above_it():
    for module, path in MODULES.items():
        own = LAYER_OF[_layer_key(module)]
        for dep in _internal(_imports(module, path)):
            assert LAYER_OF[_layer_key(dep)] <= own, (
                f"{module} (layer {own}) imports {dep} (layer {LAYER_OF[_layer_key(dep)]})")


def test_the_rooms_do_not_import_each_other():
    for module, path in MODULES.items():
        room = _layer_key(module)
        if room in ("numpy_nn", "torch_nn"):
            other = "torch_nn" if room == "numpy_nn" else "numpy_nn"
            assert not any(_layer_key(d) == other for d in _internal(_imports(module, path))), module


def test_there_is_no_import_cycle():
    graph = {m: _internal(_imports(m, p)) - {m} for m, p in MODULES.items()}
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(node, path):
        state[node] = 1
        for dep in graph[node]:
            if state.get(dep) == 1:
                cycle = path[path.index(dep):] + [dep]
                raise AssertionError(f"import cycle: {' -> '.join(cycle)}")
            if dep not in state:
                visit(dep, path + [dep])
        state[node] = 2

    for module in graph:
        if module not in state:
            visit(module, [module])


def test_the_numpy_room_and_what_it_stands_on_never_import_torch():
    """Statically: nothing the NumPy room imports at module level, directly or through the
    package, imports torch (the factory finds the PyTorch classes lazily)."""
    start = [m for m in MODULES if _layer_key(m) == "numpy_nn"]
    seen, todo = set(), list(start)
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        imports = _imports(module, MODULES[module], top_level_only=True)
        assert not any(i == "torch" or i.startswith("torch.") for i in imports), module
        todo += _internal(imports)
    assert {"vit_scratch.validation", "vit_scratch.interface"} <= seen


def test_no_module_of_the_library_is_over_500_lines():
    """One subject per file keeps each short enough to read whole."""
    lengths = {str(path.relative_to(ROOT)): len(path.read_text().splitlines())
               for path in PACKAGE.rglob("*.py")}
    assert not {k: n for k, n in lengths.items() if n > 500}


def test_no_module_of_the_library_imports_timm():
    for module, path in MODULES.items():
        assert not any(i == "timm" or i.startswith("timm.") for i in _imports(module, path)), module


def _run(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, cwd=ROOT).stdout.strip()


def test_import_leaves_timm_unimported():
    code = ("import sys, vit_scratch, vit_scratch.numpy_nn, vit_scratch.torch_nn, "
            "vit_scratch.data, vit_scratch.plotting; "
            "m = vit_scratch.create_model('vit_tiny_patch16_224', img_size=32); "
            "print('timm' in sys.modules)")
    assert _run(code) == "False"


def test_numpy_room_does_not_import_torch():
    # the NumPy room loaded on its own, without the package's __init__
    code = ("import sys, importlib.util, types; "
            f"sys.path.insert(0, {str(ROOT)!r}); "
            "pkg = types.ModuleType('vit_scratch'); pkg.__path__ = "
            f"[{str(PACKAGE)!r}]; sys.modules['vit_scratch'] = pkg; "
            "import vit_scratch.numpy_nn.vit; print('torch' in sys.modules)")
    assert _run(code) == "False"


@pytest.mark.parametrize("name,image,expected", [
    ("vit_tiny_patch16_224", "(1, 3, 32, 32)", "(1, 1000) False False"),
    ("cait_digits", "(1, 1, 24, 24)", "(1, 10) False False"),
    ("coat_lite_digits", "(1, 1, 8, 8)", "(1, 10) False False"),
])
def test_a_numpy_model_builds_and_runs_without_torch(name, image, expected):
    """A NumPy-only user pays for neither torch nor timm: the factory, the configs and the
    NumPy models import without them."""
    kwargs = "img_size=32, depth=1" if name.startswith("vit") else ""
    code = ("import sys, numpy as np, vit_scratch; "
            "from vit_scratch.models import lookup; "
            f"family, _ = lookup({name!r}); "
            f"cfg = vit_scratch.get_config({name!r}, {kwargs}); "
            "shapes = family.spec.MODELS.param_shapes(cfg); "
            "params = {k: np.zeros(s, np.float32) for k, s in shapes.items()}; "
            f"m = vit_scratch.create_numpy_model({name!r}, params, {kwargs}); "
            f"y = m(np.zeros({image}, np.float32)); "
            "print(y.shape, 'torch' in sys.modules, 'timm' in sys.modules)")
    assert _run(code) == expected


# --- names say what a thing is ----------------------------------------------------------------

#: What may not appear in a file's name or text: issue numbers and the history of the work.
HISTORY = re.compile(
    r"\bissues? ?#? ?\d+|issue\d+|added with|kept for (existing|old) imports|for existing imports"
    r"|before the families landed|the name this class had|mutation.?gaps?|nothing used to run",
    re.IGNORECASE)
TREE = ("vit_scratch", "tests", "exercises", "benchmarks", "notebooks", "README.md", "docs",
        "tools", ".ci", "pyproject.toml", "requirements.txt", "mkdocs.yml")
TEXT_SUFFIXES = {".py", ".md", ".ipynb", ".txt", ".toml", ".cfg", ".yml", ".yaml", ".json",
                 ".tex", ".rst", ""}


def _tree_files():
    for top in TREE:
        path = ROOT / top
        if path.is_file():
            yield path
        elif path.is_dir():
            yield from (p for p in sorted(path.rglob("*")) if p.is_file()
                        and "__pycache__" not in p.parts and ".ipynb_checkpoints" not in p.parts)


def test_no_issue_numbers_or_history_words_in_the_tree():
    found = []
    for path in _tree_files():
        rel = path.relative_to(ROOT)
        if HISTORY.search(str(rel)):
            found.append(f"{rel} (its name)")
        if path.suffix not in TEXT_SUFFIXES or path == Path(__file__):
            continue
        text = path.read_text(errors="replace")
        found += [f"{rel}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)!r}"
                  for m in HISTORY.finditer(text)]
    assert not found, "history words or issue numbers:\n" + "\n".join(found)


def test_the_scopes_handed_out_first_exist():
    """tests/conftest.py hands the longest files out first; a renamed file would silently fall
    back to xdist's order, so every name there is a file or a shared process's name."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("tests_conftest", ROOT / "tests" / "conftest.py")
    conftest = importlib.util.module_from_spec(spec)  # tests/conftest.py, not the root one
    spec.loader.exec_module(conftest)
    LONGEST_FIRST, SAME_PROCESS = conftest.LONGEST_FIRST, conftest.SAME_PROCESS

    for scope in LONGEST_FIRST:
        assert scope in SAME_PROCESS.values() or (ROOT / scope).is_file(), scope
