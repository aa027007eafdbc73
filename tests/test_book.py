"""The course book: built from the notebooks at their small parameters, read in Chromium.

Builds the book with ``docs/book/build.py --executed`` into a temporary folder from the
notebooks the tests executed once (the ``notebook_runs`` fixture of conftest.py), checks every
internal link and resource of every page (files and anchors) and that no page loads anything
from another host, then serves the HTML on a loopback port and opens the index and the primer in
Debian's Chromium through Playwright: the equations typeset by the bundled MathJax (no request
leaves 127.0.0.1), the figures loaded. Screenshots go to ``$MFGWORK_ARTIFACTS/book`` (default:
the test's temporary folder). Outside CI the test is skipped when Chromium or Playwright is
missing; in CI it fails.
"""

from __future__ import annotations

import functools
import http.server
import importlib.util
import os
import shutil
import threading
from collections.abc import Iterator
from html.parser import HTMLParser
from importlib.util import find_spec
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit

import pytest
from conftest import shared_tmp

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "book" / "guide"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--disable-dev-shm-usage"]
TYPESET_S = 30


def _require(what: str, ok: bool) -> None:
    if ok:
        return
    if os.environ.get("CI"):
        pytest.fail(f"{what} is missing in CI (.ci/run installs Debian's chromium)")
    pytest.skip(f"{what} is missing (apt-get install chromium; pip install playwright)")


