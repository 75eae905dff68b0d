"""The built site, checked page by page in a real browser (Debian's Chromium, driven by Playwright).

The site in ``_build/html`` (built first if it is missing) is served on 127.0.0.1 and every page is
opened twice, in the light and in the dark theme, with every request that leaves 127.0.0.1
blocked and recorded. The checks:

* every page loads, and every request it makes is local and succeeds (MathJax is served from the
  site itself, so nothing goes to a CDN);
* every image has loaded (``naturalWidth > 0``), carries a non-empty ``alt`` text, and every
  figure of a notebook output is opaque, so it stays readable in the dark theme;
* MathJax typesets every formula (each ``.math`` element holds an ``mjx-container``) with no
  ``mjx-merror``;
* the console shows no error, except two known ones that are not the course's: Sphinx 7 declaring
  ``THEBE_JS_URL`` twice, and the theme resetting an unset colour mode on a first visit;
* every internal link resolves, anchors included;
* every chapter page has a Colab launch link to its student edition (``student/<chapter>.ipynb``
  in the configured repository, which exists here and holds no solution or hidden test) and
  download links to the same student ``.ipynb`` and to its ``.md`` twin;
* pages read well: every page, at a phone's 390 px and a desktop's 1280 px, in both themes, is
  no wider than the window (long code wraps, wide tables and formulas scroll in their own box); no
  page shows more than one stderr block; every figure of a notebook output has at least 2 image
  pixels per displayed pixel (sharp on HiDPI screens) and shows its smallest text (which the PNG
  records) at least 9 px tall; a box that scrolls sideways fades its
  hidden edge (``_static/course.js``); no exercise shows a literal code fence
  (its body is Markdown); every page has a favicon;
* accessibility: axe-core (vendored in ``tests/vendor/axe-core``, injected into each page, so no
  network) audits every page in both themes against its default rules (WCAG 2.0-2.2 A and AA and
  best practices); any violation of impact "serious" or "critical" fails the test, and every
  violation, of any impact, is counted in the failure message;
* every page's footer names the edition and the licences (text and figures CC BY 4.0, code MIT).

A screenshot of each page in each theme is saved under ``artifacts/screenshots/`` (gitignored) for
a person to look at: the first screen of the page, or with ``SITE_SCREENSHOTS=full`` (as the deploy
workflow sets it) the full page, which costs about 3 s a chapter page and view, a third of the test. The browser is ``$CHROMIUM`` if set, else Debian's Chromium
(``/usr/bin/chromium``), else the Chromium that ``playwright install chromium`` downloaded. With
none of them the test is skipped with one line saying how to enable it, except where the
environment variable ``CI`` is set: there a missing browser fails the run. ``COURSE_SITE_HTML`` may
point the test at another built site.
"""

from __future__ import annotations

import functools
import html.parser
import http.server
import os
import re
import shutil
import subprocess
import sys
import threading
import urllib.parse
from pathlib import Path

import pytest
import yaml
from PIL import Image

from transformer_course.course.notebook import TEXT_SIZE_KEY

ROOT = Path(__file__).resolve().parent.parent
SITE = Path(os.environ.get("COURSE_SITE_HTML", ROOT / "_build" / "html")).resolve()
DEBIAN_CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
ARTIFACTS = ROOT / "artifacts" / "screenshots"
FULL_PAGE_SCREENSHOTS = os.environ.get("SITE_SCREENSHOTS", "") == "full"
pytestmark = pytest.mark.browser
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
THEMES = ("light", "dark")
PHONE = 390  # px: the narrowest window every page must fit (an iPhone 12-15 in portrait)
PHONE_THEMES = tuple(f"{theme}@{PHONE}" for theme in THEMES)
MIN_PIXEL_DENSITY = 2.0  # image pixels per displayed CSS pixel of every output figure
MIN_TEXT_PX = 9  # the smallest text of a figure, in CSS pixels where the desktop page shows it
AXE = ROOT / "tests" / "vendor" / "axe-core" / "axe.min.js"
AXE_VERSION = "4.14.1"
AXE_FAILING_IMPACTS = ("serious", "critical")
# axe-core's verdicts: every violation of its default rules, with its impact and up to 3 elements.
AXE_JS = """async () => {
  const result = await axe.run(document, {resultTypes: ["violations"]});
  return {version: axe.version, violations: result.violations.map(v => ({
    id: v.id, impact: v.impact, help: v.help, count: v.nodes.length,
    nodes: v.nodes.slice(0, 3).map(n => n.target.join(" "))}))};
}"""

