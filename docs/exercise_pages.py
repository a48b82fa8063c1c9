"""The course site's page for each exercise file: its docstrings as text, its stub as code.

    python docs/exercise_pages.py exercises/ex02_self_attention.py   # prints the page's Markdown

``docs/site_hooks.py`` makes one page per learner's file, ``exercises/exNN_<topic>.py`` (nothing
else of ``exercises/`` is read). The page is the module docstring, the imports, then one section
per exercise: the function's or class's docstring, then its code without the docstring (the
signature, the ``TODO`` line and the ``raise NotImplementedError`` the learner replaces).

Docstrings are plain text. They become Markdown by the layout they already have:

* a line ``name: text`` starts an item of a bullet list when ``name`` is a parameter, a known
  label (``returns``, ``Hint``, ``Not allowed``, ...), one of several labels whose texts start in
  one column, or follows a finished sentence; the lines indented under it, and for a lone item
  the lines that follow it, continue it;
* a paragraph of lines indented deeper than the docstring (a formula, a table of keys) is
  shown as it is, in a code block;
* ``* `` starts a bullet; anything else is a paragraph. ````code```` becomes code; a bare
  link becomes a link; every other character shows as written (``*``, ``_``, ``$`` and ``[``
  are written as entities, so neither Markdown nor the maths extension reads them).
"""
from __future__ import annotations

import ast
import inspect
import re
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STUBS = "exercises/ex[0-9][0-9]_*.py"  # the learners' files; solutions, hidden tests, grader: never

# "x:", "q/k/v_bias:", "dout, x:", "Not allowed:" -- a short label, then the text
FIELD = re.compile(r"^(?P<label>[A-Za-z`(][\w`()/,·' -]{0,30}?):(?P<gap> +)(?P<text>\S.*)$")
LABELS = {"returns", "Returns", "Raises", "Hint", "Hints", "Not allowed", "Rules", "forward"}
SENTENCE_END = (".", ":", ";", "?", "!", ")")
URL = re.compile(r"https?://[^\s<>()]+[^\s<>().,;:'\"]")
CODE = re.compile(r"``(.+?)``")
COMMAND = re.compile(r"^(python|pytest) \S.*$")
_ENTITIES = {ord(char): f"&#{ord(char)};" for char in "\\`*_[]$#|{}<>&"}


def stub_files(root: Path = ROOT) -> list[str]:
    """The learners' exercise files, relative to the repository, in path order."""
    return sorted(p.relative_to(root).as_posix() for p in root.glob(STUBS) if p.is_file())


def page_uri(stub: str) -> str:
    """``exercises/ex02_self_attention.py`` -> ``exercises/ex02_self_attention.md``."""
    return stub[: -len(".py")] + ".md"


# --- inline text --------------------------------------------------------------------------------

def _escape(text: str) -> str:
    """Plain text that Markdown and the maths extension leave as it is; bare links made links."""
    out, last = [], 0
    for match in URL.finditer(text):
        out += [text[last:match.start()].translate(_ENTITIES), f"<{match.group(0)}>"]
        last = match.end()
    return "".join(out) + text[last:].translate(_ENTITIES)


def _code_span(code: str) -> str:
    fence = "``" if "`" in code else "`"
    return f"{fence}{code}{fence}"


def inline(text: str) -> str:
    """Docstring text as Markdown: ````x```` and a command are code, the rest is text."""
    if COMMAND.match(text.strip()):
        return _code_span(text.strip())
    out, last = [], 0
    for match in CODE.finditer(text):
        out += [_escape(text[last:match.start()]), _code_span(match.group(1))]
        last = match.end()
    return "".join(out) + _escape(text[last:])


# --- blocks -------------------------------------------------------------------------------------

def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _fenced(lines: list[str], language: str = "text") -> str:
    return f"```{language}\n" + textwrap.dedent("\n".join(lines)) + "\n```"


def docstring_markdown(text: str, names: set[str] = frozenset()) -> str:
    """Docstring text (without its first paragraph) as Markdown; ``names``: the parameters."""
    blocks = re.split(r"\n[ \t]*\n", textwrap.dedent(text).strip("\n"))
    return "\n\n".join(filter(None, (_block(block.split("\n"), names) for block in blocks)))


