"""MkDocs hooks that make the repository itself the course site (see mkdocs.yml).

* Pages, in path order: README.md (the home page), the notebooks (01, 02, ...), then docs/*.md.
  They are read where they are; nothing is copied into docs/ by hand.
* Files a page links to (an exercise file, LICENSE, a figure) are carried along, so every link
  of the site resolves. The instructors' folders ``exercises/solutions/`` and
  ``exercises/hidden/`` never are: a page that links into them fails the build.
* Notebook pages are HTML made by nbconvert, which MkDocs does not rewrite: their links to ``.md``
  and ``.ipynb`` files are pointed at the pages here, a link to nothing fails the build, and the
  table of contents is made from the headings' own anchors.
* Maths: MathJax is served from the site itself (the copy that the ``jupyter-server-mathjax``
  package installs), so formulas render offline too.
"""
from __future__ import annotations

import hashlib
import logging
import posixpath
import re
import sys
from pathlib import Path

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files, InclusionLevel
from mkdocs.structure.toc import get_toc

sys.path.insert(0, str(Path(__file__).resolve().parent))
import doccheck  # noqa: E402

ROOT = doccheck.ROOT
log = logging.getLogger("mkdocs.hooks.site")
# docs pages in reading order after the notebooks; any other docs/*.md follows alphabetically
DOCS_ORDER = ["glossary", "library", "training", "results", "speed", "instructors", "maintainers"]
NEVER_PUBLISHED = ("exercises/solutions", "exercises/hidden")
MATHJAX_DIR = "assets/mathjax"
MATHJAX_CONFIG = "TeX-AMS-MML_HTMLorMML-full,Safe"


def page_sources() -> list[str]:
    """The site's pages, as paths relative to the repository, in path order."""
    docs = {p.stem: p for p in (ROOT / "docs").glob("*.md")}
    ordered = [docs.pop(name) for name in DOCS_ORDER if name in docs] + sorted(docs.values())
    pages = [ROOT / "README.md", *sorted((ROOT / "notebooks").glob("*.ipynb")), *ordered]
    return [p.relative_to(ROOT).as_posix() for p in pages]


def on_config(config):
    notebooks = [p for p in page_sources() if p.endswith(".ipynb")]
    docs = [p for p in page_sources() if p.startswith("docs/")]
    config["nav"] = [{"Start here": "README.md"}, {"Notebooks": notebooks}, {"Reference": docs}]
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
    mathjax = _mathjax_root()
    theme = [file for file in files if file.src_dir != config["docs_dir"]]  # the theme's assets
    return Files(theme + [add(p, ROOT) for p in sources + figures]
                 + [add(p, ROOT) for p in sorted(linked_files(sources) - set(figures))]
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
    """Notebook pages: links to ``.md``/``.ipynb`` files go to their pages; none may dangle."""
    if not page.file.src_uri.endswith(".ipynb"):
        return html
    base = posixpath.dirname(page.file.src_uri)
    by_url = {file.dest_uri: file for file in files}

    def rewrite(match: re.Match) -> str:
        attribute, quote, target = match.group(1), match.group(2), match.group(3)
        if doccheck.is_external(target) or target.startswith(("#", "data:")):
            return match.group(0)
        target, _, query = target.partition("?")
        path, _, anchor = target.partition("#")
        src_uri = posixpath.normpath(posixpath.join(base, path))
        file = files.get_file_from_path(src_uri) or by_url.get(src_uri)
        if file is None:
            log.warning(f"{page.file.src_uri}: link to {target!r}: not a file of the site")
            return match.group(0)
        url = (_relative(file.url, page.file.url) + (f"?{query}" if query else "")
               + (f"#{anchor}" if anchor else ""))
        return f"{attribute}={quote}{url}{quote}"

    html = re.sub(r"""\b(href|src)=(["'])([^"']+)\2""", rewrite, html)
    page.toc = _toc_from_headings(html)
    return _share_css(html, page.file.url)


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
