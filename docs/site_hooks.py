"""MkDocs hooks that make the repository itself the course site (see mkdocs.yml).

* Pages, in path order: README.md (the home page), the notebooks (01, 02, ...), the exercises,
  then docs/*.md. They are read where they are; nothing is copied into docs/ by hand.
* Each learner's exercise file, ``exercises/exNN_<topic>.py``, gets a page made from it: its
  docstrings and its stub, rendered (docs/exercise_pages.py). A link to the file, on any page,
  goes to that page, which offers the file itself for download.
* Files a page links to (LICENSE, a figure, a test) are carried along, so every link of the
  site resolves. The instructors' folders (``exercises/solutions/`` and ``exercises/grader/``,
  where the hidden tests live) never are: a page that links into them fails the build.
* Notebook pages are HTML made by nbconvert, which MkDocs does not rewrite: their links to ``.md``
  and ``.ipynb`` files are pointed at the pages here, a link to nothing fails the build, and the
  table of contents is made from the headings' own anchors. The cells' tags, which mkdocs-jupyter
  draws above a cell's code (``nbval-check-output``: for CI, not for the reader), are left out.
  docs/overrides/main.html gives each notebook page its "Download the notebook" link.
* Maths: MathJax is served from the site itself (the copy that the ``jupyter-server-mathjax``
  package installs), so formulas render offline too. That copy holds only the STIX-Web fonts;
  docs/site_assets/mathjax_site.js, loaded after MathJax's combined configuration, makes every
  page draw with them.
* docs/site_assets/extra.css: the notebook pages' download link, and notebook pages and wide
  tables at phone width. The cells of a table whose rows hold prose are labelled with their
  column's name (``data-label``), so that a phone shows such a table one row at a time instead
  of cutting it off at the screen's edge.
"""
from __future__ import annotations

import hashlib
import logging
import posixpath
import re
import sys
from html import escape
from pathlib import Path

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files, InclusionLevel
from mkdocs.structure.toc import get_toc

sys.path.insert(0, str(Path(__file__).resolve().parent))
import doccheck  # noqa: E402
import exercise_pages  # noqa: E402

ROOT = doccheck.ROOT
log = logging.getLogger("mkdocs.hooks.site")
# docs pages in reading order after the notebooks; any other docs/*.md follows alphabetically
DOCS_ORDER = ["glossary", "library", "training", "results", "speed", "instructors", "maintainers"]
NEVER_PUBLISHED = ("exercises/solutions", "exercises/grader")
MATHJAX_DIR = "assets/mathjax"
# MathJax's combined configuration, then the site's own (docs/site_assets/mathjax_site.js, served
# as MATHJAX_DIR/config/site.js): the fonts the served copy holds
MATHJAX_CONFIG = "TeX-AMS-MML_HTMLorMML-full,Safe,site"
SITE_ASSETS = {"docs/site_assets/mathjax_site.js": f"{MATHJAX_DIR}/config/site.js",
               "docs/site_assets/extra.css": "assets/extra.css"}  # mkdocs.yml: extra_css


def page_sources() -> list[str]:
    """The site's pages, as paths relative to the repository, in path order."""
    docs = {p.stem: p for p in (ROOT / "docs").glob("*.md")}
    ordered = [docs.pop(name) for name in DOCS_ORDER if name in docs] + sorted(docs.values())
    pages = [ROOT / "README.md", *sorted((ROOT / "notebooks").glob("*.ipynb")), *ordered]
    return [p.relative_to(ROOT).as_posix() for p in pages]


def on_config(config):
    notebooks = [p for p in page_sources() if p.endswith(".ipynb")]
    docs = [p for p in page_sources() if p.startswith("docs/")]
    exercises = [{exercise_pages.nav_title(stub): exercise_pages.page_uri(stub)}
                 for stub in exercise_pages.stub_files()]
    config["nav"] = [{"Start here": "README.md"}, {"Notebooks": notebooks},
                     {"Exercises": exercises}, {"Reference": docs}]
    # every notebook page sits in notebooks/, one level below the site's root
    assert all(posixpath.dirname(p) == "notebooks" for p in notebooks)
    config.plugins["mkdocs-jupyter"].config["custom_mathjax_url"] = (
        f"../{MATHJAX_DIR}/MathJax.js?config={MATHJAX_CONFIG}")
    return config


