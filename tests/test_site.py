"""The course site builds (`mkdocs build`, as the README says), and what it shows is whole:
every notebook and every exercise file has its page, every page of the navigation exists, every
internal link and image resolves, and the instructors' folders are never published.

Where Debian's `chromium` is installed, every page of the built site is also opened in it,
headless, from a local server, after its scripts ran (the DevTools protocol over a pipe, two
tabs at a time). A page fails on "[Math Processing Error]", a TeX error or an undefined macro,
TeX left as text (``$...$``, ``\\(``, ``\\frac``) outside code, a broken image, or a request that
failed (a 404 asked for by the page or by its scripts, such as MathJax's font tables). Pages
with planted faults prove the checker finds each kind; three pages are also drawn at phone
width (390 px), checked for cut-off code and tables, and kept as screenshots (paths printed).
Without Chromium those tests skip, saying why."""
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

    def open(self, url: str, **metrics) -> tuple[str, str, queue.Queue, dict]:
        """A new tab at ``url`` (optionally with ``Emulation.setDeviceMetricsOverride``'s
        ``metrics``), once its load event fired: (target, session, its events, its requests)."""
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        session = self.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        events = self._events[session] = queue.Queue()
        if metrics:
            self.send("Emulation.setDeviceMetricsOverride", session, **metrics)
        self.send("Network.enable", session)
        self.send("Page.enable", session)
        self.send("Page.navigate", session, url=url)
        requests: dict = {"failed": [], "urls": {}}
        deadline = time.monotonic() + PAGE_SECONDS
        while not self._network(events.get(timeout=max(1, deadline - time.monotonic())),
                                requests):
            pass
        return target, session, events, requests

    @staticmethod
    def _network(event: dict, requests: dict) -> bool:
        """Records a failed request; True once the page's load event fired."""
        method, params = event["method"], event["params"]
        if method == "Network.requestWillBeSent":
            requests["urls"][params["requestId"]] = params["request"]["url"]
        elif method == "Network.responseReceived" and params["response"]["status"] >= 400:
            requests["failed"].append(f"HTTP {params['response']['status']}: "
                                      f"{params['response']['url']}")
        elif method == "Network.loadingFailed" and not params.get("canceled"):
            url = requests["urls"].get(params["requestId"], "?")
            if not url.startswith(("about:", "data:")):  # MathJax's blank frame, and images
                requests["failed"].append(f"{params['errorText']}: {url}")
        return method == "Page.loadEventFired"

    def close_tab(self, target: str, session: str, events: queue.Queue, requests: dict):
        while not events.empty():
            self._network(events.get(), requests)
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
  function report(timedOut) {
    var text = visibleText(), errors = signals.slice();
    document.querySelectorAll(".MathJax_Error, .MathJax .merror, .MathJax .noError")
      .forEach(function (e) { errors.push("error shown: " + e.textContent.slice(0, 80)); });
    resolve({
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
    if "exceptionDetails" in answer:
        return tab[3]["failed"] + [f"the check failed: {answer['exceptionDetails']}"], 0
    found = answer["result"]["value"]
    problems = list(tab[3]["failed"])
    problems += ["MathJax never finished"] * found["timedOut"] + found["errors"]
    problems += [f"TeX shown as text: {' '.join(text.split())!r}" for text in found["rawTex"]]
    problems += [f"broken image: {src}" for src in found["broken"]]
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
    assert any("fonts/TeX/fontdata.js" in problem for problem in results["notebooks/fonts.html"][0])
    assert any("fontdata.js" in failure for failure in failed_requests)
    assert len(results["notebooks/fonts.html"][0]) >= 6  # the six primes of the table, at least


PHONE = {"width": 390, "height": 844, "deviceScaleFactor": 1, "mobile": True}
# (page, what to scroll to for the screenshot)
PHONE_PAGES = [("index.html", "#what-each-notebook-covers"),
               ("notebooks/04_layerscale.html", ".jp-CodeCell"),
               ("exercises/ex03_vision_transformer.html", "h2")]
LAYOUT = """
(function (selector) {
  var width = document.documentElement.clientWidth;
  var cut = Array.from(document.querySelectorAll("table[data-layout=rows] td"))
    .filter(function (td) { return td.getBoundingClientRect().right > width + 1; }).length;
  var code = Array.from(document.querySelectorAll(".jp-CodeCell")).map(function (cell) {
    var editor = cell.querySelector(".jp-InputArea-editor");
    return editor.getBoundingClientRect().width / cell.getBoundingClientRect().width;
  });
  document.querySelector(selector).scrollIntoView();
  window.scrollBy(0, -60);
  return {pageWidth: document.documentElement.scrollWidth, width: width, cutCells: cut,
          narrowestCode: code.length ? Math.min.apply(null, code) : 1,
          rowTables: document.querySelectorAll("table[data-layout=rows]").length};
})(%s)
"""


@needs_chromium
def test_pages_fit_a_phone(site, browser, serve, tmp_path):
    """At 390 px: no page wider than the screen, code cells across the whole width (not beside an
    "In [n]:" column), tables of prose one row at a time with nothing cut off."""
    base, _ = serve(site)
    for page, selector in PHONE_PAGES:
        tab = browser.open(base + page, **PHONE)
        layout = browser.send("Runtime.evaluate", tab[1], returnByValue=True,
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
        assert shot.stat().st_size > 10_000
    assert "data-layout" in html(site, "index.html")
