"""What the README, docs/*.md and the notebooks' markdown name -- links, files, commands -- and
whether it exists.

    python docs/doccheck.py        # prints every problem, exits 1 if there is one

A page names things in three ways, and each is checked against the working tree:

* links and images, ``[text](target#anchor)``, ``<img src="...">``: the target exists, relative
  to the page; an anchor into a Markdown page is one of its headings (or an explicit ``id``);
* file paths in inline code, ``exercises/ex02_self_attention.py``: checked when they start in a
  folder of the repository (``exercises/``, ``tests/``, ``numpy_nn/`` meaning
  ``vit_scratch/numpy_nn/``, ...); ``runs/x`` or ``my_pictures/`` are the reader's own folders;
* commands, in ``bash`` code blocks and in inline code that starts with a command
  (``python -m exercises.check 02``, ``pytest exercises``, ``python benchmarks/x.py``,
  ``pip install -e ".[course]"``): the module, script, test path, requirements file or extra
  exists. ``tests/test_docs_consistency.py`` also checks each ``--option`` against the command's
  own argument parser.

It also finds control characters (a TAB where ``\\top`` was meant breaks a formula).
``tests/test_docs_consistency.py`` runs all of it; ``docs/site_hooks.py`` uses the link finder to
know which files the course site must carry.
"""
from __future__ import annotations

import glob
import json
import re
import shlex
import sys
import tomllib
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# where a path in inline code may start: the repository's folders, and the library's sub-packages
# (notebooks say `numpy_nn/attention.py` for `vit_scratch/numpy_nn/attention.py`)
PACKAGE_FOLDERS = ("numpy_nn", "torch_nn", "specs")
COMMAND_WORDS = ("python", "python3", "pytest", "pip", "jupyter", "mkdocs", "torchrun")
SHELL_LANGUAGES = ("bash", "sh", "shell", "console")
# a path with a placeholder in it names a family of files, not one: `exercises/exNN_<topic>.py`
PLACEHOLDER = re.compile(r"NN|<[\w -]+>|\b(?:NAME|DIR|FILE|OUT_DIR)\b")


@dataclass
class Page:
    """A Markdown text to check: a .md file, or the markdown cells of a notebook."""

    path: Path
    text: str
    # for a notebook: (first line in `text`, cell index) of each cell, to name the cell in messages
    cells: list[tuple[int, int]] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.path.relative_to(ROOT).as_posix()

    def where(self, line: int) -> str:
        if not self.cells:
            return f"{self.name}:{line}"
        cell = max((c for c in self.cells if c[0] <= line), default=(1, 0))
        return f"{self.name} cell {cell[1]}"


def markdown_pages(root: Path = ROOT) -> list[Page]:
    """README.md, docs/*.md and every notebook's markdown cells."""
    pages = [Page(p, p.read_text(encoding="utf-8"))
             for p in [root / "README.md", *sorted((root / "docs").glob("*.md"))] if p.exists()]
    for path in sorted((root / "notebooks").glob("*.ipynb")):
        pages.append(notebook_page(path))
    return pages


def notebook_page(path: Path) -> Page:
    text, cells = "", []
    for index, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"]):
        if cell["cell_type"] != "markdown":
            continue
        source = "".join(cell["source"])
        cells.append((text.count("\n") + 1, index))
        text += source + "\n\n"
    return Page(path, text, cells)


# --- reading Markdown -----------------------------------------------------------------------

FENCE = re.compile(r"^[ \t]*(```+|~~~+)[ \t]*([\w+-]*)[^\n]*\n(.*?)^[ \t]*\1[ \t]*$",
                   re.M | re.S)


def code_blocks(text: str) -> list[tuple[str, str, int]]:
    """(language, code, first line) of every fenced block."""
    return [(m.group(2).lower(), m.group(3), text.count("\n", 0, m.start()) + 2)
            for m in FENCE.finditer(text)]


def prose(text: str) -> str:
    """The text without its fenced blocks and HTML comments (line numbers kept)."""
    blank = lambda m: re.sub(r"[^\n]", " ", m.group(0))  # noqa: E731
    return re.sub(r"<!--.*?-->", blank, FENCE.sub(blank, text), flags=re.S)


def inline_code(text: str) -> list[tuple[str, int]]:
    """(code, line) of every inline code span of the prose; a span may wrap onto the next line."""
    body = prose(text)
    return [(" ".join(m.group(2).split()), body.count("\n", 0, m.start()) + 1)
            for m in re.finditer(r"(`+)(?!`)(.+?)(?<!`)\1(?!`)", body, flags=re.S)
            if "\n\n" not in m.group(2)]


LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HTML_LINK = re.compile(r"<(?:a|img)\b[^>]*?\b(?:href|src)\s*=\s*[\"']([^\"']+)[\"']", re.I)


def links(text: str) -> list[tuple[str, int]]:
    """(target, line) of every Markdown link or image and every HTML href/src in the prose."""
    body = re.sub(r"`[^`\n]*`", lambda m: " " * len(m.group(0)), prose(text))
    found = [(m.group(1), body.count("\n", 0, m.start()) + 1)
             for pattern in (LINK, HTML_LINK) for m in pattern.finditer(body)]
    return sorted(found, key=lambda item: item[1])


def is_external(target: str) -> bool:
    return bool(re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I)) or target.startswith("//")


def local_links(page: Page) -> list[tuple[Path, str, int]]:
    """(file, anchor, line) of every link of the page into the repository."""
    found = []
    for target, line in links(page.text):
        if is_external(target):
            continue
        path, _, anchor = target.partition("#")
        found.append((page.path if not path else (page.path.parent / path).resolve(), anchor,
                      line))
    return found


def slug(heading: str) -> str:
    """A heading's anchor, as GitHub and MkDocs both make it for plain headings."""
    text = re.sub(r"<[^>]+>|[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    return re.sub(r"[\s]+", "-", re.sub(r"[^\w\s-]", "", text)).strip("-")


def anchors(path: Path) -> set[str]:
    """The anchors a Markdown page or a notebook offers: its headings and explicit ids."""
    text = (notebook_page(path) if path.suffix == ".ipynb"
            else Page(path, path.read_text(encoding="utf-8"))).text
    body = prose(text)
    found = {slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*\s*$", body, re.M)}
    found |= set(re.findall(r"""\bid=["']([^"']+)["']""", body))
    found |= set(re.findall(r"\{#([\w-]+)\}", body))
    return found


# --- commands -------------------------------------------------------------------------------

@dataclass
class Command:
    argv: list[str]
    line: int
    text: str


def _split(line: str) -> list[str]:
    try:
        argv = shlex.split(line, comments=True)
    except ValueError:  # an unbalanced quote: not a command line
        return []
    while argv and re.match(r"^[A-Z_][A-Z0-9_]*=", argv[0]):  # OMP_NUM_THREADS=1 python ...
        argv = argv[1:]
    return argv


def commands(text: str) -> list[Command]:
    """The commands of the page's shell blocks and of inline code that starts with a command."""
    found = []
    for language, code, first in code_blocks(text):
        if language and language not in SHELL_LANGUAGES:
            continue
        joined = re.sub(r"\\\n", lambda m: " " * 2, code)  # continuations, lines kept
        for offset, line in enumerate(joined.split("\n")):
            line = line.strip().removeprefix("$ ")
            argv = _split(line)
            # an untagged block may hold a command, or a layout sketch, or output
            if argv and (language or argv[0] in COMMAND_WORDS):
                found.append(Command(argv, first + offset, line))
    for code, line in inline_code(text):
        argv = _split(code)
        if argv and argv[0] in COMMAND_WORDS:
            found.append(Command(argv, line, code))
    return found


def command_target(argv: list[str]) -> tuple[str, str] | None:
    """("module", name) or ("script", path) that a ``python`` command runs, if it is ours."""
    if argv[0] not in ("python", "python3") or len(argv) < 2:
        return None
    if argv[1] == "-m" and len(argv) > 2:
        return ("module", argv[2])
    if not argv[1].startswith("-"):
        return ("script", argv[1])
    return None


def local_module(name: str, root: Path = ROOT) -> Path | None:
    """The file of module ``name`` if its top package is a folder of the repository."""
    base = root.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__main__.py"):
        if candidate.is_file():
            return candidate
    return None


def _is_local_package(name: str, root: Path) -> bool:
    top = root / name.split(".")[0]
    return top.is_dir() and (top / "__init__.py").is_file()


def exists(pattern: str, base: Path) -> bool:
    """A path or a glob pattern (``notebooks/0*.ipynb``) names something under ``base``."""
    pattern = pattern.split("::")[0]
    if any(ch in pattern for ch in "*?["):
        return bool(glob.glob(str(base / pattern)))
    return (base / pattern).exists()


def extras(root: Path = ROOT) -> set[str]:
    project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return set(project.get("optional-dependencies", {}))


def command_problems(command: Command, page: Page, root: Path = ROOT) -> list[str]:
    argv, where = command.argv, page.where(command.line)
    problems = []
    say = lambda what: problems.append(f"{where}: `{command.text}`: {what}")  # noqa: E731
    target = command_target(argv)
    if target and target[0] == "module":
        if _is_local_package(target[1], root) and not local_module(target[1], root):
            say(f"no module {target[1]} in the repository")
    elif target and target[0] == "script" and not exists(target[1], root):
        say(f"no file {target[1]}")
    paths: list[str] = []
    if argv[0] == "pytest" or argv[:3] in (["python", "-m", "pytest"], ["python3", "-m", "pytest"]):
        rest = argv[1:] if argv[0] == "pytest" else argv[3:]
        takes_value = {"-k", "-m", "-p", "-o", "-c", "--deselect", "--ignore", "--durations",
                       "--rootdir", "--basetemp", "-n"}
        skip = False
        for token in rest:
            if skip:
                skip = False
            elif token in takes_value:
                skip = True
            elif not token.startswith("-"):
                paths.append(token)
    elif argv[0] in ("jupyter",) and len(argv) > 2:
        paths += [t for t in argv[2:] if not t.startswith("-") and ("/" in t or "." in t)]
    elif argv[0] == "pip" or argv[:3] == ["python", "-m", "pip"]:
        rest = argv[1:] if argv[0] == "pip" else argv[3:]
        for i, token in enumerate(rest):
            if token in ("-r", "--requirement", "-c") and i + 1 < len(rest):
                paths.append(rest[i + 1])
            spec = re.match(r"^\.(?:\[([\w,-]+)\])?$", token)
            if spec and spec.group(1):
                for extra in spec.group(1).split(","):
                    if extra not in extras(root):
                        say(f"pyproject.toml declares no extra [{extra}]")
    elif argv[0] == "mkdocs":
        for i, token in enumerate(argv):
            if token in ("-f", "--config-file") and i + 1 < len(argv):
                paths.append(argv[i + 1])
    for path in paths:
        if not PLACEHOLDER.search(path) and not exists(path, root):
            say(f"no file or folder {path}")
    return problems


# --- everything -----------------------------------------------------------------------------

def path_problems(code: str, line: int, page: Page, root: Path = ROOT) -> list[str]:
    """A file path written as inline code, if it starts in a folder of the repository."""
    if (not re.fullmatch(r"(\.\.?/)*[\w.-]+(/[\w.*?-]*)+(::\w+)?", code)
            or code.startswith("...") or PLACEHOLDER.search(code)):
        return []
    if code.startswith(("./", "../")):
        base = page.path.parent
    else:
        first = code.split("/")[0]
        if first in PACKAGE_FOLDERS:
            base = root / "vit_scratch"
        elif (root / first).is_dir() and not first.startswith("."):
            base = root
        else:
            return []  # the reader's own folders: runs/, my_pictures/, path/to/...
    if exists(code, base):
        return []
    return [f"{page.where(line)}: `{code}`: no such file or folder"]


def link_problems(page: Page) -> list[str]:
    problems = []
    for path, anchor, line in local_links(page):
        shown = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)
        if not path.exists():
            problems.append(f"{page.where(line)}: link to {shown}: no such file")
        elif anchor and path.suffix in (".md", ".ipynb") and anchor not in anchors(path):
            problems.append(f"{page.where(line)}: link to {shown}#{anchor}: no such heading")
    return problems


def control_problems(page: Page) -> list[str]:
    problems = []
    for number, line in enumerate(page.text.split("\n"), start=1):
        for char in line:
            if unicodedata.category(char) == "Cc" or char in "\u2028\u2029\ufeff":
                problems.append(f"{page.where(number)}: control character {char!r} in "
                                f"{line.strip()[:60]!r}")
                break
    return problems


def page_problems(page: Page, root: Path = ROOT) -> list[str]:
    problems = link_problems(page) + control_problems(page)
    for code, line in inline_code(page.text):
        problems += path_problems(code, line, page, root)
    for command in commands(page.text):
        problems += command_problems(command, page, root)
    return problems


def all_problems(root: Path = ROOT) -> list[str]:
    return [problem for page in markdown_pages(root) for problem in page_problems(page, root)]


if __name__ == "__main__":
    found = all_problems()
    print("\n".join(found) or "no problems")
    sys.exit(1 if found else 0)
