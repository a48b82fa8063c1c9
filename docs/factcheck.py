"""The facts a page states, checked against where they come from: measured numbers, section
pointers and signatures.

    python docs/factcheck.py        # prints every problem, exits 1 if there is one

The pages: README.md, docs/*.md, the notebooks' markdown and the exercises' docstrings
(``exercises/exNN_*.py``).  ``tests/test_docs_consistency.py`` runs all of it.

**Numbers from one source.**  A *measured* number -- an accuracy, a time, a ratio, a size, a
count of parameters or packages, a difference in points -- is recognised by its unit (``%``,
``×``, ``s``, ``ms``, ``min``, ``MB``, ``GB``, ``parameters``, ``packages``, ``steps``,
``points``; a
range ``98.50-99.00%`` or ``99.0 ± 0.5%`` gives both numbers the unit).  Each must come from
a source, at the precision it is shown:

* in a notebook's markdown: a number that one of the notebook's own cells prints (its committed
  outputs, ``display(Markdown(...))`` included);
* in an exercise's docstring: a number that its notebook prints;
* anywhere, a ``<!-- source: FILE[, FILE...] -->`` comment in the paragraph, or on the line
  just above it, names where its numbers come from: a results file
  (``benchmarks/results/*.json``, written by a script: a fraction 0.986 shows as ``98.6%``, a
  ``*seconds*`` field 47.2 as ``47 s``), a notebook (its printed outputs), or a test that
  checks those numbers itself (``tests/test_x.py::test_name``);
* ``<!-- not measured: 20%, 10% -->`` in the paragraph says that these numbers, as written,
  are settings, definitions or arithmetic (a split's share, a learning rate, 64/576), not
  measurements.  Each listed number must be in the paragraph.

Not counted: numbers in code (inline or fenced), in maths (``$...$``), in HTML comments, in
tables printed from a results file (``<!-- table: ... -->``, checked by their own test),
dimensions (``14 × 14``), and bounds (``under 60 s``, ``above 90%``, ``at most``, ``≤``,
``within``), which are requirements rather than measurements.

A number *matches* a source's number when the source's number, rounded to the decimals shown,
equals it (a whole number with trailing zeros, ``70 s``, may be rounded to its last non-zero
digit: 67.5 s shows as ``70 s``); a percentage matches a printed percentage or a fraction times
100; a time in minutes matches seconds / 60.

**Section pointers.**  ``Notebook 03, section 11 ("Attention rollout")``, ``notebook 08
(section 2)``, or ``section 4`` in a notebook (its own) or in an exercise file (its notebook):
the notebook must have a heading numbered so (``## 11. Attention maps``), and a title given in
quotes or parentheses must be that heading's or one of its sub-headings'.

**Signatures.**  An exercise stub has the parameters of its solution, and those of the
library's function of the same name first, in order; a function a notebook defines under a
library function's name takes the library's parameters first, in order; and a call written in
a page's inline code, ``name(a, b, key=...)``, uses only keywords that ``name`` takes.
"""
from __future__ import annotations

import ast
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
import doccheck  # noqa: E402  (docs/doccheck.py: the pages and how to read their Markdown)

sys.path.insert(0, str(ROOT / "benchmarks"))
import tables  # noqa: E402  (benchmarks/tables.py: what kind of results file a file is)

# --- numbers --------------------------------------------------------------------------------------

NUMBER = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"
UNITS = {
    "percent": r"%",
    "ratio": r"×(?!\s?\d)|x(?=\s|[,.;:)]|$)(?!\s?\d)",
    "time": r"(?:CPU\s)?(?:ms|µs|s|sec|seconds?|min|minutes?|hours?)(?![\w-])",
    "size": r"(?:KB|kB|MB|GB|MiB|GiB)\b",
    "count": r"(?:parameters|packages|steps)\b",
    "points": r"(?:percentage\s)?points?\b",
}
UNIT = "|".join(f"(?P<{kind}>{pattern})" for kind, pattern in UNITS.items())
QUANTITY = re.compile(
    rf"(?<![\w.,/-])(?P<first>{NUMBER})(?:\s?(?:±|-|–|to|and)\s?(?P<second>{NUMBER}))?\s?(?:{UNIT})")
DIMENSION = re.compile(rf"(?:{NUMBER})\s?[×x]\s?(?:{NUMBER})(?:\s?[×x]\s?(?:{NUMBER}))*")
BOUND = re.compile(r"(?:under|below|at most|no more than|within|above|at least|≤|<=|<|≥|>=|>)\s*"
                   r"(?:about\s)?$", re.I)