def _load_builder():
    spec = importlib.util.spec_from_file_location("book_build", ROOT / "docs" / "book" /
                                                  "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


builder = _load_builder()


@pytest.fixture(scope="session")
def book(tmp_path_factory, notebook_runs) -> Path:
    """The book built from the notebooks executed by the tests: its html folder. Built once
    per test run, also when several pytest-xdist workers need it (they share the folder,
    under a lock)."""
    _require("Debian's chromium (/usr/bin/chromium)", CHROMIUM.exists())
    _require("playwright (pip install playwright)", find_spec("playwright") is not None)
    from filelock import FileLock

    shared = shared_tmp(tmp_path_factory)
    out, done, executed = shared / "book", shared / "book.built", shared / "book-notebooks"
    with FileLock(shared / "book.lock"):
        if not done.is_file():
            executed.mkdir(exist_ok=True)
            for notebook in builder.notebooks():
                shutil.copy(notebook_runs(notebook.name).notebook, executed / notebook.name)
            assert builder.build_book(out, executed=executed).is_file()
            done.touch()
    return out / "html"


def test_small_parameters_are_the_nbmake_mocks_of_the_parameters_cell():
    """``--small`` (make book BOOK_ARGS=--small) takes a notebook's mocks, else its defaults;
    each mock names a parameter of the notebook."""
    import nbformat

    from mfgwork.workflows import runs

    for notebook in builder.notebooks():
        cell, = [c for c in nbformat.read(notebook, as_version=4).cells
                 if "parameters" in c.metadata.get("tags", [])]
        mocks = cell.metadata.get("nbmake", {}).get("mock", {})
        assert builder.small_parameters(notebook) == mocks
        assert set(mocks) <= set(runs.notebook_parameters(notebook))
    mocked = [builder.small_parameters(p) for p in builder.notebooks()]
    assert {} in mocked and any(mocked)  # the explorer runs at its defaults


def test_a_notebook_that_failed_or_was_not_executed_is_refused(tmp_path):
    import nbformat

    source = ROOT / "notebooks" / "03_explorer.ipynb"
    with pytest.raises(builder.BookError, match="missing"):
        builder.take_executed(tmp_path / "03_explorer.ipynb", tmp_path / "out.ipynb")
    with pytest.raises(builder.BookError, match="not a notebook that papermill executed"):
        builder.take_executed(source, tmp_path / "out.ipynb")
    failed = nbformat.read(source, as_version=4)
    failed.metadata["papermill"] = {"exception": True}
    nbformat.write(failed, tmp_path / "failed.ipynb")
    with pytest.raises(builder.BookError, match="not a notebook that papermill executed"):
        builder.take_executed(tmp_path / "failed.ipynb", tmp_path / "out.ipynb")
    assert not (tmp_path / "out.ipynb").exists()


@pytest.fixture
def artifacts(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("MFGWORK_ARTIFACTS", tmp_path)) / "book"
    folder.mkdir(parents=True, exist_ok=True)
    print(f"book test artifacts: {folder}")
    return folder


@pytest.fixture
def server(book: Path) -> Iterator[str]:
    """The built book on a free loopback port: yields its base URL."""
    handler = functools.partial(_QuietHandler, directory=str(book))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 (the base class's signature)
        pass


class _Links(HTMLParser):
    """The href/src targets and the element ids of one HTML page."""

    def __init__(self) -> None:
        super().__init__()
        self.targets: list[tuple[str, str]] = []  # (tag, url)
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name == "id" and value:
                self.ids.add(value)
            if tag == "a" and name == "name" and value:
                self.ids.add(value)
            if name in ("href", "src") and value:
                self.targets.append((tag, value))


def _parse(page: Path) -> _Links:
    links = _Links()
    links.feed(page.read_text(encoding="utf-8"))
    return links


def test_every_notebook_has_a_page_in_the_table_of_contents(book):
    pages = {p.stem for p in (book / "notebooks").glob("*.html")}
    assert pages == {p.stem for p in builder.notebooks()}
    course = _parse(book / "course.html")
    linked = {urlsplit(url).path for tag, url in course.targets if tag == "a"}
    assert {f"notebooks/{name}.html" for name in pages} <= linked
    # the index leads to the guide, the course, the API reference and the performance page
    index = _parse(book / "index.html")
    linked = {urlsplit(url).path for tag, url in index.targets if tag == "a"}
    assert {"guide/index.html", "course.html", "api.html", "performance.html"} <= linked
    guide = {urlsplit(url).path for tag, url in _parse(book / "guide" / "index.html").targets}
    assert {f"{p.stem}.html" for p in GUIDE.glob("*.md")} - {"index.html"} <= guide
    # the README's introduction, down to its "Two commands", is the first page
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    first_sentence = readme.split("\n\n")[1].split("**")[0].strip()
    text = (book / "index.html").read_text(encoding="utf-8")
    assert len(first_sentence) > 20 and first_sentence in text
    assert "Two commands" in readme and "Two commands" not in text


def test_the_api_reference_has_a_page_for_every_public_name(book):
    import mfgwork as mw

    pages = {p.name for p in (book / "generated").glob("mfgwork.*.html")}
    assert {f"mfgwork.{name}.html" for name in mw.__all__} <= pages
    api = (book / "api.html").read_text(encoding="utf-8")
    assert all(f"generated/mfgwork.{name}.html" in api for name in mw.__all__)


def test_the_performance_page_shows_every_baseline_table(book):
    text = (book / "performance.html").read_text(encoding="utf-8")
    for section in builder.performance.SECTIONS:
        assert section.name in text
    assert text.count("<table") == len(builder.performance.SECTIONS)


def test_no_broken_internal_link_and_nothing_from_another_host(book):
    # (the theme's _static holds HTML templates, not pages)
    pages = sorted(p for p in book.rglob("*.html") if "_static" not in p.relative_to(book).parts)
    parsed = {page: _parse(page) for page in pages}
    broken, external = [], []
    for page, links in parsed.items():
        base = page.relative_to(book).as_posix()
        for tag, url in links.targets:
            parts = urlsplit(url)
            if parts.scheme in ("mailto", "data", "javascript"):
                continue
            if parts.scheme or parts.netloc:
                if tag != "a":  # scripts, styles, images, fonts: a CDN would break offline
                    external.append(f"{base}: <{tag}> {url}")
                continue
            target = urlsplit(urljoin(base, url))
            path = book / unquote(target.path) if target.path else page
            if path.is_dir():
                path = path / "index.html"
            if not path.is_file():
                broken.append(f"{base}: {url}")
            elif target.fragment and path.suffix == ".html" and \
                    unquote(target.fragment) not in parsed[path].ids:
                broken.append(f"{base}: {url} (no such anchor)")
    assert len(pages) >= 2 + len(builder.notebooks())
    assert not broken, broken
    assert not external, external


def test_index_and_primer_render_in_chromium(book, server, artifacts):
    from playwright.sync_api import sync_playwright

    foreign, failed = [], []

    def only_loopback(route):
        if route.request.url.startswith(server):
            route.continue_()
        else:
            foreign.append(route.request.url)
            route.abort()

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1300, "height": 1000})
        page.route("**/*", only_loopback)
        page.on("requestfailed", lambda request: failed.append(request.url))
        try:
            page.goto(server + "index.html", wait_until="load")
            page.screenshot(path=artifacts / "index.png", full_page=True)
            assert page.title().startswith("mfgwork")
            page.goto(server + "course.html", wait_until="load")
            toc = page.locator(".toctree-wrapper a.reference.internal")
            assert toc.count() == len(builder.notebooks())

            toc.first.click()
            page.wait_for_load_state("load")
            assert page.url == server + "notebooks/00_primer.html"
            # every equation of the page typeset by MathJax, none in error
            equations = page.locator("div.math, span.math")
            assert equations.count() >= 10
            page.wait_for_function(
                "n => document.querySelectorAll('mjx-container').length >= n",
                arg=equations.count(), timeout=TYPESET_S * 1000)
            assert page.locator("mjx-container[display='true']").count() >= 3
            assert page.locator("mjx-merror").count() == 0
            assert page.evaluate("() => window.MathJax?.version ?? ''").startswith("3.")
            # the figures of the executed notebook, inline and loaded
            images = page.locator(".cell_output img")
            assert images.count() >= 4
            for i in range(images.count()):
                images.nth(i).scroll_into_view_if_needed()
                width = images.nth(i).evaluate(
                    "el => el.complete ? el.naturalWidth : new Promise(ok => "
                    "el.addEventListener('load', () => ok(el.naturalWidth)))")
                assert width > 100, images.nth(i).get_attribute("src")
            page.screenshot(path=artifacts / "primer.png", full_page=True)
        except Exception:
            page.screenshot(path=artifacts / "failure.png", full_page=True)
            raise
        finally:
            browser.close()
    assert not foreign, f"the book asked another host for {foreign}"
    assert not failed, f"requests that failed: {failed}"