# Console errors that are not the course's and that we cannot fix from the book's configuration.
ALLOWED_CONSOLE_ERRORS = [
    # Sphinx 7 + sphinx-thebe emit the same inline <script>const THEBE_JS_URL = ...</script> twice.
    re.compile(r"Identifier 'THEBE_JS_URL' has already been declared"),
]

# Run in the page once it has loaded: lazy images made eager and awaited, MathJax awaited.
SETTLE_JS = """async () => {
  const images = Array.from(document.images);
  for (const img of images) { img.loading = "eager"; }
  await Promise.all(images.map(img => img.complete ? null :
      new Promise(done => { img.addEventListener("load", done); img.addEventListener("error", done);
                            setTimeout(done, 10000); })));
  if (window.MathJax && window.MathJax.startup && window.MathJax.startup.promise) {
    await window.MathJax.startup.promise;
  }
  return true;
}"""

INSPECT_JS = """() => {
  const images = Array.from(document.images).map(img => {
    let opaque = null;
    if (img.closest(".cell_output") && img.naturalWidth > 0) {
      try {  // same origin, so the pixels are readable: are the figure's corners opaque?
        const canvas = document.createElement("canvas");
        canvas.width = img.naturalWidth; canvas.height = img.naturalHeight;
        const ctx = canvas.getContext("2d");
        ctx.drawImage(img, 0, 0);
        const w = img.naturalWidth - 1, h = img.naturalHeight - 1;
        opaque = [[0, 0], [w, 0], [0, h], [w, h]].every(
            ([x, y]) => ctx.getImageData(x, y, 1, 1).data[3] === 255);
      } catch (e) { opaque = "unreadable: " + e; }
    }
    return {src: img.getAttribute("src"), alt: (img.getAttribute("alt") || "").trim(),
            complete: img.complete, naturalWidth: img.naturalWidth, opaque: opaque,
            output: !!img.closest(".cell_output"), displayedWidth: img.getBoundingClientRect().width};
  });
  // What sticks out of the window without a scrolling box of its own to hold it.
  const viewport = document.documentElement.clientWidth;
  const clipped = el => {
    for (let a = el.parentElement; a; a = a.parentElement) {
      const style = getComputedStyle(a);
      if (["auto", "scroll", "hidden", "clip"].includes(style.overflowX) &&
          a.getBoundingClientRect().right <= viewport + 1) return true;
    }
    return false;
  };
  const wide = Array.from(document.querySelectorAll(".bd-main *"))
    .filter(el => el.getBoundingClientRect().right > viewport + 1 && !clipped(el))
    .slice(0, 5)
    .map(el => `${el.tagName.toLowerCase()}.${Array.from(el.classList).join(".")}: ` +
               `${Math.round(el.getBoundingClientRect().right)} px: ${(el.textContent || "").trim().slice(0, 60)}`);
  const math = Array.from(document.querySelectorAll(".math"));
  return {
    theme: document.documentElement.dataset.theme || "",
    title: document.title,
    images: images,
    mathTotal: math.length,
    mathUntypeset: math.filter(el => !el.querySelector("mjx-container"))
                       .map(el => el.textContent.slice(0, 80)),
    mathErrors: document.querySelectorAll("mjx-merror").length,
    figureReprs: Array.from(document.querySelectorAll(".cell_output pre, .cell_output .output"))
                      .map(el => el.textContent)
                      .filter(text => /<Figure size \\d+x\\d+ with \\d+ Axes>/.test(text))
                      .map(text => text.trim().slice(0, 80)),
    mathjaxLoaded: !!(window.MathJax && window.MathJax.startup),
    links: Array.from(document.querySelectorAll("a[href]")).map(a => a.href),
    viewport: viewport,
    pageWidth: document.documentElement.scrollWidth,
    wide: wide,
    stderrBlocks: document.querySelectorAll(".cell_output .output.stderr").length,
    exerciseBodies: Array.from(document.querySelectorAll(".exercise")).map(el => el.textContent),
    favicon: (document.querySelector("link[rel~='icon']") || {}).href || null,
    printButtons: document.querySelectorAll("[onclick*='print()']").length,
    footer: (document.querySelector("footer.bd-footer-content") || {}).textContent || "",
    // Boxes that scroll sideways (course.css) but show no cue (course.js's faded edge).
    uncued: Array.from(document.querySelectorAll(
        ".pst-scrollable-table-container, .cell_output .output, div.math, mjx-container[display='true']"))
      .filter(box => box.scrollWidth - box.clientWidth > 1 && box.scrollLeft === 0 &&
                     !box.classList.contains("scroll-more-right"))
      .map(box => `${box.tagName.toLowerCase()}.${Array.from(box.classList).join(".")}: ` +
                  `${(box.textContent || "").trim().slice(0, 60)}`),
    cued: document.querySelectorAll(".scroll-more-right").length,
  };
}"""