DIRECTIVE = re.compile(r"<!--\s*(source|not measured)\s*:\s*(.*?)\s*-->", re.S)
TABLE_MARK = re.compile(r"<!-- table: .*? -->\n((?:\|.*\n?)+)")  # tables.py's, checked by a test


@dataclass
class Quantity:
    text: str  # as written, e.g. "98.6%"
    value: float
    decimals: int
    kind: str  # percent, ratio, time, size, count, points
    unit: str  # the unit as written ("%", "s", "min", "MB", ...)
    line: int


@dataclass
class Block:
    """A paragraph (or table, or list) of a page: its lines and the directives in it."""

    start: int
    end: int
    sources: list[str] = field(default_factory=list)
    not_measured: list[str] = field(default_factory=list)


def _blank(match) -> str:
    return re.sub(r"[^\n]", " ", match.group(0))


def countable_text(text: str) -> str:
    """The prose in which numbers count: code, maths, HTML comments, link targets and the
    tables printed from results files blanked out (line numbers kept)."""
    body = TABLE_MARK.sub(_blank, text)
    body = doccheck.prose(body)  # fenced blocks and HTML comments
    body = re.sub(r"\$\$.*?\$\$|\$[^$\n]+\$", _blank, body, flags=re.S)
    body = re.sub(r"(`+)(?!`).+?(?<!`)\1(?!`)", _blank, body, flags=re.S)
    body = re.sub(r"\]\([^)]*\)|<https?://[^>]*>|https?://\S+", _blank, body)
    body = re.sub(r"</?[a-zA-Z][^>]*>", _blank, body)  # HTML tags: width="46%" is no measurement
    return body


def quantities(text: str) -> list[Quantity]:
    """Every measured-looking number of the text's prose, with its unit."""
    body = countable_text(text)
    body = DIMENSION.sub(_blank, body)
    found = []
    for m in QUANTITY.finditer(body):
        if BOUND.search(body[max(0, m.start() - 20):m.start()]):
            continue
        kind = next(k for k in UNITS if m.group(k) is not None)
        unit = " ".join(m.group(kind).split())
        line = body.count("\n", 0, m.start()) + 1
        for key in ("first", "second"):
            number = m.group(key)
            if number is None:
                continue
            plain = number.replace(",", "")
            decimals = len(plain.split(".")[1]) if "." in plain else 0
            shown = f"{number}{'' if kind in ('percent', 'ratio') else ' '}{unit}"
            found.append(Quantity(shown, float(plain), decimals, kind, unit, line))
    return found


def _without_code(text: str) -> str:
    """The text with its fenced blocks and inline code blanked (comments kept)."""
    body = doccheck.FENCE.sub(_blank, text)
    return re.sub(r"(`+)(?!`).+?(?<!`)\1(?!`)", _blank, body, flags=re.S)


def blocks(text: str) -> list[Block]:
    """The page's paragraphs (runs of non-blank lines), each with its directives."""
    lines = text.split("\n")
    found, start = [], None
    for number, line in enumerate(lines + [""], start=1):
        if line.strip() and start is None:
            start = number
        elif not line.strip() and start is not None:
            found.append(Block(start, number - 1))
            start = None
    for m in DIRECTIVE.finditer(_without_code(text)):
        line = text.count("\n", 0, m.start()) + 1
        block = next((b for b in found if b.start <= line <= b.end), None)
        if block is None:
            continue
        items = [i.strip() for i in m.group(2).split(",") if i.strip()]
        (block.sources if m.group(1) == "source" else block.not_measured).extend(items)
    return found


# --- what a source holds -------------------------------------------------------------------------

@dataclass
class Printed:
    """A number a source holds, with what it measures: ``kind`` is a unit kind of UNITS, or
    ``None`` when the source does not say."""

    value: float
    kind: str | None
    unit: str = ""


PRINTED = re.compile(rf"(?<![\w.])(-?(?:{NUMBER}))(?:\s?(?:{UNIT}))?")


def printed_numbers(text: str) -> list[Printed]:
    out = []
    for m in PRINTED.finditer(text):
        kind = next((k for k in UNITS if m.group(k) is not None), None)
        unit = " ".join(m.group(kind).split()) if kind else ""
        out.append(Printed(float(m.group(1).replace(",", "")), kind, unit))
    return out