#: in the browser, per notebook page: figures shown twice in a row in one cell's outputs, and
#: output blocks of stderr or warnings (a warning in the book is a bug of the notebook).
PAGE_PROBLEMS_JS = r"""() => {
  const problems = [];
  document.querySelectorAll('.cell_output').forEach(out => {
    const srcs = [...out.querySelectorAll('img')].map(img => img.getAttribute('src'));
    srcs.forEach((src, k) => {
      if (k > 0 && src === srcs[k - 1]) problems.push('figure shown twice: ' + src);
    });
    out.querySelectorAll('.stderr, .output.stderr, .traceback').forEach(el =>
      problems.push('stderr block: ' + el.innerText.trim().slice(0, 160)));
    const warning = out.innerText.match(/[^\n]*(\b[A-Z]\w*Warning\b|\bWarning:)[^\n]*/);
    if (warning) problems.push('warning: ' + warning[0].trim().slice(0, 160));
  });
  return problems;
}"""


def _page_problems(page) -> list[str]:
    """What a reader should not see on the loaded ``page``: see :data:`PAGE_PROBLEMS_JS`."""
    return page.evaluate(PAGE_PROBLEMS_JS)


def test_no_page_shows_a_duplicated_figure_or_a_warning(book, server):
    from playwright.sync_api import sync_playwright

    found = {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1300, "height": 1000})
        try:
            for notebook in builder.notebooks():
                page.goto(f"{server}notebooks/{notebook.stem}.html", wait_until="load")
                assert page.locator(".cell_output").count() > 0, notebook.stem
                problems = _page_problems(page)
                if problems:
                    found[notebook.stem] = problems
        finally:
            browser.close()
    assert not found, found


def test_page_check_catches_a_duplicated_figure_and_a_warning():
    _require("Debian's chromium (/usr/bin/chromium)", CHROMIUM.exists())
    _require("playwright (pip install playwright)", find_spec("playwright") is not None)
    from playwright.sync_api import sync_playwright

    cell = ('<div class="cell_output docutils container">{}</div>')
    img = '<img alt="f" src="../_images/{}.png">'
    html = "".join([cell.format(img.format("a") + img.format("b")),       # two figures: fine
                    cell.format(img.format("c") + img.format("c")),       # shown twice
                    cell.format('<div class="output stderr"><pre>oops</pre></div>'),
                    cell.format("<pre>UserWarning: tol=1e-08 is below what float32</pre>")])
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.set_content(f"<html><body>{html}</body></html>")
            problems = _page_problems(page)
        finally:
            browser.close()
    assert problems == ["figure shown twice: ../_images/c.png", "stderr block: oops",
                        "warning: UserWarning: tol=1e-08 is below what float32"], problems