def linked_files(sources: list[str]) -> set[str]:
    """Every file in the repository that a page links to, that is not itself a page."""
    found = set()
    for source in sources:
        path = ROOT / source
        page = (doccheck.notebook_page(path) if path.suffix == ".ipynb"
                else doccheck.Page(path, path.read_text(encoding="utf-8")))
        for target, _, line in doccheck.local_links(page):
            if not target.is_file() or not target.is_relative_to(ROOT):
                continue  # a broken link: reported when the page is built
            relative = target.relative_to(ROOT).as_posix()
            if relative.startswith(NEVER_PUBLISHED):
                raise ValueError(f"{page.where(line)} links to {relative}, which is for "
                                 f"instructors only and must never be published")
            if relative not in sources:
                found.add(relative)
    return found


def _mathjax_root() -> Path:
    try:
        import jupyter_server_mathjax
    except ImportError as error:
        raise SystemExit("the course site serves MathJax from the jupyter-server-mathjax "
                         "package: pip install -e \".[docs]\"") from error
    return Path(jupyter_server_mathjax.__file__).parent / "static"


@event_priority(100)  # before mkdocs-jupyter's on_files, which must see the notebooks
def on_files(files: Files, config) -> Files:
    site_dir = config["site_dir"]

    def add(src_uri: str, src_dir: Path, dest_uri: str | None = None) -> File:
        file = File(src_uri, str(src_dir), site_dir, config["use_directory_urls"],
                    dest_uri=dest_uri)
        file.inclusion = InclusionLevel.INCLUDED
        return file

    sources = page_sources()
    figures = [p.relative_to(ROOT).as_posix() for p in sorted((ROOT / "docs/figures").glob("*"))
               if p.is_file()]
    stubs = exercise_pages.stub_files()
    exercises = [File.generated(config, exercise_pages.page_uri(stub),
                                content=exercise_pages.exercise_page(stub),
                                inclusion=InclusionLevel.INCLUDED) for stub in stubs]
    mathjax = _mathjax_root()
    theme = [file for file in files if file.src_dir != config["docs_dir"]]  # the theme's assets
    return Files(theme + [add(p, ROOT) for p in sources + figures + stubs] + exercises
                 + [add(p, ROOT) for p in sorted(linked_files(sources) - set(figures + stubs))]
                 + [add(src, ROOT, dest) for src, dest in SITE_ASSETS.items()]
                 + [add(p.relative_to(mathjax).as_posix(), mathjax,
                        f"{MATHJAX_DIR}/{p.relative_to(mathjax).as_posix()}")
                    for p in sorted(mathjax.rglob("*")) if p.is_file()])


def _relative(target: str, page_url: str) -> str:
    return posixpath.relpath(target, posixpath.dirname(page_url) or ".")


# nbconvert writes the same 0.5 MB of notebook CSS into every notebook page; it is served once
_shared_css: dict[str, str] = {}


def _share_css(html: str, page_url: str) -> str:
    def link(match: re.Match) -> str:
        css = match.group(1)
        if len(css) < 20_000:
            return match.group(0)
        name = f"assets/notebook-{hashlib.sha256(css.encode()).hexdigest()[:12]}.css"
        _shared_css[name] = css
        return f'<link rel="stylesheet" href="{_relative(name, page_url)}">'

    return re.sub(r'<style type="text/css">(.*?)</style>', link, html, flags=re.S)


def on_post_build(config):
    for name, css in _shared_css.items():
        target = Path(config["site_dir"]) / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(css, encoding="utf-8")


def on_page_content(html: str, page, config, files: Files) -> str:
    """Every page: a link to an exercise file goes to the exercise's page, and tables whose rows
    hold prose are labelled. Notebook pages: links to ``.md``/``.ipynb`` files go to their
    pages, and none may dangle; the cells' tags are left out."""
    notebook = page.file.src_uri.endswith(".ipynb")
    # a notebook's links are relative to its source; MkDocs has made a Markdown page's links
    # relative to the page's own address
    base = posixpath.dirname(page.file.src_uri if notebook else page.file.url)
    by_url = {file.dest_uri: file for file in files}
    exercise_page = {stub: files.get_file_from_path(exercise_pages.page_uri(stub))
                     for stub in exercise_pages.stub_files()}
    if page.file in exercise_page.values():
        exercise_page = {}  # an exercise's own page offers its file for download

    def rewrite(match: re.Match) -> str:
        attribute, quote, target = match.group(1), match.group(2), match.group(3)
        if doccheck.is_external(target) or target.startswith(("#", "data:")):
            return match.group(0)
        target, _, query = target.partition("?")
        path, _, anchor = target.partition("#")
        src_uri = posixpath.normpath(posixpath.join(base, path))
        if src_uri in exercise_page and attribute == "href":
            file = exercise_page[src_uri]
        elif not notebook:
            return match.group(0)
        else:
            file = files.get_file_from_path(src_uri) or by_url.get(src_uri)
        if file is None:
            log.warning(f"{page.file.src_uri}: link to {target!r}: not a file of the site")
            return match.group(0)
        url = (_relative(file.url, page.file.url) + (f"?{query}" if query else "")
               + (f"#{anchor}" if anchor else ""))
        return f"{attribute}={quote}{url}{quote}"

    html = _label_table_cells(re.sub(r"""\b(href|src)=(["'])([^"']+)\2""", rewrite, html))
    if not notebook:
        return html
    page.toc = _toc_from_headings(html)
    return _share_css(CELL_TAGS.sub("", html), page.file.url)