def notebook_outputs(path: Path) -> str:
    """Everything the notebook's cells print: streams, text and Markdown displays."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    parts = []
    for cell in cells:
        for output in cell.get("outputs", []):
            if "text" in output:
                parts.append("".join(output["text"]))
            data = output.get("data", {})
            for mime in ("text/markdown", "text/plain"):
                if mime in data and "image/png" not in data:
                    parts.append("".join(data[mime]))
    return "\n".join(parts)


def json_numbers(path: Path) -> list[Printed]:
    """The numbers of a results file, each with the kind its key suggests."""
    return _leaves(json.loads(path.read_text(encoding="utf-8")))


def _leaves(data, top: str = "") -> list[Printed]:
    found = []

    def walk(node, key=""):
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, str(k) if isinstance(k, str) and not k.isdigit() else key)
        elif isinstance(node, list):
            for v in node:
                walk(v, key)
        elif isinstance(node, (int, float)) and not isinstance(node, bool):
            name = key.lower()
            kind = ("time" if re.search(r"second|_s$|time|_ms$|^ms", name) else
                    "size" if re.search(r"mb$|gb$|bytes|_mb|_gb", name) else None)
            unit = "ms" if re.search(r"_ms$|^ms", name) else "MB" if "mb" in name else \
                "GB" if "gb" in name else "s" if kind == "time" else ""
            found.append(Printed(float(node), kind, unit))
        elif isinstance(node, str):
            found.extend(printed_numbers(node))

    walk(data, top)
    return found


_NOTEBOOK_CACHE: dict[Path, list[Printed]] = {}


def source_numbers(source: Path) -> list[Printed]:
    if source.suffix == ".safetensors":  # a checkpoint: what its metadata records
        from safetensors import safe_open

        with safe_open(str(source), "np") as f:
            metadata = f.metadata() or {}
        found = []
        for key, value in metadata.items():
            try:
                found += _leaves(json.loads(value), key)
            except ValueError:
                found += printed_numbers(value)
        return found
    if source.suffix == ".ipynb":
        if source not in _NOTEBOOK_CACHE:
            _NOTEBOOK_CACHE[source] = printed_numbers(notebook_outputs(source))
        return _NOTEBOOK_CACHE[source]
    return json_numbers(source)


def _rounds_to(value: float, quantity: Quantity) -> bool:
    if round(value, quantity.decimals) == quantity.value:
        return True
    if quantity.decimals == 0 and quantity.value:  # 70 may be 67.5 rounded to tens
        zeros = len(str(int(quantity.value))) - len(str(int(quantity.value)).rstrip("0"))
        return zeros > 0 and round(value, -zeros) == quantity.value
    return False


TO_SECONDS = {"ms": 1e-3, "µs": 1e-6, "s": 1.0, "sec": 1.0, "second": 1.0, "seconds": 1.0,
              "min": 60.0, "minute": 60.0, "minutes": 60.0, "hour": 3600.0, "hours": 3600.0}


def _seconds(unit: str) -> float:
    return TO_SECONDS.get(unit.split()[-1], 1.0)


def matches(quantity: Quantity, candidate: Printed) -> bool:
    """Whether ``candidate`` (a number a source holds) is ``quantity`` as shown."""
    v, kind = candidate.value, candidate.kind
    if quantity.kind == "percent":
        return ((kind == "percent" and _rounds_to(v, quantity))
                or (kind is None and 0 <= abs(v) <= 1 and _rounds_to(100 * v, quantity)))
    if quantity.kind == "points":
        return (kind in (None, "points", "percent") and _rounds_to(v, quantity)) or (
            kind is None and abs(v) <= 1 and _rounds_to(abs(100 * v), quantity))
    if quantity.kind == "time":
        if kind != "time":
            return False
        return _rounds_to(v * _seconds(candidate.unit) / _seconds(quantity.unit), quantity)
    if quantity.kind == "size":  # MB and GB of 10⁶ and 10⁹ bytes, as the scripts write them
        if kind not in ("size", None):
            return False
        if candidate.unit in ("", quantity.unit) or not candidate.unit[:1] in "GMK":
            return _rounds_to(v, quantity)
        steps = "GMK".index(quantity.unit[0]) - "GMK".index(candidate.unit[0])
        return _rounds_to(v * 1000.0 ** steps, quantity)
    return kind in (None, quantity.kind) and _rounds_to(v, quantity)  # ratio, count


# --- the pages ------------------------------------------------------------------------------------

def exercise_pages(root: Path = ROOT) -> list[doccheck.Page]:
    """Each exercise file's docstrings, as a page (lines as in the file)."""
    pages = []
    for path in sorted((root / "exercises").glob("ex[0-9][0-9]_*.py")):
        source = path.read_text(encoding="utf-8")
        lines = [""] * (source.count("\n") + 1)
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
                body = node.body
                if body and isinstance(body[0], ast.Expr) and isinstance(
                        getattr(body[0], "value", None), ast.Constant) and isinstance(
                        body[0].value.value, str):
                    first = body[0].lineno
                    for offset, text in enumerate(
                            source.split("\n")[first - 1:body[0].end_lineno]):
                        lines[first - 1 + offset] = text
        pages.append(doccheck.Page(path, "\n".join(lines)))
    return pages


