"""The course site builds (`mkdocs build`, as the README says), and what it shows is whole:
every notebook has its page with all its figures, every page of the navigation exists, every
internal link and image resolves, and the instructors' folders are never published.

Where Debian's `chromium` is installed, two pages are also opened headless: the maths must
have been typeset (MathJax is served by the site itself, so no network is needed), no image may
be broken, and a screenshot is kept (its path is printed). Without Chromium that test skips."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
DOCS = sorted((ROOT / "docs").glob("*.md"))


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    from mkdocs.commands.build import build
    from mkdocs.config import load_config

    site_dir = tmp_path_factory.mktemp("site") / "site"
    config = load_config(str(ROOT / "mkdocs.yml"), site_dir=str(site_dir), strict=True)
    build(config)  # strict: a warning (a broken link, a missing page) fails the build
    return site_dir


def html(site: Path, page: str) -> str:
    return (site / page).read_text(encoding="utf-8")


def image_outputs(notebook: Path) -> int:
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    return sum(1 for cell in cells for output in cell.get("outputs", [])
               if {"image/png", "image/jpeg", "image/svg+xml"} & set(output.get("data", {})))


def test_every_page_is_built_in_path_order(site):
    pages = ["index.html"] + [f"notebooks/{nb.stem}.html" for nb in NOTEBOOKS] + [
        f"docs/{doc.stem}.html" for doc in DOCS]
    for page in pages:
        assert (site / page).is_file(), page
    nav = [re.search(r'href="([^"#]*)', tag).group(1)
           for tag in re.findall(r"<a\b[^>]*>", html(site, "index.html"))
           if "md-nav__link" in tag and "href=" in tag]
    notebook_links = [link for link in nav if link.startswith("notebooks/")]
    assert notebook_links == sorted(set(notebook_links), key=notebook_links.index)
    assert notebook_links == [f"notebooks/{nb.stem}.html" for nb in NOTEBOOKS]


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[nb.stem for nb in NOTEBOOKS])
def test_every_notebook_page_shows_its_figures(site, notebook):
    page = html(site, f"notebooks/{notebook.stem}.html")
    embedded = len(re.findall(r'<img[^>]+src="data:image/(?:png|jpeg|svg\+xml)', page))
    assert image_outputs(notebook) > 0
    assert embedded >= image_outputs(notebook)
    assert (site / "notebooks" / notebook.name).is_file()  # "download the notebook"
    assert "MathJax.js" in page


LINK = re.compile(r"""<(?:a|img|link|script)\b[^>]*?\b(?:href|src)=["']([^"']+)["']""")
ID = re.compile(r"""\bid=["']([^"']+)["']""")


def test_every_internal_link_resolves(site):
    # 404.html is served at any address, so its links start at the site's root: left out
    pages = [p for p in site.rglob("*.html")
             if "assets" not in p.relative_to(site).parts and p.name != "404.html"]
    ids = {p: set(ID.findall(p.read_text(encoding="utf-8"))) for p in pages}
    broken, checked = [], 0
    for page in pages:
        for target in LINK.findall(page.read_text(encoding="utf-8")):
            if re.match(r"^(?:[a-z][a-z0-9+.-]*:|//|#$)", target, re.I):
                continue  # another site, a data: URI, or the top of the page
            path, _, anchor = target.split("?")[0].partition("#")
            resolved = (page.parent / path).resolve() if path else page
            checked += 1
            if not resolved.is_file():
                broken.append(f"{page.relative_to(site)}: {target}")
            elif anchor and resolved.suffix == ".html" and anchor not in ids[resolved]:
                broken.append(f"{page.relative_to(site)}: {target} (no such anchor)")
    assert checked > 500
    assert not broken, "\n".join(broken)


def test_links_between_notebooks_and_docs_point_at_pages(site):
    page = html(site, "docs/glossary.html")
    assert 'href="../notebooks/01_patch_embedding.html"' in page
    assert 'class="arithmatex"' in page and "assets/mathjax/MathJax.js" in page


def test_instructor_folders_are_never_published(site):
    assert not (site / "exercises" / "solutions").exists()
    assert not (site / "exercises" / "hidden").exists()
    assert (site / "exercises" / "ex01_patch_embedding.py").is_file()  # linked by notebook 01


PROBE = """<script>
window.addEventListener("load", function () {
  function report() {
    var images = Array.from(document.images);
    var result = {
      images: images.length,
      broken: images.filter(function (i) { return !i.complete || i.naturalWidth === 0; })
                    .map(function (i) { return i.src.slice(0, 80); }),
      typeset: document.querySelectorAll(".MathJax, .MathJax_Display").length,
      errors: document.querySelectorAll(".MathJax_Error, .merror, merror").length,
      rawTex: (document.body.innerText.match(/\\\\(frac|sqrt|mathrm|top|cdots)\\b/g) || []).length
    };
    var out = document.createElement("pre");
    out.id = "site-check";
    out.textContent = JSON.stringify(result);
    document.body.appendChild(out);
  }
  if (window.MathJax && MathJax.Hub) { MathJax.Hub.Queue(report); } else { report(); }
});
</script>
"""
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
HEADLESS = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            "--virtual-time-budget=30000"]


@pytest.mark.skipif(CHROMIUM is None, reason="headless check needs Debian's chromium package "
                                             "(apt-get install chromium); not installed here")
@pytest.mark.parametrize("page", ["notebooks/06_factorized_attention.html", "docs/glossary.html"])
def test_pages_render_in_chromium(site, page, tmp_path):
    probe = site / page.replace(".html", ".probe.html")
    probe.write_text(html(site, page).replace("</body>", PROBE + "</body>"), encoding="utf-8")
    dom = subprocess.run([CHROMIUM, *HEADLESS, "--dump-dom", probe.as_uri()],
                         capture_output=True, text=True, timeout=180).stdout
    probe.unlink()
    found = re.search(r'<pre id="site-check">([^<]*)</pre>', dom)
    assert found, "the page never finished loading"
    result = json.loads(found.group(1))
    assert result["typeset"] > 3 and result["errors"] == 0 and result["rawTex"] == 0, result
    assert result["broken"] == [], result
    shot = tmp_path / (Path(page).stem + ".png")
    subprocess.run([CHROMIUM, *HEADLESS, "--window-size=1280,1400", f"--screenshot={shot}",
                    (site / page).as_uri()], capture_output=True, timeout=180)
    assert shot.is_file() and shot.stat().st_size > 10_000
    print(f"screenshot of {page}: {shot}")
