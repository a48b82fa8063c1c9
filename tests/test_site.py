"""The course site builds (`mkdocs build`, as the README says), and what it shows is whole:
every notebook and every exercise file has its page, every notebook page offers its notebook for
download and shows no cell tags, every page of the navigation exists, every internal link and
image resolves, and the instructors' folders are never published. The site is built with a
repository address (``VIT_SCRATCH_REPO_URL``), so the header's link to it is checked too.

Where Debian's `chromium` is installed, every page of the built site is also opened in it,
headless, from a local server, after its scripts ran (the DevTools protocol over a pipe, two
tabs at a time). A page fails on "[Math Processing Error]", a TeX error or an undefined macro,
TeX left as text (``$...$``, ``\\(``, ``\\frac``) outside code, a broken image, a request that
failed (a 404 asked for by the page or by its scripts, such as MathJax's font tables), an error
in the browser's console (an uncaught exception, ``console.error``; MathJax's probe of a font at
``about:blank`` excepted), a notebook page without a visible download link, or a cell tag shown.
Pages with planted faults prove the checker finds each kind; three pages are also drawn at phone
width (390 px), checked for cut-off code and tables and for copy buttons over code, and kept as
screenshots (paths printed); a notebook page is read in the dark palette, checked for outputs
too faint to read. Without Chromium those tests skip, saying why."""
from __future__ import annotations

import ast
import base64
import fcntl
import functools
import http.server
import itertools
import json
import os
import queue
import re
import shutil
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from html import unescape
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
DOCS = sorted((ROOT / "docs").glob("*.md"))
EXERCISES = sorted((ROOT / "exercises").glob("ex[0-9][0-9]_*.py"))


# A repository address for the test's build (mkdocs.yml: repo_url), so that the header's link is
# drawn and checked; a GitHub address is the case where Material's own link would ask GitHub's API
# for the repository's stars from the reader's browser (a failed request here, offline).
REPO_URL = "https://github.com/example/vit-scratch"


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    from mkdocs.commands.build import build
    from mkdocs.config import load_config

    site_dir = tmp_path_factory.mktemp("site") / "site"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("VIT_SCRATCH_REPO_URL", REPO_URL)
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
    pages = (["index.html"] + [f"notebooks/{nb.stem}.html" for nb in NOTEBOOKS]
             + [f"exercises/{ex.stem}.html" for ex in EXERCISES]
             + [f"docs/{doc.stem}.html" for doc in DOCS])
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
    assert "MathJax.js" in page


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[nb.stem for nb in NOTEBOOKS])
def test_every_notebook_page_offers_its_notebook_and_hides_cell_tags(site, notebook):
    page = html(site, f"notebooks/{notebook.stem}.html")
    links = re.findall(r'<a href="([^"]+)" download\b', page)
    assert links == [notebook.name], links  # one link, to the notebook beside the page
    assert (site / "notebooks" / notebook.name).read_bytes() == notebook.read_bytes()
    # mkdocs-jupyter draws a code cell's tags (nbval-check-output, for CI) in a bar above its code
    assert "celltoolbar" not in page and "cell-tag" not in page


def test_no_other_page_has_a_notebook_download_link(site):
    for page in ["index.html", "docs/glossary.html", "exercises/ex01_patch_embedding.html"]:
        assert "notebook-download" not in html(site, page), page


def test_repository_link_is_drawn_only_where_an_address_is_given(site, monkeypatch):
    """No public address is published, so the site links to none unless the builder names one;
    named, the header links to it, and nothing asks another server for the repository's facts."""
    from mkdocs.config import load_config

    monkeypatch.delenv("VIT_SCRATCH_REPO_URL", raising=False)
    plain = load_config(str(ROOT / "mkdocs.yml"))
    assert plain.repo_url is None and not plain.edit_uri
    links = re.findall(rf'<a href="{re.escape(REPO_URL)}"[^>]*>', html(site, "index.html"))
    assert len(links) == 2  # the header's, and the navigation drawer's on a phone
    assert all('class="md-source"' in link and "data-md-component" not in link for link in links)


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
    assert not (site / "exercises" / "grader").exists()
    published = sorted(p.name for p in (site / "exercises").iterdir())  # the stubs and their pages
    assert published == sorted([ex.name for ex in EXERCISES]
                               + [f"{ex.stem}.html" for ex in EXERCISES])