def _block(lines: list[str], names: set[str]) -> str:
    lines = [line.rstrip() for line in lines if line.strip()]
    if not lines:
        return ""
    if all(_indent(line) > 0 for line in lines):  # a formula or a table: as it is
        return _fenced(lines)
    fields = {n: FIELD.match(line) for n, line in enumerate(lines) if _indent(line) == 0}
    column = {n: len(m.group("label")) + 1 + len(m.group("gap"))
              for n, m in fields.items() if m and ". " not in m.group("label")}
    aligned = {n for n in column if list(column.values()).count(column[n]) > 1}

    def starts_item(n: int) -> bool:
        if n not in column:
            return False
        label = fields[n].group("label")
        words = set(re.split(r"[\s,/]+", label.replace("`", "").strip()))
        return (label in LABELS or words <= names or n in aligned or n == 0
                or lines[n - 1].rstrip().endswith(SENTENCE_END))

    out: list[str] = []
    paragraph: list[str] = []
    items: list[list] = []  # the current bullet list: [label or None, its lines...] per item
    lone = False  # the last item is not one of an aligned group: lines at the margin go on

    def flush():
        if paragraph:
            out.append(inline(" ".join(paragraph)))
            paragraph.clear()
        if items:
            out.append("\n".join(
                f"* **{inline(label)}:** {inline(' '.join(text))}" if label is not None
                else f"* {inline(' '.join(text))}" for label, *text in items))
            items.clear()

    n = 0
    while n < len(lines):
        line = lines[n]
        if starts_item(n) or (_indent(line) == 0 and line.startswith("* ")):
            if paragraph:
                flush()
            field = fields[n]
            items.append([field.group("label"), field.group("text")] if field and n in column
                         else [None, line[2:]])
            lone = n not in aligned and field is not None
        elif _indent(line) > 0 and items:
            items[-1].append(line.strip())
        elif _indent(line) > 0:  # an indented run under a sentence: a code block
            run = [line]
            while n + 1 < len(lines) and _indent(lines[n + 1]) > 0:
                n += 1
                run.append(lines[n])
            flush()
            out.append(_fenced(run))
        elif items and lone:  # a lone "Hint: ..." goes on over several lines
            items[-1].append(line.strip())
        else:
            if items:
                flush()
            paragraph.append(line.strip())
        n += 1
    flush()
    return "\n\n".join(out)


# --- the page -----------------------------------------------------------------------------------

def _split(doc: str) -> tuple[str, str]:
    """A docstring's first paragraph, on one line, and the rest."""
    head, _, body = inspect.cleandoc(doc).partition("\n\n")
    return " ".join(head.split()), body


def _title(head: str) -> str:
    return inline(head.rstrip(".").replace(" -- ", " — "))


def _without_docstring(source: str, node: ast.AST) -> str:
    """The code of a function or class as it is in the file, its docstrings left out."""
    lines = source.split("\n")
    drop = set()
    for inner in ast.walk(node):
        if isinstance(inner, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)) \
                and ast.get_docstring(inner) is not None:
            doc = inner.body[0]
            drop |= set(range(doc.lineno - 1, doc.end_lineno))
    first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])]) - 1
    kept = [lines[n] for n in range(first, node.end_lineno) if n not in drop]
    return "\n".join(kept).strip("\n")


def _parameters(node: ast.AST) -> set[str]:
    """The names a function (or a class's ``__init__`` and ``forward``) takes."""
    functions = [node] if isinstance(node, ast.FunctionDef) else [
        f for f in node.body if isinstance(f, ast.FunctionDef)]
    return {arg.arg for f in functions for arg in f.args.args + f.args.kwonlyargs} - {"self"}


def nav_title(stub: str, root: Path = ROOT) -> str:
    """``02 · self-attention``: the notebook's number and the topic the docstring names."""
    head, _ = _split(ast.get_docstring(ast.parse((root / stub).read_text(encoding="utf-8"))))
    topic = head.rstrip(".").partition(" -- ")[2] or Path(stub).stem[5:]
    return f"{Path(stub).stem[2:4]} · {topic}"


def exercise_page(stub: str, root: Path = ROOT) -> str:
    """The Markdown of the page for ``stub`` (``exercises/ex02_self_attention.py``)."""
    path = root / stub
    source = path.read_text(encoding="utf-8")
    module = ast.parse(source)
    head, body = _split(ast.get_docstring(module) or "")
    notebook = sorted((root / "notebooks").glob(f"{path.stem[2:4]}_*.ipynb"))
    where = (f"Your copy is [`{stub}`]({path.name}){{: download=\"{path.name}\" }} in "
             "the repository")
    if notebook:
        where += f"; it follows [notebook {path.stem[2:4]}](../notebooks/{notebook[0].name})"
    parts = [f"# {_title(head)}", where + ".", docstring_markdown(body)]
    imports = [node for node in module.body if isinstance(node, (ast.Import, ast.ImportFrom))]
    if imports:  # as written, blank lines between the groups kept
        parts.append(_fenced(source.split("\n")[imports[0].lineno - 1:imports[-1].end_lineno],
                             "python"))
    for node in module.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            head, body = _split(ast.get_docstring(node) or node.name)
            parts += [f"## {_title(head)}", docstring_markdown(body, _parameters(node)),
                      _fenced([_without_docstring(source, node)], "python")]
    return "\n\n".join(filter(None, parts)) + "\n"


if __name__ == "__main__":
    for name in sys.argv[1:] or stub_files():
        print(exercise_page(name))