def notebook_of(page: doccheck.Page) -> Path | None:
    """The notebook a page's bare "section N" and unsourced numbers refer to: a notebook itself,
    or an exercise file's notebook (``ex03_*`` -> ``03_*``)."""
    if page.path.suffix == ".ipynb":
        return page.path
    m = re.match(r"ex(\d\d)_", page.path.name)
    if m:
        return next(iter(sorted((page.path.parents[1] / "notebooks").glob(f"{m.group(1)}_*.ipynb"))),
                    None)
    return None


def number_problems(page: doccheck.Page, root: Path = ROOT) -> list[str]:
    problems = []
    own = notebook_of(page)
    page_blocks = blocks(page.text)
    for block in page_blocks:
        for source in block.sources:
            path = root / source.split("::")[0]
            if not path.is_file():
                problems.append(f"{page.where(block.start)}: source {source}: no such file")
            elif "::" in source and not re.search(
                    rf"^def {re.escape(source.split('::')[1])}\(",
                    path.read_text(encoding="utf-8"), re.M):
                problems.append(f"{page.where(block.start)}: source {source}: no such test")
    for quantity in quantities(page.text):
        block = next((b for b in page_blocks if b.start <= quantity.line <= b.end), None)
        if block is not None and quantity.text.replace(" ", "") in {
                t.replace(" ", "") for t in block.not_measured}:
            continue
        sources = [root / s for s in (block.sources if block else []) if "::" not in s]
        if block is not None and any("::" in s for s in block.sources):
            continue  # a test checks this paragraph's numbers
        if own is not None:
            sources.append(own)
        if any(matches(quantity, c) for s in sources if s.is_file()
               for c in source_numbers(s)):
            continue
        where = ", ".join(str(s.relative_to(root)) for s in sources) or "no source named"
        problems.append(
            f"{page.where(quantity.line)}: {quantity.text!r} is not printed by its source "
            f"({where}); print it from a cell, or name the results file it comes from in "
            f"<!-- source: FILE --> (see docs/maintainers.md, 'Numbers from one source')")
    for block in page_blocks:  # stale exemptions
        shown = {q.text.replace(" ", "") for q in quantities(page.text)
                 if block.start <= q.line <= block.end}
        for item in block.not_measured:
            if item.replace(" ", "") not in shown:
                problems.append(f"{page.where(block.start)}: <!-- not measured: {item} --> "
                                f"names a number the paragraph does not show")
    return problems


def directive_problems(page: doccheck.Page) -> list[str]:
    """A ``<!-- source: -->`` or ``<!-- not measured: -->`` comment that stands alone (blank
    lines around it) governs nothing."""
    problems = []
    lines = page.text.split("\n")
    page_blocks = blocks(page.text)
    for m in DIRECTIVE.finditer(_without_code(page.text)):
        line = page.text.count("\n", 0, m.start()) + 1
        block = next((b for b in page_blocks if b.start <= line <= b.end), None)
        rest = "" if block is None else re.sub(
            r"<!--.*?-->", "", "\n".join(lines[block.start - 1:block.end]), flags=re.S)
        if not rest.strip():
            problems.append(f"{page.where(line)}: <!-- {m.group(1)}: ... --> governs no paragraph: "
                            f"put it in the paragraph, or on the line just above it")
    return problems


# --- section pointers -----------------------------------------------------------------------------

NUMBERED_HEADING = re.compile(r"^(#{1,6})\s+(\d+)\s*[.·:)]\s*(.+?)\s*#*\s*$")
ANY_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
POINTER = re.compile(
    r"(?:[Nn]otebook (?P<nb>\d\d)(?:,|'s)?\s+(?:\(\s*)?|(?<![\w-]))"
    r"(?:section|§)\s?(?P<section>\d+)"
    r"(?:\s*(?:,\s*|\(\s*)?[\"“](?P<title>[^\"”]+)[\"”]\)?|\s+\((?P<bare>[A-Z][^()]*?)\))?")


def _plain(title: str) -> str:
    return " ".join(re.sub(r"[`*_\"“”'’:,.!?()]", "", title).lower().replace("-", " ").split())