def test_each_exercise_file_has_a_page_with_its_docstrings_and_stub(site):
    assert len(EXERCISES) >= 9
    for exercise in EXERCISES:
        page = html(site, f"exercises/{exercise.stem}.html")
        text = " ".join(unescape(re.sub(r"<[^>]+>", " ", page)).split())
        for node in ast.parse(exercise.read_text(encoding="utf-8")).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                assert f'<span class="nf">{node.name}</span>' in page or \
                    f'<span class="nc">{node.name}</span>' in page, (exercise.name, node.name)
                first = ast.get_docstring(node).split("\n")[0].replace(" -- ", " — ").rstrip(".")
                assert re.sub(r"``", "", first) in text, (exercise.name, first)
        assert f'download="{exercise.name}" href="{exercise.name}"' in page
    page = html(site, "exercises/ex01_patch_embedding.html")
    assert '<meta charset="utf-8">' in page and "(B, N, C·P·P)" in page  # UTF-8, not "C路P路P"
    assert "&amp;#" not in page and "NotImplementedError" in page


def test_links_to_an_exercise_file_go_to_its_page(site):
    home = html(site, "index.html")
    for exercise in EXERCISES:
        assert f'href="exercises/{exercise.stem}.html"' in home
        assert f'href="exercises/{exercise.name}"' not in home
    notebook = html(site, "notebooks/01_patch_embedding.html")
    assert 'href="../exercises/ex01_patch_embedding.html"' in notebook
    assert 'href="../exercises/ex01_patch_embedding.py"' not in notebook


def test_home_page_exercise_steps_are_one_list(site):
    """README.md's numbered steps hold a code block and a bullet list: both stay inside."""
    home = html(site, "index.html")
    steps = home[home.index("<ol>", home.index('id="exercises"')):]
    steps = steps[:steps.index("</ol>")]
    assert steps.count("<li>") == 5  # three steps, two bullets under the third
    assert 'class="highlight"' in steps and "<strong>No Python loops</strong>" in steps
    assert "python -m exercises.check 02" in unescape(re.sub(r"<[^>]+>", "", steps))
    assert "* <strong>" not in home and "** No Python" not in home



# --- in Chromium ----------------------------------------------------------------------------------

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="the browser checks need Debian's chromium package (apt-get install "
                             "chromium; .ci/run installs it where it can): not installed here")
TABS = 2  # pages rendered at once: CI has two cores
PAGE_SECONDS = 90  # one page, from navigation to the end of MathJax's typesetting
# The one console error a page may show: MathJax 2 tests whether a web font is available by
# loading one from about:blank, which Chromium refuses and logs (the refusal, and the failed
# load). It is harmless: the fonts themselves load from the site.
KNOWN_CONSOLE_ERROR = re.compile(r"Access to font at 'about:blank'|"
                                 r"^Failed to load resource: net::ERR_FAILED about:blank$")