# mkdocs-jupyter's template draws a code cell's metadata tags in a bar above its code
CELL_TAGS = re.compile(r'<div class="celltoolbar">\s*(?:<div class="button_container '
                       r'tags_button_container">(?:(?!</?div\b).)*</div>\s*)*</div>', re.S)


PROSE_ROW = 100  # characters of text in a table's longest row from which it reads as prose


def _label_table_cells(html: str) -> str:
    """Each cell of a table of three or more columns whose rows hold prose gets its column's
    name (``data-label``), and the table ``data-layout="rows"``: on a phone, extra.css shows it
    one row at a time. Tables of numbers stay tables, and scroll sideways where they must."""
    def text(fragment: str) -> str:
        return " ".join(re.sub(r"<[^>]+>", " ", fragment).split())

    def label(match: re.Match) -> str:
        table = match.group(0)
        names = [text(th) for th in re.findall(r"<th\b[^>]*>(.*?)</th>", table, flags=re.S)]
        rows = [text(row) for row in re.findall(r"<tr\b[^>]*>(.*?)</tr>", table, flags=re.S)]
        if len(names) < 3 or max(map(len, rows), default=0) < PROSE_ROW:
            return table

        def row(match: re.Match) -> str:
            column = iter(names)
            return re.sub(r"<td\b", lambda td: f'<td data-label="{escape(next(column, ""))}"',
                          match.group(0))

        table = re.sub(r"<tr\b[^>]*>.*?</tr>", row, table, flags=re.S)
        return table.replace("<table", '<table data-layout="rows"', 1)

    return re.sub(r"<table\b[^>]*>.*?</table>", label, html, flags=re.S)


def _toc_from_headings(html: str):
    """The page's table of contents from the headings nbconvert wrote, with their own ids.

    mkdocs-jupyter derives the table of contents from a Markdown export of the notebook, whose
    anchors differ from nbconvert's wherever a heading holds code or maths."""
    tokens, stack = [], []
    for match in re.finditer(r'<h([1-6]) id="([^"]+)">(.*?)</h\1>', html, flags=re.S):
        level, name = int(match.group(1)), re.sub(r"<a class=\"anchor-link\".*?</a>", "",
                                                   match.group(3), flags=re.S)
        token = {"level": level, "id": match.group(2), "html": name,
                 "name": re.sub(r"<[^>]+>", "", name).strip(), "children": []}
        while stack and stack[-1]["level"] >= level:
            stack.pop()
        (stack[-1]["children"] if stack else tokens).append(token)
        stack.append(token)
    return get_toc(tokens)


def on_post_page(output: str, page, config) -> str:
    """Markdown pages with maths (pymdownx.arithmatex) load the site's MathJax; notebook pages
    load it themselves (mkdocs.yml, ``custom_mathjax_url``)."""
    if page.file.src_uri.endswith(".ipynb") or 'class="arithmatex"' not in output:
        return output
    url = _relative(f"{MATHJAX_DIR}/MathJax.js", page.file.url)
    script = (
        '<script type="text/x-mathjax-config">MathJax.Hub.Config({tex2jax: '
        '{inlineMath: [["\\\\(", "\\\\)"]], displayMath: [["\\\\[", "\\\\]"]], '
        'processEscapes: true, processClass: "arithmatex", ignoreClass: ".*"}, '
        'messageStyle: "none"});</script>\n'
        f'<script src="{url}?config={MATHJAX_CONFIG}"></script>\n')
    return output.replace("</head>", script + "</head>", 1)