def _build_site_if_missing() -> None:
    """Build ``_build/html`` once; the browser, link and PDF tests share it (a lock keeps two
    pytest-xdist workers from building it at the same time)."""
    import fcntl

    if (SITE / "index.html").exists():
        return
    if SITE != (ROOT / "_build" / "html").resolve():
        pytest.fail(f"COURSE_SITE_HTML={SITE} has no index.html")
    (ROOT / "_build").mkdir(exist_ok=True)
    with open(ROOT / "_build" / ".site-build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (SITE / "index.html").exists():  # another worker built it while this one waited
            return
        command = [sys.executable, "-m", "jupyter_book.cli.main", "build", ".", "-W", "-n", "--keep-going"]
        jupyter_book = shutil.which("jupyter-book", path=str(Path(sys.executable).parent))
        if jupyter_book:
            command = [jupyter_book, "build", ".", "-W", "-n", "--keep-going"]
        result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=3600)
        if result.returncode != 0 or not (SITE / "index.html").exists():
            pytest.fail(f"building the book failed (exit {result.returncode}):\n{result.stdout[-4000:]}\n"
                        f"{result.stderr[-4000:]}")


def _pages() -> list[str]:
    """Every HTML page of the site, relative to its root (the theme's and Sphinx's own included)."""
    return sorted(p.relative_to(SITE).as_posix() for p in SITE.rglob("*.html")
                  if not p.relative_to(SITE).parts[0].startswith(("_", ".")))


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