def sections(notebook: Path) -> dict[int, list[str]]:
    """{number: [its title, then the titles of the headings under it]} of a notebook's
    numbered headings (``## 11. Attention maps``, ``## 3 · Where ...``)."""
    found, current, level = {}, None, 0
    for cell in json.loads(notebook.read_text(encoding="utf-8"))["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        for line in doccheck.prose("".join(cell["source"])).split("\n"):
            numbered, heading = NUMBERED_HEADING.match(line), ANY_HEADING.match(line)
            if numbered:
                current, level = int(numbered.group(2)), len(numbered.group(1))
                found[current] = [numbered.group(3)]
            elif heading and current is not None:
                if len(heading.group(1)) <= level:
                    current = None
                else:
                    found[current].append(heading.group(2))
    return found


def _notebook(number: str, root: Path = ROOT) -> Path | None:
    return next(iter(sorted((root / "notebooks").glob(f"{number}_*.ipynb"))), None)


def pointer_problems(page: doccheck.Page, root: Path = ROOT) -> list[str]:
    problems = []
    body = doccheck.prose(page.text)
    body = re.sub(r"(`+)(?!`).+?(?<!`)\1(?!`)", _blank, body, flags=re.S)
    own = notebook_of(page)
    for m in POINTER.finditer(body):
        line = body.count("\n", 0, m.start()) + 1
        if m.group("nb"):
            notebook = _notebook(m.group("nb"), root)
        else:
            before = body[max(0, m.start() - 40):m.start()].lower()
            if own is None or "paper" in before or re.search(r"notebook \d\d\W*$", before):
                continue  # another notebook's or the paper's section, said before
            notebook = own
        where = f"{page.where(line)}: {' '.join(m.group(0).split())!r}"
        if notebook is None:
            problems.append(f"{where}: no notebook {m.group('nb')}")
            continue
        number, title = int(m.group("section")), m.group("title") or m.group("bare")
        found = sections(notebook)
        if number not in found:
            problems.append(f"{where}: {notebook.name} has no section {number} "
                            f"(its sections: {', '.join(map(str, sorted(found)))})")
        elif title and not any(_plain(t).startswith(_plain(title)) or _plain(title) == _plain(t)
                               for t in found[number]):
            match = [n for n, titles in found.items()
                     if any(_plain(t).startswith(_plain(title)) for t in titles)]
            hint = f"; {title!r} is section {match[0]}" if match else ""
            problems.append(f"{where}: {notebook.name}'s section {number} is "
                            f"{found[number][0]!r}{hint}")
    return problems


# --- signatures -----------------------------------------------------------------------------------

def _params(node) -> list[str] | None:
    """The parameter names of a ``def`` (``self`` dropped) or of a class's ``__init__``; a
    ``**kwargs`` comes last, as ``"**kwargs"`` (it takes any keyword)."""
    if isinstance(node, ast.ClassDef):
        init = next((n for n in node.body if isinstance(n, ast.FunctionDef)
                     and n.name == "__init__"), None)
        return None if init is None else _params(init)
    args = node.args
    names = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
    names += [f"**{args.kwarg.arg}"] if args.kwarg else []
    return names[1:] if names[:1] in (["self"], ["cls"]) else names


def definitions(source: str) -> dict[str, list[str]]:
    """{name: parameters} of the module-level functions and classes of Python source."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}
    found = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            params = _params(node)
            if params is not None:
                found[node.name] = params
    return found


def notebook_definitions(path: Path) -> dict[str, list[str]]:
    found = {}
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        if cell["cell_type"] == "code":
            found.update(definitions("".join(cell["source"])))
    return found


def library_definitions(root: Path = ROOT) -> dict[str, list[list[str]]]:
    """{name: [parameters of each definition]} over the whole library."""
    found: dict[str, list[list[str]]] = {}
    for path in sorted((root / "vit_scratch").rglob("*.py")):
        for name, params in definitions(path.read_text(encoding="utf-8")).items():
            found.setdefault(name, []).append(params)
    return found


def _extends(params: list[str], base: list[str]) -> bool:
    """``params`` are ``base``'s, in order, perhaps with more after them."""
    return params[:len(base)] == base


def stub_problems(root: Path = ROOT) -> list[str]:
    """Each exercise stub against its solution (the same parameters) and, for a try-first
    exercise, against the function of the same name its notebook writes next (that one's
    parameters first, in order)."""
    problems = []
    for stub in sorted((root / "exercises").glob("ex[0-9][0-9]_*.py")):
        solution = root / "exercises" / "solutions" / stub.name
        notebook = notebook_of(doccheck.Page(stub, ""))
        problems += stub_signature_problems(
            stub.relative_to(root).as_posix(), stub.read_text(encoding="utf-8"),
            definitions(solution.read_text(encoding="utf-8")) if solution.exists() else {},
            notebook_definitions(notebook) if notebook else {},
            notebook.name if notebook else "")
    return problems


def stub_signature_problems(name: str, text: str, solution: dict, written: dict,
                            notebook: str) -> list[str]:
    """The checks of :func:`stub_problems` on one stub's source ``text``: ``solution`` and
    ``written`` are {name: parameters} of its solution and of its notebook's code."""
    problems = []
    mine = definitions(text)
    for node in ast.parse(text).body:
        if not isinstance(node, (ast.FunctionDef, ast.ClassDef)) or node.name.startswith("_"):
            continue
        params = mine.get(node.name)
        if params is None:
            continue
        where = f"{name}:{node.lineno}: {node.name}({', '.join(params)})"
        if node.name in solution and solution[node.name] != params:
            problems.append(f"{where}: the solution takes ({', '.join(solution[node.name])})")
        doc = ast.get_docstring(node) or ""
        if "(try first)" in doc.split("\n")[0] and node.name in written \
                and not _extends(params, written[node.name]):
            problems.append(f"{where}: notebook {notebook} writes it as "
                            f"{node.name}({', '.join(written[node.name])})")
    return problems


CALL = re.compile(r"^([A-Za-z_][\w.]*)\((.*)\)$")
#: a dotted call is ours when it starts with the package or one of its modules
OURS = {"vit_scratch", *(p.stem for p in (ROOT / "vit_scratch").rglob("*.py")),
        *(p.name for p in (ROOT / "vit_scratch").iterdir() if p.is_dir())} - {"__init__"}


def stated_calls(text: str) -> list[tuple[str, list[str], list[str], int]]:
    """(name, positional arguments, keyword names, line) of every inline code span of the
    prose that is a call: ``class_attention(u, ..., class_token_in_keys=False)``."""
    found = []
    for code, line in doccheck.inline_code(text):
        m = CALL.match(code.strip())
        if not m:
            continue
        try:
            call = ast.parse(code.strip(), mode="eval").body
        except SyntaxError:
            continue
        if not isinstance(call, ast.Call):
            continue
        prefix = m.group(1).rsplit(".", 1)[0] if "." in m.group(1) else ""
        if prefix and prefix.split(".")[0] not in OURS:
            continue  # torch.softmax(x, dim=...), k.softmax(dim=-2): not ours
        positional = [ast.unparse(a) for a in call.args]
        keywords = [k.arg for k in call.keywords if k.arg]
        found.append((m.group(1).rsplit(".", 1)[-1], positional, keywords, line))
    return found


def call_problems(page: doccheck.Page, library: dict, root: Path = ROOT) -> list[str]:
    """A call written in the prose uses only keywords its function takes, and a call of bare
    names (a signature: ``conv_rel_pos_enc(q, v, size, weights, biases)``) names its
    parameters in order."""
    problems = []
    known = {name: list(params) for name, params in library.items()}
    for stub in (root / "exercises").glob("ex[0-9][0-9]_*.py"):
        for name, params in definitions(stub.read_text(encoding="utf-8")).items():
            known.setdefault(name, []).append(params)
    own = notebook_of(page)
    if own is not None:
        for name, params in notebook_definitions(own).items():
            known.setdefault(name, []).append(params)
    for name, positional, keywords, line in stated_calls(page.text):
        if name not in known:
            continue
        candidates = known[name]
        bad = [k for k in keywords
               if not any(k in c or any(p.startswith("**") for p in c) for c in candidates)]
        if bad:
            problems.append(f"{page.where(line)}: `{name}(...)` has no parameter "
                            f"{', '.join(bad)} (it takes: "
                            f"{'; '.join(', '.join(c) for c in candidates)})")
            continue
        if len(positional) >= 2 and all(re.fullmatch(r"[a-z_]\w*", a) for a in positional) and not any(
                c[:len(positional)] == positional for c in candidates):
            problems.append(f"{page.where(line)}: `{name}({', '.join(positional)})`: its "
                            f"parameters are ({'; '.join(', '.join(c) for c in candidates)})")
    return problems


# --- links to other projects, tables, results files, the exercises -----------------------------

GITHUB = re.compile(r"https?://github\.com/([\w.-]+)/([\w.-]+?)(?:\.git)?(?=[/#?)\s>\]\"']|$)")


def known_repositories() -> dict[str, str]:
    """{repository name (lower case): "owner/name"} from the metadata of every installed
    distribution that names its GitHub repository (nbval -> computationalmodelling/nbval)."""
    import importlib.metadata

    found = {}
    for dist in importlib.metadata.distributions():
        urls = [dist.metadata.get("Home-page") or ""] + [
            u.split(",", 1)[-1] for u in dist.metadata.get_all("Project-URL") or []]
        for url in urls:
            m = GITHUB.search(url.strip() + " ")
            if m:
                found.setdefault(m.group(2).lower(), f"{m.group(1)}/{m.group(2)}")
    return found


def repository_problems(page: doccheck.Page, known: dict[str, str]) -> list[str]:
    """A link to a project's GitHub repository names the owner that the project's own package
    metadata gives (an installed distribution is the source)."""
    problems = []
    for target, line in doccheck.links(page.text):
        m = GITHUB.search(target + " ")
        if m and m.group(2).lower() in known and \
                f"{m.group(1)}/{m.group(2)}".lower() != known[m.group(2).lower()].lower():
            problems.append(f"{page.where(line)}: {target}: the project {m.group(2)} is "
                            f"github.com/{known[m.group(2).lower()]} (its package metadata)")
    return problems


TABLE_POINTER = re.compile(r"(?:the\s+)?(README|[\w-]+\.md)(?:'s|’s)\s+table|table\s+(?:in|of)\s+"
                           r"(?:the\s+)?(README|[\w-]+\.md)", re.I)


def shown_results(root: Path = ROOT) -> dict[str, set[str]]:
    """{page name: the results files whose tables it shows}."""
    found: dict[str, set[str]] = {}
    for page in doccheck.markdown_pages(root):
        text = re.sub(r"(`+)(?!`).+?(?<!`)\1(?!`)", _blank, doccheck.FENCE.sub(_blank, page.text))
        for m in re.finditer(r"<!-- table: python benchmarks/tables\.py ([^>]+?) -->", text):
            found.setdefault(page.name, set()).add(
                next(t for t in m.group(1).split() if t.endswith(".json")))
    return found


def table_pointer_problems(page: doccheck.Page, shown: dict[str, set[str]]) -> list[str]:
    """"The README's table" (or "the table in results.md") points at a page that shows a
    results table, and at the one a results file named in the same paragraph is shown on."""
    problems = []
    body = doccheck.prose(_without_code(page.text))
    named = doccheck.prose(page.text).split("\n")  # results files are often named as code
    for block in blocks(body):
        text = "\n".join(body.split("\n")[block.start - 1:block.end])
        files = set(re.findall(r"benchmarks/results/[\w.-]+\.json",
                               "\n".join(named[block.start - 1:block.end])))
        for m in TABLE_POINTER.finditer(text):
            name = m.group(1) or m.group(2)
            target = "README.md" if name.upper() == "README" else \
                next((n for n in shown if n.endswith("/" + name) or n == name), f"docs/{name}")
            line = block.start + text.count("\n", 0, m.start())
            if target not in shown:
                problems.append(f"{page.where(line)}: {m.group(0)!r}: {target} shows no results "
                                f"table; the tables are on "
                                f"{', '.join(sorted(shown)) or 'no page'}")
            elif files and not files & shown[target]:
                problems.append(f"{page.where(line)}: {m.group(0)!r}: {target} shows "
                                f"{', '.join(sorted(shown[target]))}, not {', '.join(sorted(files))}")
    return problems


def results_file_problems(path: Path, root: Path = ROOT) -> list[str]:
    """A results file is written by its script: ``written_by`` names a script of benchmarks/
    (or tools/, for a tool's saved report) that exists, the runs behind every summary are kept, and nothing in it was typed by hand."""
    name = path.relative_to(root).as_posix()
    data = json.loads(path.read_text(encoding="utf-8"))
    problems = []
    written_by = data.get("written_by", "") if isinstance(data, dict) else ""
    if not written_by:  # the formats that name no writer have one writer each
        kind = tables.load(path)["benchmark"]
        written_by = {"models": "python benchmarks/bench_models.py",
                      "attention": "python benchmarks/bench_attention.py"}.get(kind, "")
    script = re.match(r"python ((?:benchmarks|tools)/[\w-]+\.py)\b", written_by)
    if not script:
        problems.append(f"{name}: no 'written_by' naming the benchmark or tool script that "
                        f"wrote it")
    elif not (root / script.group(1)).is_file():
        problems.append(f"{name}: written by {script.group(1)}, which does not exist")
    text = json.dumps(data).lower()
    if "by hand" in text or "filled" in text and "hand" in text:
        problems.append(f"{name}: says it was filled by hand; re-run {written_by or 'its script'}")

    def empty_runs(node, where=""):
        if isinstance(node, dict):
            for k, v in node.items():
                if k == "runs" and isinstance(v, list) and not v:
                    problems.append(f"{name}: {where or 'top'}.runs is empty: the summary's "
                                    f"runs are not kept")
                empty_runs(v, f"{where}.{k}" if where else k)

    empty_runs(data)
    return problems


EXERCISES_RANGE = re.compile(
    r"notebooks?\s+\(?(\d\d)\s*(?:[-–]|\.\.\.|…)\s*(\d\d)((?:\s*(?:and|,)\s*\d\d)*)")
EXERCISE_COUNT = re.compile(r"(?<![\w.])(\d+) exercises\b")


def exercise_notebooks(root: Path = ROOT) -> set[int]:
    return {int(p.name[2:4]) for p in (root / "exercises").glob("ex[0-9][0-9]_*.py")}


def exercise_count(root: Path = ROOT) -> int:
    """The exercises of the stubs: their docstrings' "Exercise N.M" headings (2.4a and 2.4b
    are two, as the grader counts them)."""
    found = set()
    for path in (root / "exercises").glob("ex[0-9][0-9]_*.py"):
        found |= set(re.findall(r'"""Exercise (\d+\.\d+[a-z]?)', path.read_text(encoding="utf-8")))
    return len(found)


def exercise_claim_problems(page: doccheck.Page, root: Path = ROOT) -> list[str]:
    """A paragraph about the exercises that names the notebooks they follow names those that
    have an exercise file; "N exercises" counts them."""
    problems = []
    body = countable_text(page.text)
    have = exercise_notebooks(root)
    lines = body.split("\n")
    for block in blocks(body):
        text = "\n".join(lines[block.start - 1:block.end])
        if "exercise" not in text.lower():
            continue
        line = block.start
        for m in EXERCISES_RANGE.finditer(text):
            named = set(range(int(m.group(1)), int(m.group(2)) + 1))
            named.update(int(n) for n in re.findall(r"\d\d", m.group(3)))
            if named != have:
                problems.append(f"{page.where(line)}: {m.group(0)!r}: the exercises follow "
                                f"notebooks {', '.join(f'{n:02d}' for n in sorted(have))}")
        for m in EXERCISE_COUNT.finditer(text):
            if int(m.group(1)) != exercise_count(root):
                problems.append(f"{page.where(line)}: {m.group(0)!r}: the stubs hold "
                                f"{exercise_count(root)} exercises")
    return problems


def tool_text_pages(root: Path = ROOT) -> list[doccheck.Page]:
    """The exercise tools' texts -- docstrings, help and messages, every string of
    ``exercises/*.py`` but the stubs -- as pages (lines as in the file): what they say about the
    exercises is checked like a page."""
    out = []
    for path in sorted((root / "exercises").glob("*.py")):
        if re.match(r"ex\d\d_", path.name):
            continue
        source = path.read_text(encoding="utf-8")
        lines = [""] * (source.count("\n") + 1)
        tree = ast.parse(source)
        inside = {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}
        for node in ast.walk(tree):
            if id(node) in inside:
                continue
            if isinstance(node, ast.JoinedStr):
                text = "".join(v.value if isinstance(v, ast.Constant) else "{...}"
                               for v in node.values)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                text = node.value
            else:
                continue
            row = node.lineno - 1
            lines[row] = (lines[row] + " " + " ".join(text.split())).strip()
        out.append(doccheck.Page(path, "\n".join(lines)))
    return out


# --- everything -----------------------------------------------------------------------------------

def pages(root: Path = ROOT) -> list[doccheck.Page]:
    """README.md, docs/*.md, the notebooks' markdown, notebooks/weights/README.md (the
    checkpoints' page) and the exercises' docstrings."""
    weights = root / "notebooks" / "weights" / "README.md"
    return (doccheck.markdown_pages(root) + [doccheck.Page(weights, weights.read_text(encoding="utf-8"))]
            + exercise_pages(root))


@dataclass
class Context:
    """What the checks of one page look things up in (built once for all pages)."""

    library: dict
    repositories: dict
    shown: dict

    @classmethod
    def build(cls, root: Path = ROOT) -> "Context":
        return cls(library_definitions(root), known_repositories(), shown_results(root))


def page_problems(page: doccheck.Page, context: Context | None = None,
                  root: Path = ROOT) -> list[str]:
    context = context or Context.build(root)
    return (number_problems(page, root) + directive_problems(page)
            + pointer_problems(page, root) + call_problems(page, context.library, root)
            + repository_problems(page, context.repositories)
            + table_pointer_problems(page, context.shown)
            + exercise_claim_problems(page, root))


def all_problems(root: Path = ROOT) -> list[str]:
    context = Context.build(root)
    found = [p for page in pages(root) + tool_text_pages(root)
             for p in page_problems(page, context, root)]
    found += stub_problems(root)
    for path in sorted((root / "benchmarks" / "results").glob("*.json")):
        found += results_file_problems(path, root)
    return found


if __name__ == "__main__":
    found = all_problems()
    print("\n".join(found) or "no problems")
    sys.exit(1 if found else 0)