class Chromium:
    """Headless Chromium driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``:
    the browser reads commands on its fd 3 and answers on fd 4, each message a JSON text ended by
    a NUL byte). One browser, one tab per page; thread-safe."""

    def __init__(self, width: int = 1280, height: int = 900):
        commands, self._to_browser = os.pipe()
        self._from_browser, answers = os.pipe()
        # the browser's ends, moved above 2 digits: bash puts them at fds 3 and 4 and closes these
        ends = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in (commands, answers)]
        for fd in (commands, answers):
            os.close(fd)
        self.profile = tempfile.TemporaryDirectory(prefix="chromium-")
        # --no-sandbox: Chromium's sandbox cannot start as root, which CI runs as
        flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                 "--remote-debugging-pipe", f"--user-data-dir={self.profile.name}",
                 "--no-first-run", "--no-default-browser-check", "--disable-extensions",
                 "--disable-background-networking", "--disable-background-timer-throttling",
                 "--disable-renderer-backgrounding", "--disable-backgrounding-occluded-windows",
                 f"--window-size={width},{height}", "about:blank"]
        script = f'exec "$0" "$@" 3<&{ends[0]} 4>&{ends[1]} {ends[0]}<&- {ends[1]}>&-'
        self.process = subprocess.Popen(["bash", "-c", script, CHROMIUM, *flags], pass_fds=ends,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for fd in ends:
            os.close(fd)
        self._ids = itertools.count(1)
        self._answers: dict[int, queue.Queue] = {}
        self._events: dict[str, queue.Queue] = {}
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        buffer = b""
        while chunk := os.read(self._from_browser, 1 << 16):
            buffer += chunk
            *messages, buffer = buffer.split(b"\0")
            for message in map(json.loads, messages):
                if "id" in message:
                    self._answers.pop(message["id"]).put(message)
                elif message.get("sessionId") in self._events:
                    self._events[message["sessionId"]].put(message)

    def send(self, method: str, session: str | None = None, timeout: float = 60, **params):
        number, answer = next(self._ids), queue.Queue()
        self._answers[number] = answer
        message = {"id": number, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        with self._lock:
            os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        reply = answer.get(timeout=timeout)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply["result"]

    def open(self, url: str, dark: bool = False, **metrics) -> tuple[str, str, queue.Queue, dict]:
        """A new tab at ``url`` (optionally with ``Emulation.setDeviceMetricsOverride``'s
        ``metrics``; ``dark``: a reader whose system prefers dark colours), once its load event
        fired: (target, session, its events, what went wrong: failed requests and console
        errors)."""
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        session = self.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        events = self._events[session] = queue.Queue()
        if metrics:
            self.send("Emulation.setDeviceMetricsOverride", session, **metrics)
        if dark:
            self.send("Emulation.setEmulatedMedia", session,
                      features=[{"name": "prefers-color-scheme", "value": "dark"}])
        for domain in ("Network", "Page", "Runtime", "Log"):
            self.send(f"{domain}.enable", session)
        self.send("Page.navigate", session, url=url)
        found: dict = {"failed": [], "console": [], "urls": {}}
        deadline = time.monotonic() + PAGE_SECONDS
        while not self._record(events.get(timeout=max(1, deadline - time.monotonic())), found):
            pass
        return target, session, events, found

    @staticmethod
    def _record(event: dict, found: dict) -> bool:
        """Records a failed request or a console error; True once the page's load event fired."""
        method, params = event["method"], event["params"]
        if method == "Network.requestWillBeSent":
            found["urls"][params["requestId"]] = params["request"]["url"]
        elif method == "Network.responseReceived" and params["response"]["status"] >= 400:
            found["failed"].append(f"HTTP {params['response']['status']}: "
                                   f"{params['response']['url']}")
        elif method == "Network.loadingFailed" and not params.get("canceled"):
            url = found["urls"].get(params["requestId"], "?")
            if not url.startswith(("about:", "data:")):  # MathJax's blank frame, and images
                found["failed"].append(f"{params['errorText']}: {url}")
        elif method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            found["console"].append("uncaught: " + details.get("exception", {}).get(
                "description", details.get("text", "?")).split("\n")[0])
        elif method == "Runtime.consoleAPICalled" and params["type"] in ("error", "assert"):
            found["console"].append(f"console.{params['type']}: " + " ".join(
                str(arg.get("value", arg.get("description", ""))) for arg in params["args"]))
        elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
            entry = params["entry"]
            if not KNOWN_CONSOLE_ERROR.search(f"{entry['text']} {entry.get('url', '')}"):
                found["console"].append(f"console ({entry['source']}): {entry['text']}")
        return method == "Page.loadEventFired"

    def close_tab(self, target: str, session: str, events: queue.Queue, found: dict):
        while not events.empty():
            self._record(events.get(), found)
        self.send("Target.closeTarget", targetId=target)
        self._events.pop(session, None)

    def close(self):
        try:
            self.send("Browser.close", timeout=10)
            self.process.wait(timeout=10)
        except Exception:  # noqa: BLE001 -- already gone, or stuck: either way, end it
            self.process.kill()
            self.process.wait()
        self._reader.join(timeout=10)  # it ends when the browser's end of the pipe closes
        os.close(self._to_browser)
        os.close(self._from_browser)
        self.profile.cleanup()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    """Serves the built site; every answer of 400 or more is recorded, with the page (Referer)
    that asked for it."""

    failures: list[str]

    def log_message(self, *args):
        pass

    def log_request(self, code="-", size="-"):
        if isinstance(code, int) and code >= 400:  # an int or an HTTPStatus
            self.failures.append(f"HTTP {int(code)}: {self.path} (asked for by "
                                 f"{self.headers.get('Referer') or 'no page'})")


@pytest.fixture(scope="module")
def serve():
    """``serve(folder)`` -> (base URL, the list of failed requests it records)."""
    servers = []

    def start(folder: Path):
        handler = type("Handler", (QuietHandler,), {"failures": []})
        server = http.server.ThreadingHTTPServer(
            ("127.0.0.1", 0), functools.partial(handler, directory=str(folder)))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}/", handler.failures

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None:
        pytest.skip("no chromium")
    chromium = Chromium()
    try:
        version = chromium.send("Browser.getVersion", timeout=30)["product"]
    except queue.Empty:
        chromium.close()
        pytest.fail(f"{CHROMIUM} is installed but did not start (no answer in 30 s)")
    print(f"{CHROMIUM}: {version}")
    yield chromium
    chromium.close()


# What a page shows once MathJax (if the page loads it) has typeset everything. Text is what a
# reader sees: visible, outside code, scripts and MathJax's hidden MathML copy.
PROBE = """
new Promise(function (resolve) {
  var signals = [];
  function visibleText() {
    var skip = "script, style, pre, code, textarea, .MJX_Assistive_MathML";
    var walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT), node, parts = [];
    while ((node = walker.nextNode())) {
      var parent = node.parentElement;
      if (!parent.closest(skip) && parent.checkVisibility()) parts.push(node.data);
    }
    return parts.join("");
  }
  function shown(selector) {
    return Array.from(document.querySelectorAll(selector))
      .filter(function (e) { return e.checkVisibility(); });
  }
  function report(timedOut) {
    var text = visibleText(), errors = signals.slice();
    document.querySelectorAll(".MathJax_Error, .MathJax .merror, .MathJax .noError")
      .forEach(function (e) { errors.push("error shown: " + e.textContent.slice(0, 80)); });
    resolve({
      // a page made from a notebook offers the notebook, and shows no cell tags
      noDownload: document.querySelector(".jupyter-wrapper") !== null
        && shown('a[download][href$=".ipynb"]').length === 0,
      cellTags: shown(".celltoolbar, .cell-tag").map(function (e) { return e.textContent.trim(); }),
      timedOut: timedOut === true,
      formulas: window.MathJax && MathJax.Hub ? MathJax.Hub.getAllJax().length : 0,
      errors: errors,
      rawTex: (text.match(/.{0,30}(\\$[^$\\n]{1,80}\\$|\\\\(?:[A-Za-z]+|\\(|\\[)).{0,30}/g) || []),
      broken: Array.from(document.images)
        .filter(function (i) { return !i.complete || i.naturalWidth === 0; })
        .map(function (i) { return i.src.slice(0, 100); })
    });
  }
  setTimeout(report, 60000, true);
  if (!(window.MathJax && MathJax.Hub)) { report(); return; }
  MathJax.Hub.signal.Interest(function (message) {  // past messages too
    var name = String(message[0]);
    if (/error|undefined control sequence/i.test(name)) {
      var detail = message[2] && message[2].message ? message[2].message : message[1];
      signals.push(name + ": " + String(detail).slice(0, 120));
    }
  });
  MathJax.Hub.Register.StartupHook("End", function () { MathJax.Hub.Queue(report); });
})
"""


def page_problems(browser: Chromium, url: str) -> tuple[list[str], int]:
    """What is wrong with the page at ``url`` once its scripts ran, and how many formulas it has."""
    try:
        tab = browser.open(url)
    except queue.Empty:
        return [f"no load event in {PAGE_SECONDS} s"], 0
    try:
        answer = browser.send("Runtime.evaluate", tab[1], timeout=PAGE_SECONDS,
                              expression=PROBE, awaitPromise=True, returnByValue=True)
    except queue.Empty:
        answer = {"exceptionDetails": f"no answer in {PAGE_SECONDS} s"}
    browser.close_tab(*tab)
    problems = tab[3]["failed"] + tab[3]["console"]
    if "exceptionDetails" in answer:
        return problems + [f"the check failed: {answer['exceptionDetails']}"], 0
    found = answer["result"]["value"]
    problems += ["MathJax never finished"] * found["timedOut"] + found["errors"]
    problems += [f"TeX shown as text: {' '.join(text.split())!r}" for text in found["rawTex"]]
    problems += [f"broken image: {src}" for src in found["broken"]]
    problems += ["a notebook page without a visible download link"] * found["noDownload"]
    problems += [f"cell tags shown: {', '.join(sorted(set(found['cellTags'])))}"
                 for _ in found["cellTags"][:1]]
    return problems, found["formulas"]


def check_site(browser: Chromium, base: str, pages: list[str]) -> dict[str, tuple[list, int]]:
    with ThreadPoolExecutor(TABS) as pool:
        return dict(zip(pages, pool.map(lambda page: page_problems(browser, base + page), pages)))


def site_pages(site: Path) -> list[str]:
    return sorted(p.relative_to(site).as_posix() for p in site.rglob("*.html")
                  if "assets" not in p.relative_to(site).parts)


@needs_chromium
def test_every_page_renders_in_chromium(site, browser, serve):
    base, failed_requests = serve(site)
    pages = site_pages(site)
    start = time.monotonic()
    results = check_site(browser, base, pages)
    seconds = time.monotonic() - start
    problems = [f"{page}: {problem}" for page, (found, _) in results.items() for problem in found]
    problems += [f"server: {failure}" for failure in failed_requests]
    assert not problems, "\n".join(problems)
    formulas = {page: count for page, (_, count) in results.items()}
    assert len(pages) >= 1 + len(NOTEBOOKS) + len(EXERCISES) + len(DOCS)
    assert formulas["notebooks/06_factorized_attention.html"] > 100  # the maths was typeset
    assert formulas["docs/glossary.html"] > 3
    print(f"{len(pages)} pages, {sum(formulas.values())} formulas, {seconds:.0f} s in Chromium")


def planted_site(site: Path, folder: Path) -> dict[str, str]:
    """A copy of the site (links to its folders) with one page per kind of fault: {page: what
    the checker must report}."""
    for entry in site.iterdir():
        if entry.name not in ("notebooks", "docs"):
            (folder / entry.name).symlink_to(entry)
    (folder / "notebooks").mkdir()
    (folder / "docs").mkdir()
    notebook = html(site, "notebooks/04_layerscale.html")
    glossary = html(site, "docs/glossary.html")
    first = re.search(r'<span class="arithmatex">\\\((.*?)\\\)</span>', glossary)
    plants = {
        # a macro MathJax does not know
        "docs/macro.html": (glossary.replace(first.group(0), first.group(0).replace(
            first.group(1), r"x' = \unsupportedmacro{x}"), 1), "unsupportedmacro"),
        # the notebook with MathJax's default fonts, the TeX ones, which the served copy lacks
        # (docs/site_assets/mathjax_site.js left out): its primes fail, the font tables 404
        "notebooks/fonts.html": (notebook.replace(",Safe,site", ",Safe"),
                                 "Math Processing Error"),
        "docs/image.html": (glossary.replace("</article>", '<img src="no-such.png"></article>', 1),
                            "broken image"),
        # maths the Markdown step did not mark as maths stays TeX
        "docs/raw.html": (glossary.replace("</article>", r"<p>$x^2$ and \(y\)</p></article>", 1),
                          "TeX shown as text"),
        # a script that fails, and one that logs an error
        "docs/script.html": (glossary.replace("</article>", "<script>console.error('planted'); "
                                              "window.noSuchFunction();</script></article>", 1),
                             "uncaught: TypeError: window.noSuchFunction is not a function"),
        # a notebook page without its download link, and with its first code cell's tags shown
        "notebooks/nolink.html": (re.sub(
            r'<div class="notebook-download">.*?</div>', "", notebook.replace(
                '<div class="CodeMirror cm-s-jupyter">', '<div class="celltoolbar"><div class='
                '"button_container tags_button_container"><span class="tag-container"><span '
                'class="cell-tag">nbval-check-output</span></span></div></div>'
                '<div class="CodeMirror cm-s-jupyter">', 1), count=1, flags=re.S),
            "a notebook page without a visible download link"),
    }
    for page, (text, _) in plants.items():
        assert text != html(site, "notebooks/04_layerscale.html" if "notebooks" in page
                            else "docs/glossary.html"), page
        (folder / page).write_text(text, encoding="utf-8")
    return {page: expected for page, (_, expected) in plants.items()}


@needs_chromium
def test_checker_reports_planted_faults(site, browser, serve, tmp_path):
    expected = planted_site(site, tmp_path)
    base, failed_requests = serve(tmp_path)
    results = check_site(browser, base, sorted(expected))
    for page, kind in expected.items():
        problems = "\n".join(results[page][0])
        print(f"{page}:\n    " + problems.replace("\n", "\n    "))
        assert kind in problems, f"{page}: {kind!r} not reported:\n{problems}"
    assert "HTTP 404" in "\n".join(results["docs/image.html"][0])
    assert "console.error: planted" in results["docs/script.html"][0]
    assert "cell tags shown: nbval-check-output" in results["notebooks/nolink.html"][0]
    assert any("fonts/TeX/fontdata.js" in problem for problem in results["notebooks/fonts.html"][0])
    assert any("fontdata.js" in failure for failure in failed_requests)
    assert len(results["notebooks/fonts.html"][0]) >= 6  # the six primes of the table, at least


PHONE = {"width": 390, "height": 844, "deviceScaleFactor": 1, "mobile": True}
# (page, what to scroll to for the screenshot)
PHONE_PAGES = [("index.html", "#what-each-notebook-covers"),
               ("notebooks/04_layerscale.html", ".jp-CodeCell"),
               ("exercises/ex03_vision_transformer.html", "h2")]
LAYOUT = """
new Promise(function (resolve) {  // once the page and its style sheets have loaded, and
  var start = Date.now();         // Material's script has given the code blocks their buttons
  (function wait() {
    if ((document.readyState !== "complete" || document.querySelector("pre > code")
         && !document.querySelector("pre > .md-code__nav")) && Date.now() - start < 10000) {
      setTimeout(wait, 100); return;
    }
    resolve();
  })();
}).then(function () {  // and the tables' layout has settled (MathJax typesets after the load)
  return new Promise(function (resolve) {
    var start = Date.now();
    (function settle() {
      var width = document.documentElement.clientWidth;
      var cut = Array.from(document.querySelectorAll("table[data-layout=rows] td"))
        .some(function (td) { return td.getBoundingClientRect().right > width + 1; });
      if (cut && Date.now() - start < 10000) { setTimeout(settle, 200); return; }
      resolve();
    })();
  });
}).then(function () {
  var selector = %s;
  var width = document.documentElement.clientWidth;
  var cut = Array.from(document.querySelectorAll("table[data-layout=rows] td"))
    .filter(function (td) { return td.getBoundingClientRect().right > width + 1; }).length;
  var code = Array.from(document.querySelectorAll(".jp-CodeCell")).map(function (cell) {
    var editor = cell.querySelector(".jp-InputArea-editor");
    return editor.getBoundingClientRect().width / cell.getBoundingClientRect().width;
  });
  // copy buttons (Material's on code blocks, mkdocs-jupyter's on code cells) drawn over the
  // visible text of the code they copy
  function overlap(a, b) {
    return a.left < b.right - 1 && b.left < a.right - 1 && a.top < b.bottom - 1 && b.top < a.bottom - 1;
  }
  var buttons = document.querySelectorAll("pre > .md-code__nav, .jupyter-wrapper .zeroclipboard-container");
  var covering = Array.from(buttons).filter(function (button) {
    var code = button.closest("pre, .jp-InputArea-editor").querySelector("code, pre");
    var box = button.getBoundingClientRect(), view = code.getBoundingClientRect();
    var range = document.createRange();
    range.selectNodeContents(code);
    return Array.from(range.getClientRects()).some(function (line) {
      return line.left < view.right && line.right > view.left && overlap(box, line);
    });
  }).map(function (button) {
    return button.closest("pre, .jp-InputArea-editor").textContent.trim().slice(0, 60);
  });
  document.querySelector(selector).scrollIntoView();
  window.scrollBy(0, -60);
  return {pageWidth: document.documentElement.scrollWidth, width: width, cutCells: cut,
          narrowestCode: code.length ? Math.min.apply(null, code) : 1,
          rowTables: document.querySelectorAll("table[data-layout=rows]").length,
          copyButtons: buttons.length, covering: covering};
})
"""


@needs_chromium
def test_pages_fit_a_phone(site, browser, serve, tmp_path):
    """At 390 px: no page wider than the screen, code cells across the whole width (not beside an
    "In [n]:" column), no copy button over the code it copies, tables of prose one row at a time
    with nothing cut off."""
    base, _ = serve(site)
    for page, selector in PHONE_PAGES:
        tab = browser.open(base + page, **PHONE)
        layout = browser.send("Runtime.evaluate", tab[1], returnByValue=True, awaitPromise=True,
                              expression=LAYOUT % json.dumps(selector))["result"]["value"]
        time.sleep(0.3)  # let the scroll settle
        shot = tmp_path / (page.replace("/", "_").replace(".html", "") + "-390px.png")
        shot.write_bytes(base64.b64decode(
            browser.send("Page.captureScreenshot", tab[1], format="png")["data"]))
        browser.close_tab(*tab)
        print(f"screenshot of {page} at 390 px: {shot}")
        assert layout["pageWidth"] <= layout["width"], (page, layout)
        assert layout["cutCells"] == 0, (page, layout)
        assert layout["narrowestCode"] > 0.9, (page, layout)
        assert layout["copyButtons"] > 0 and not layout["covering"], (page, layout)
        assert shot.stat().st_size > 10_000
    assert "data-layout" in html(site, "index.html")


# In the dark palette: the contrast (WCAG's ratio of relative luminances) of every piece of text of
# the notebooks' outputs and of the download link, against the colour behind it
CONTRAST = """
new Promise(function (resolve) {  // once the palette that follows the system is applied
  var start = Date.now();
  (function wait() {
    if (document.body.dataset.mdColorScheme !== "slate" && Date.now() - start < 10000) {
      setTimeout(wait, 100); return;
    }
    setTimeout(resolve, 600);  // Material's colour transitions
  })();
}).then(function () {
  function rgba(text) {
    var m = text.match(/rgba?\\(([^)]+)\\)/), p = m ? m[1].split(/[ ,\\/]+/).map(Number) : [0, 0, 0, 0];
    return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1];
  }
  function over(top, bottom) {
    return [0, 1, 2].map(function (i) { return top[i] * top[3] + bottom[i] * (1 - top[3]); }).concat(1);
  }
  function behind(element) {  // the backgrounds down to the first opaque one, composited
    var layers = [];
    for (var e = element; e; e = e.parentElement) {
      var colour = rgba(getComputedStyle(e).backgroundColor);
      if (colour[3] > 0) layers.push(colour);
      if (colour[3] >= 1) break;
    }
    return layers.reduceRight(function (below, layer) { return over(layer, below); }, [255, 255, 255, 1]);
  }
  function luminance(c) {
    var v = c.slice(0, 3).map(function (x) {
      x /= 255; return x <= 0.03928 ? x / 12.92 : Math.pow((x + 0.055) / 1.055, 2.4);
    });
    return 0.2126 * v[0] + 0.7152 * v[1] + 0.0722 * v[2];
  }
  var texts = document.querySelectorAll(
    ".jupyter-wrapper .jp-OutputArea-output, .jupyter-wrapper .jp-OutputArea-output *, .notebook-download a");
  var checked = 0, faint = [];
  texts.forEach(function (e) {
    var own = Array.from(e.childNodes).some(function (n) { return n.nodeType === 3 && n.data.trim(); });
    if (!own || !e.checkVisibility() || e.closest(".MathJax, .MathJax_Display, svg")) return;
    var back = behind(e), text = over(rgba(getComputedStyle(e).color), back);
    var a = luminance(text), b = luminance(back);
    var ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
    checked++;
    if (ratio < 4.5) faint.push(ratio.toFixed(1) + ": " + e.textContent.trim().slice(0, 50));
  });
  var scheme = document.body.dataset.mdColorScheme;
  var toggle = document.querySelector('form[data-md-component="palette"] label[title="Switch to light mode"]');
  if (toggle) toggle.click();
  var afterToggle = document.body.dataset.mdColorScheme;
  localStorage.clear();  // the reader's choice, which Material keeps: not for the next tab
  return {scheme: scheme, checked: checked, faint: faint, afterToggle: afterToggle};
})
"""


@needs_chromium
def test_dark_palette_keeps_notebook_outputs_readable(site, browser, serve, tmp_path):
    """A reader whose system prefers dark colours gets the dark palette, and the header's toggle
    switches to light. In the dark, a notebook's printed output, its Markdown tables and the
    download link keep a contrast of at least 4.5:1 (WCAG AA) against what is behind them; a
    planted page whose printed output is dark grey proves the check sees faint text."""
    for entry in site.iterdir():
        if entry.name != "notebooks":
            (tmp_path / entry.name).symlink_to(entry)
    (tmp_path / "notebooks").mkdir()
    page = html(site, "notebooks/09_capstone.html")
    faint = page.replace("</article>", "<style>.jupyter-wrapper .jp-OutputArea-output pre "
                         "{color: #333 !important}</style></article>", 1)
    assert faint != page
    (tmp_path / "notebooks" / "faint.html").write_text(faint, encoding="utf-8")
    # two servers, two origins: the palette a tab's toggle stores is not the other tab's
    pages = {"09_capstone": serve(site)[0] + "notebooks/09_capstone.html",
             "faint": serve(tmp_path)[0] + "notebooks/faint.html"}

    def in_the_dark(name: str) -> dict:
        tab = browser.open(pages[name], dark=True)
        answer = browser.send("Runtime.evaluate", tab[1], returnByValue=True, awaitPromise=True,
                              expression=CONTRAST)["result"]["value"]
        browser.close_tab(*tab)
        print(f"{name} in the dark palette: {answer['checked']} pieces of output text, "
              f"{len(answer['faint'])} fainter than 4.5:1")
        return answer

    with ThreadPoolExecutor(TABS) as pool:
        found = dict(zip(pages, pool.map(in_the_dark, pages)))
    real = found["09_capstone"]
    assert real["scheme"] == "slate" and real["afterToggle"] == "default", real
    assert real["checked"] > 50 and not real["faint"], real
    assert found["faint"]["scheme"] == "slate" and len(found["faint"]["faint"]) > 5, found["faint"]