class _Ids(html.parser.HTMLParser):
    """Collects the id and name attributes of a page (the targets of #fragment links)."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs) -> None:
        for key, value in attrs:
            if key in ("id", "name") and value:
                self.ids.add(value)


@functools.lru_cache(maxsize=None)
def _ids_of(path: Path) -> frozenset[str]:
    parser = _Ids()
    parser.feed(path.read_text(encoding="utf-8", errors="replace"))
    return frozenset(parser.ids)


def _screenshot_name(page: str) -> str:
    return page.replace("/", "__").removesuffix(".html") + ".png"


def find_chromium() -> Path | None:
    """``$CHROMIUM``, else Debian's Chromium, else Playwright's own download; None if none exists."""
    if os.environ.get("CHROMIUM"):
        return Path(os.environ["CHROMIUM"]) if Path(os.environ["CHROMIUM"]).exists() else None
    if DEBIAN_CHROMIUM.exists():
        return DEBIAN_CHROMIUM
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        downloaded = Path(playwright.chromium.executable_path)
    return downloaded if downloaded.exists() else None


def require_chromium() -> Path:
    """The browser to drive; without one, skip (fail where ``$CI`` is set) with how to get one."""
    chromium = find_chromium()
    if chromium is None:
        how = ("no Chromium for the browser test: apt-get install -y chromium (Debian) or "
               "python -m playwright install chromium, or set CHROMIUM=/path/to/chromium")
        if os.environ.get("CI"):
            pytest.fail(f"{how} (CI is set, so a missing browser is a failure)")
        pytest.skip(how)
    return chromium


@pytest.fixture(scope="module")
def visits():
    """Open every page in both themes once; return {(page, theme): what the page showed}."""
    from playwright.sync_api import sync_playwright

    chromium = require_chromium()
    _build_site_if_missing()

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             functools.partial(_Quiet, directory=str(SITE)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    results: dict[tuple[str, str], dict] = {}
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=str(chromium), args=CHROMIUM_ARGS)
            try:
                for theme, width in [(t, 1280) for t in THEMES] + [(t, PHONE) for t in PHONE_THEMES]:
                    (ARTIFACTS / theme).mkdir(parents=True, exist_ok=True)
                    context = browser.new_context(viewport={"width": width, "height": 900})
                    if theme.startswith("dark"):
                        context.add_init_script(
                            "localStorage.setItem('mode', 'dark'); localStorage.setItem('theme', 'dark');")
                    for page_path in _pages():
                        results[(page_path, theme)] = _visit(context, base, page_path, theme)
                    context.close()
            finally:
                browser.close()
    finally:
        server.shutdown()
        server.server_close()
    results[("__base__", "")] = {"base": base}
    return results


REDIRECT = re.compile(r'<meta http-equiv="Refresh" content="0; url=([^"]+)"', re.IGNORECASE)


def _visit(context, base: str, page_path: str, theme: str) -> dict:
    redirect = REDIRECT.match((SITE / page_path).read_text(encoding="utf-8", errors="replace").strip())
    if redirect:  # Jupyter Book's index.html only redirects to the root page: check its target
        target = urllib.parse.urljoin(base + page_path, redirect.group(1))
        return {"status": 200, "theme": theme, "title": "", "images": [], "mathTotal": 0,
                "mathUntypeset": [], "mathErrors": 0, "figureReprs": [], "mathjaxLoaded": False, "links": [target],
                "console_errors": [], "external": [], "failed": [], "redirect": True, "viewport": 0,
                "pageWidth": 0, "wide": [], "stderrBlocks": 0, "exerciseBodies": [], "favicon": None,
                "printButtons": 0, "uncued": [], "cued": 0, "axe": None, "footer": ""}
    page = context.new_page()
    console_errors: list[str] = []
    external: list[str] = []
    failed: list[str] = []
    page.on("console", lambda message: message.type == "error" and console_errors.append(message.text))
    page.on("pageerror", lambda error: console_errors.append(f"uncaught: {error}"))
    page.on("requestfailed", lambda request: request.url.startswith(base) and failed.append(
        f"{request.url} ({request.failure})"))
    page.on("response", lambda response: response.status >= 400 and failed.append(
        f"{response.url} (HTTP {response.status})"))

    def route(route_, request):
        if request.url.startswith(base) or request.url.startswith(("data:", "blob:", "about:")):
            route_.continue_()
        else:  # nothing leaves the machine: a CDN request would be a bug, and is recorded
            external.append(request.url)
            route_.abort()

    page.route("**/*", route)
    response = page.goto(base + page_path, wait_until="load", timeout=60_000)
    page.evaluate(SETTLE_JS)
    page.wait_for_timeout(200)
    info = page.evaluate(INSPECT_JS)
    info["axe"] = None
    if theme in THEMES:  # the desktop width, light and dark: audit the page with axe-core
        page.add_script_tag(content=AXE.read_text(encoding="utf-8"))
        info["axe"] = page.evaluate(AXE_JS)
    page.screenshot(path=str(ARTIFACTS / theme / _screenshot_name(page_path)), full_page=FULL_PAGE_SCREENSHOTS)
    page.close()
    info.update(status=response.status if response else None, console_errors=console_errors,
                external=external, failed=failed)
    return info


def _each(visits, themes=THEMES):
    for (page, theme), info in sorted(visits.items()):
        if page != "__base__" and theme in themes:
            yield page, theme, info


def test_there_are_pages(visits):
    pages = {page for page, _, _ in _each(visits)}
    assert "index.html" in pages and "intro.html" in pages, sorted(pages)
    assert any(page.startswith("chapters/") for page in pages), sorted(pages)


def test_every_page_loads_and_requests_nothing_outside_the_site(visits):
    problems = []
    for page, theme, info in _each(visits):
        if info["status"] != 200:
            problems.append(f"{page} [{theme}]: HTTP {info['status']}")
        problems += [f"{page} [{theme}]: request outside the site (CDN?): {url}" for url in info["external"]]
        problems += [f"{page} [{theme}]: failed request {what}" for what in info["failed"]]
    assert not problems, "\n".join(problems)


def test_every_image_loads_and_has_alt_text(visits):
    problems = []
    for page, theme, info in _each(visits):
        problems += [f"{page} [{theme}]: a figure shown as text, not as an image (is an image "
                     f"formatter for matplotlib Figures registered?): {text!r}" for text in info["figureReprs"]]
        for image in info["images"]:
            if not image["complete"] or image["naturalWidth"] <= 0:
                problems.append(f"{page} [{theme}]: image did not load: {image['src']}")
            if not image["alt"]:
                problems.append(f"{page} [{theme}]: image without alt text: {image['src']}")
    assert not problems, "\n".join(problems)


def test_figures_are_opaque_so_they_read_in_the_dark_theme(visits):
    problems, seen = [], 0
    for page, theme, info in _each(visits, themes=("dark",)):
        if info.get("redirect"):
            continue
        assert info["theme"] == "dark", f"{page}: the dark theme did not apply ({info['theme']!r})"
        for image in info["images"]:
            if image["opaque"] is None:
                continue
            seen += 1
            if image["opaque"] is not True:
                problems.append(f"{page}: figure with a transparent background: {image['src']} "
                                f"({image['opaque']})")
    for page, theme, info in _each(visits, themes=("light",)):
        if info.get("redirect"):
            continue
        assert info["theme"] in ("light", ""), f"{page}: expected the light theme, got {info['theme']!r}"
    assert not problems, "\n".join(problems)


def test_mathjax_typesets_every_formula_from_the_site_itself(visits):
    problems, formulas = [], 0
    for page, theme, info in _each(visits):
        formulas += info["mathTotal"]
        if info["mathTotal"] and not info["mathjaxLoaded"]:
            problems.append(f"{page} [{theme}]: {info['mathTotal']} formulas but MathJax did not load")
        problems += [f"{page} [{theme}]: formula not typeset: {text!r}" for text in info["mathUntypeset"]]
        if info["mathErrors"]:
            problems.append(f"{page} [{theme}]: {info['mathErrors']} MathJax errors (mjx-merror)")
    assert not problems, "\n".join(problems)
    mathjax = SITE / "_static" / CONFIG["sphinx"]["config"]["mathjax_path"]
    assert mathjax.is_file(), f"the vendored MathJax is missing from the site: {mathjax}"


def test_no_console_errors(visits):
    problems = []
    for page, theme, info in _each(visits):
        for text in info["console_errors"]:
            if not any(pattern.search(text) for pattern in ALLOWED_CONSOLE_ERRORS):
                problems.append(f"{page} [{theme}]: {text[:300]}")
    assert not problems, "\n".join(problems)


def test_every_internal_link_resolves(visits):
    base = visits[("__base__", "")]["base"]
    problems, checked = [], 0
    for page, theme, info in _each(visits, themes=("light",)):
        for href in sorted(set(info["links"])):
            if not href.startswith(base):
                continue  # external links (GitHub, Colab, papers) are not fetched: no internet in CI
            parsed = urllib.parse.urlsplit(href)
            target = SITE / urllib.parse.unquote(parsed.path[1:])
            if target.is_dir():
                target = target / "index.html"
            checked += 1
            if not target.is_file():
                problems.append(f"{page}: broken link {href}")
            elif parsed.fragment and target.suffix == ".html" and \
                    urllib.parse.unquote(parsed.fragment) not in _ids_of(target):
                problems.append(f"{page}: link to a missing anchor {href}")
    assert checked, "no internal links found at all"
    assert not problems, "\n".join(problems)


def test_every_chapter_page_has_colab_and_download_links_to_its_student_edition(visits):
    from transformer_course.course.coursework import LEAK_PATTERNS

    repository = CONFIG["repository"]
    owner_repo = urllib.parse.urlsplit(repository["url"]).path.strip("/")
    book = repository.get("path_to_book", "").strip("/")
    base = visits[("__base__", "")]["base"]
    chapters = sorted(page for page, _, _ in _each(visits, themes=("light",))
                      if page.startswith("chapters/") and (ROOT / page).with_suffix(".ipynb").exists())
    assert chapters, "no chapter pages built from chapters/*.ipynb"
    problems, students = [], 0
    for page in chapters:
        links = visits[(page, "light")]["links"]
        stem = page.removesuffix(".html")
        name = Path(stem).name
        student = ROOT / "student" / f"{name}.ipynb"
        # Chapters with exercises open their student edition; the other pages their own notebook.
        source = f"student/{name}.ipynb" if student.exists() else f"{stem}.ipynb"
        source = f"{book + '/' if book else ''}{source}"
        colab = (f"https://colab.research.google.com/github/{owner_repo}/blob/{repository['branch']}/"
                 f"{source}")
        colab_links = [href for href in links if "colab.research.google.com" in href]
        if colab_links != [colab]:
            problems.append(f"{page}: Colab links {colab_links}, expected [{colab}]")
        if name.startswith("dl00") and not student.exists():
            problems.append(f"{page}: a chapter without a student edition (python tools/student_edition.py)")
        download = f"{base}_sources/student/{name}.ipynb" if student.exists() else f"{base}_sources/{stem}.ipynb"
        if download not in links:
            problems.append(f"{page}: no download link for {download}")
        if f"{base}_sources/{stem}.myst.md" not in links:
            problems.append(f"{page}: no download link for {stem}.myst.md")
        if visits[(page, "light")]["printButtons"]:
            problems.append(f"{page}: a '.pdf' entry that only opens the print dialog")
        if student.exists():
            students += 1
            text = student.read_text()
            problems += [f"{page}: its student notebook shows {pattern!r}" for pattern in LEAK_PATTERNS
                         if pattern in text]
            served = SITE / "_sources" / "student" / f"{name}.ipynb"
            if not served.is_file() or served.read_text() != text:
                problems.append(f"{page}: the site's download {served} is not student/{name}.ipynb")
    assert students >= 10, f"only {students} chapters link a student edition"
    assert not problems, "\n".join(problems)


def test_no_page_scrolls_sideways_on_a_phone_or_a_desktop(visits):
    problems, seen = [], 0
    for page, theme, info in _each(visits, themes=THEMES + PHONE_THEMES):
        if info.get("redirect"):
            continue
        seen += 1
        if info["pageWidth"] > info["viewport"] + 1:
            problems.append(f"{page} [{theme}]: {info['pageWidth']} px wide in a {info['viewport']} px "
                            f"window; sticking out: {info['wide']}")
    assert seen, "no pages visited"
    assert not problems, "\n".join(problems)


def test_boxes_that_scroll_sideways_show_a_cue(visits):
    problems, cued = [], 0
    for page, theme, info in _each(visits, themes=THEMES + PHONE_THEMES):
        cued += info["cued"]
        problems += [f"{page} [{theme}]: scrolls sideways without a cue: {box}" for box in info["uncued"]]
    assert cued, "no box scrolls sideways anywhere, not even on a phone: is course.js loaded?"
    assert not problems, "\n".join(problems)


def test_no_page_shows_more_than_one_stderr_block(visits):
    problems = [f"{page}: {info['stderrBlocks']} stderr blocks" for page, _, info in _each(visits, ("light",))
                if info["stderrBlocks"] > 1]
    assert not problems, "\n".join(problems)


def test_figures_are_sharp_and_their_text_is_at_least_9_px(visits):
    """At least 2 image pixels per displayed pixel, and the smallest text (recorded in the PNG) >= 9 px shown."""
    problems, figures = [], 0
    for page, theme, info in _each(visits, themes=("light",)):
        for image in info["images"]:
            if not image["output"] or image["src"].endswith(".svg") or image["displayedWidth"] <= 0:
                continue
            figures += 1
            density = image["naturalWidth"] / image["displayedWidth"]
            if density < MIN_PIXEL_DENSITY - 0.01:
                problems.append(f"{page}: {image['src']} has {density:.2f} image pixels per displayed pixel "
                                f"({image['naturalWidth']} px shown at {image['displayedWidth']:.0f} px)")
            png = Image.open((SITE / page).parent / urllib.parse.unquote(image["src"].split("?")[0]))
            if TEXT_SIZE_KEY not in png.info:
                problems.append(f"{page}: {image['src']} does not record its smallest text ({TEXT_SIZE_KEY})")
                continue
            text_px = float(png.info[TEXT_SIZE_KEY]) / density
            if text_px < MIN_TEXT_PX:
                problems.append(f"{page}: {image['src']} shows its smallest text at {text_px:.1f} px "
                                f"(at least {MIN_TEXT_PX} px expected)")
    assert figures, "no output figures found"
    assert not problems, "\n".join(problems)


def test_exercises_render_as_markdown(visits):
    problems, exercises = [], 0
    for page, theme, info in _each(visits, themes=THEMES):
        for body in info["exerciseBodies"]:
            exercises += 1
            if "```" in body or ":::" in body:
                problems.append(f"{page} [{theme}]: an exercise shows a literal fence: {body.strip()[:100]!r}")
    assert exercises, "no exercises found"
    assert not problems, "\n".join(problems)


def test_every_page_has_a_favicon(visits):
    base = visits[("__base__", "")]["base"]
    problems = []
    for page, theme, info in _each(visits, themes=("light",)):
        if info.get("redirect"):
            continue
        icon = info["favicon"]
        if not icon or not icon.startswith(base) or \
                not (SITE / urllib.parse.unquote(urllib.parse.urlsplit(icon).path[1:])).is_file():
            problems.append(f"{page}: favicon {icon!r} missing")
    assert not problems, "\n".join(problems)


def test_axe_core_finds_no_serious_or_critical_violation_in_either_theme(visits):
    """axe-core on every page, light and dark; all its findings are counted, serious and critical fail."""
    problems, audited, counts = [], 0, {}
    for page, theme, info in _each(visits):
        if info.get("redirect"):
            continue
        assert info["axe"] is not None, f"{page} [{theme}]: axe-core did not run"
        assert info["axe"]["version"] == AXE_VERSION, info["axe"]["version"]
        audited += 1
        for violation in info["axe"]["violations"]:
            key = f"{violation['impact']} {violation['id']}"
            counts[key] = counts.get(key, 0) + violation["count"]
            if violation["impact"] in AXE_FAILING_IMPACTS:
                problems.append(f"{page} [{theme}]: {violation['impact']} {violation['id']} "
                                f"({violation['help']}), {violation['count']} elements, e.g. {violation['nodes']}")
    assert audited >= 2 * len([p for p in _pages() if not REDIRECT.match((SITE / p).read_text().strip())]), audited
    assert not problems, "\n".join(problems) + f"\nall violations (elements, both themes): {counts}"


def test_every_page_footer_names_the_edition_and_both_licences(visits):
    import transformer_course

    problems = []
    for page, theme, info in _each(visits, themes=("light",)):
        if info.get("redirect"):
            continue
        footer = " ".join(info["footer"].split())
        for text in (f"Edition {transformer_course.__version__}", "Text and figures: CC BY 4.0", "Code: MIT",
                     "CITATION.cff"):
            if text not in footer:
                problems.append(f"{page}: the footer does not say {text!r}: {footer[:200]!r}")
    assert not problems, "\n".join(problems)