#: in the browser: code cells, outputs, tables and display equations that do not fit their
#: column. Each box must end inside the article's column, and content wider than its box must
#: scroll in it (overflow-x auto or scroll): clipped (hidden) or spilled (visible) fails. The
#: page itself must not scroll sideways.
FIT_JS = r"""() => {
  const problems = [];
  const column = document.querySelector('article.bd-article') || document.body;
  const right = Math.min(column.getBoundingClientRect().right,
                         document.documentElement.clientWidth);
  const scrolls = el => ['auto', 'scroll'].includes(getComputedStyle(el).overflowX);
  const inScroller = el => {
    for (let e = el.parentElement; e && e !== column; e = e.parentElement)
      if (scrolls(e)) return true;
    return false;
  };
  const selector = 'div.cell_input pre, div.cell_output pre, div.highlight pre, table, ' +
                   'div.cell_output, mjx-container[display="true"]';
  document.querySelectorAll(selector).forEach(el => {
    const box = el.getBoundingClientRect();
    if (box.width === 0 || inScroller(el)) return;
    const name = el.tagName.toLowerCase() + '.' + [...el.classList].join('.');
    const text = (el.innerText || '').trim().slice(0, 60);
    if (box.right > right + 1)
      problems.push(`${name} ends ${Math.round(box.right - right)} px past the column: ${text}`);
    if (el.scrollWidth > el.clientWidth + 1 && !scrolls(el))
      problems.push(`${name} cut off (${el.scrollWidth} px in ${el.clientWidth}): ${text}`);
  });
  const page = document.documentElement;
  if (page.scrollWidth > page.clientWidth + 1)
    problems.push(`the page scrolls sideways (${page.scrollWidth} px in ${page.clientWidth})`);
  return problems;
}"""

WIDTHS = {"desktop": 1280, "phone": 390}


def _fit_problems(page) -> list[str]:
    """What does not fit its column on the loaded ``page``: see :data:`FIT_JS`."""
    return page.evaluate(FIT_JS)


def _typeset(page) -> None:
    """Wait until MathJax has typeset every equation of the loaded page."""
    page.wait_for_function(
        "() => document.querySelectorAll('mjx-container').length >= "
        "document.querySelectorAll('div.math, span.math').length",
        timeout=TYPESET_S * 1000)


@pytest.mark.parametrize("width", WIDTHS.values(), ids=WIDTHS.keys())
def test_code_tables_and_equations_fit_at_desktop_and_phone_widths(book, server, width):
    """Every notebook page, a guide page, the API reference and the performance page: no
    code cell, table or display equation cut off or running past its column."""
    from playwright.sync_api import sync_playwright

    pages = ([f"notebooks/{p.stem}.html" for p in builder.notebooks()]
             + ["index.html", "guide/santa_fe.html", "api.html", "performance.html",
                "generated/mfgwork.solve.html"])
    found = {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": width, "height": 900})
        try:
            for name in pages:
                page.goto(server + name, wait_until="load")
                _typeset(page)
                if name == "notebooks/09_your_model.html":  # its aligned system of equations
                    assert page.locator("mjx-container[display='true']").count() >= 2
                problems = _fit_problems(page)
                if problems:
                    found[name] = problems
        finally:
            browser.close()
    assert not found, found


def test_fit_check_catches_clipped_code_and_a_table_past_the_column():
    _require("Debian's chromium (/usr/bin/chromium)", CHROMIUM.exists())
    _require("playwright (pip install playwright)", find_spec("playwright") is not None)
    from playwright.sync_api import sync_playwright

    wide = "x" * 400
    html = ('<article class="bd-article" style="width: 300px">'
            f'<div class="highlight"><pre style="overflow: hidden">{wide}</pre></div>'
            f'<div class="cell_output" style="overflow-x: auto"><pre>{wide}</pre></div>'
            f'<table style="width: 500px"><tr><td>{wide[:10]}</td></tr></table>'
            '</article>')
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 390, "height": 600})
            page.set_content(f"<html><body style='margin: 0'>{html}</body></html>")
            problems = _fit_problems(page)
        finally:
            browser.close()
    assert any(p.startswith("pre. cut off") for p in problems), problems
    assert any(p.startswith("table. ends") for p in problems), problems
    assert any(p.startswith("the page scrolls sideways") for p in problems), problems
    # the output that scrolls in its own box is fine, so is everything else
    assert len(problems) == 3, problems
