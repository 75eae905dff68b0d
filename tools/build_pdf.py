"""A PDF of the whole course, printed from the built site by Debian's Chromium.

    python tools/build_pdf.py                      # _build/html -> _build/pdf/transformers-executed.pdf
    python tools/build_pdf.py --with-solutions     # keep the exercises' solutions (expanded)
    python tools/build_pdf.py --site DIR --out FILE

Run it after the README's build command (``jupyter-book build .``), which executes every chapter
and writes ``_build/html``. Every page of the table of contents (``_toc.yml``), in reading order,
is opened from a local web server in Chromium (``$CHROMIUM``, else Debian's ``/usr/bin/chromium``;
``apt-get install -y chromium``; no downloaded browser), with the light theme, after its images
have loaded and the vendored MathJax has typeset every formula (so the math is rendered, offline),
and printed to PDF with the theme's print stylesheet (no sidebars or buttons). A cover page
(title, edition, licences, contents) comes first; the parts are joined with pypdf, with one
bookmark per chapter and the document's metadata (title, edition, licence).

The exercises' solutions are folded away on the site; a PDF cannot unfold them, so by default they
are left out (like the student site) and the cover says so; ``--with-solutions`` prints them open.

The deploy workflow publishes the PDF beside the site, at ``<site>/transformers-executed.pdf``;
``tests/test_pdf.py`` builds it and checks the page count, every chapter's title and the figures.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import html
import http.server
import json
import os
import re
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
from transformer_course.course.ipynb import toc_files  # noqa: E402

SITE = ROOT / "_build" / "html"
OUT = ROOT / "_build" / "pdf" / "transformers-executed.pdf"
PDF_NAME = "transformers-executed.pdf"
DEBIAN_CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
TITLE = "Transformers, Executed"
AUTHOR = "The Transformers, Executed team"
LICENCE = "Text and figures: CC BY 4.0 (LICENSE-CONTENT.md). Code: MIT (LICENSE)."
MARGINS = {"top": "16mm", "bottom": "16mm", "left": "14mm", "right": "14mm"}
VERSION_LINE = re.compile(r'^__version__ = "(?P<version>[^"]+)"$', re.MULTILINE)

# Run in each page before printing: light theme, solutions out (or open), images eager and loaded,
# MathJax done; returns the title and the number of figures the printed page shows.
PREPARE_JS = """async (withSolutions) => {
  document.documentElement.dataset.theme = "light";
  for (const solution of document.querySelectorAll(".solution")) {
    if (withSolutions) {
      solution.classList.remove("toggle-hidden");
      solution.querySelectorAll(".toggle-hidden").forEach(el => el.classList.remove("toggle-hidden"));
      solution.querySelectorAll("button.toggle-button").forEach(el => el.remove());
    } else {
      solution.remove();
    }
  }
  document.querySelectorAll("details").forEach(d => { d.open = true; });
  const images = Array.from(document.querySelectorAll(".bd-article img"));
  for (const img of images) { img.loading = "eager"; }
  await Promise.all(images.map(img => img.complete ? null :
      new Promise(done => { img.addEventListener("load", done); img.addEventListener("error", done);
                            setTimeout(done, 15000); })));
  if (window.MathJax && window.MathJax.startup && window.MathJax.startup.promise) {
    await window.MathJax.startup.promise;
  }
  const h1 = document.querySelector(".bd-article h1");
  const title = h1 ? h1.textContent.replace(/[#\\u00b6]\\s*$/, "").trim() : document.title;
  return {
    title: title,
    figures: images.filter(img => img.naturalWidth > 0 && !img.src.endsWith(".svg")).length,
    brokenImages: images.filter(img => img.naturalWidth === 0).map(img => img.getAttribute("src")),
    mathErrors: document.querySelectorAll("mjx-merror").length,
    untypeset: Array.from(document.querySelectorAll(".math")).filter(el => !el.querySelector("mjx-container")).length,
  };
}"""

FOOTER = ('<div style="font-size:8px; width:100%; padding:0 14mm; color:#555; display:flex; '
          'justify-content:space-between;"><span>{title}</span>'
          '<span><span class="pageNumber"></span> / <span class="totalPages"></span></span></div>')


@dataclass
class Part:
    """One printed page of the site: its title, where it starts in the PDF, and its figures."""
    page: str
    title: str
    first_page: int
    pages: int
    figures: int


class BuildError(RuntimeError):
    """The PDF could not be built (no site, no browser, a page that did not render)."""


def package_version() -> str:
    match = VERSION_LINE.search((ROOT / "src" / "transformer_course" / "__init__.py").read_text())
    if match is None:
        raise BuildError("no __version__ in src/transformer_course/__init__.py")
    return match["version"]


def site_pages(site: Path, toc: Path = ROOT / "_toc.yml") -> list[str]:
    """The site's pages in reading order: the root, then every ``file:`` of ``_toc.yml``."""
    import yaml

    root = yaml.safe_load(toc.read_text(encoding="utf-8"))["root"]
    pages = [f"{entry}.html" for entry in [root, *toc_files(toc)]]
    missing = [page for page in pages if not (site / page).is_file()]
    if missing:
        raise BuildError(f"{site} lacks {missing}: build the site first (the README's build command, "
                         "jupyter-book build .)")
    return pages


def find_chromium() -> Path:
    chromium = Path(os.environ["CHROMIUM"]) if os.environ.get("CHROMIUM") else DEBIAN_CHROMIUM
    if not chromium.exists():
        raise BuildError(f"no Chromium at {chromium}: apt-get install -y chromium (Debian), or set CHROMIUM")
    return chromium


def cover_html(version: str, titles: list[str], with_solutions: bool) -> str:
    contents = "".join(f"<li>{html.escape(t)}</li>" for t in titles)
    solutions = ("The exercises' solutions are printed after each exercise." if with_solutions else
                 "The exercises' solutions are left out of this PDF; the site shows them in dropdowns.")
    return f"""<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{TITLE}</title>
<style>body {{ font-family: sans-serif; margin: 0 10mm; color: #111; }} h1 {{ font-size: 30pt; margin-top: 50mm; }}
p, li {{ font-size: 11pt; line-height: 1.5; }} .small {{ font-size: 9.5pt; color: #333; }}</style></head>
<body><h1>{TITLE}</h1>
<p>An open course on the Transformer architecture, in notebooks that run.</p>
<p>Edition {html.escape(version)} &middot; printed {datetime.date.today().isoformat()} from the built site
(every output produced by executing the chapter).</p>
<h2>Contents</h2><ol>{contents}</ol>
<p class="small">{html.escape(solutions)}</p>
<p class="small">&copy; 2026 {AUTHOR}. {html.escape(LICENCE)}
How to cite: CITATION.cff in the repository, https://github.com/transformers-executed/transformers-executed.</p>
</body></html>"""


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


def build(site: Path = SITE, out: Path = OUT, with_solutions: bool = False,
          chromium: Path | None = None) -> list[Part]:
    """Print every page of ``site`` and join them into ``out``; return where each part starts."""
    from playwright.sync_api import sync_playwright
    from pypdf import PdfReader, PdfWriter

    site = Path(site).resolve()
    pages = site_pages(site)
    chromium = chromium or find_chromium()
    version = package_version()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    printed: list[tuple[str, dict, bytes]] = []
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=str(chromium), args=CHROMIUM_ARGS)
            context = browser.new_context(viewport={"width": 1024, "height": 900})
            context.add_init_script("localStorage.setItem('mode', 'light'); localStorage.setItem('theme', 'light');")
            context.route("**/*", lambda route, request: route.continue_() if request.url.startswith(
                (base, "data:", "blob:", "about:")) else route.abort())  # nothing leaves the machine
            for page_path in pages:
                page = context.new_page()
                page.goto(base + page_path, wait_until="load", timeout=120_000)
                page.emulate_media(media="print")
                info = page.evaluate(PREPARE_JS, with_solutions)
                if info["brokenImages"] or info["mathErrors"] or info["untypeset"]:
                    raise BuildError(f"{page_path} did not render: {info}")
                page.wait_for_timeout(100)
                pdf = page.pdf(format="A4", print_background=True, margin=MARGINS, display_header_footer=True,
                               header_template="<span></span>",
                               footer_template=FOOTER.format(title=html.escape(info["title"])))
                printed.append((page_path, info, pdf))
                page.close()
            cover = context.new_page()
            cover.set_content(cover_html(version, [info["title"] for _, info, _ in printed], with_solutions))
            cover_pdf = cover.pdf(format="A4", margin=MARGINS)
            cover.close()
            browser.close()
    finally:
        server.shutdown()
        server.server_close()

    writer = PdfWriter()
    with tempfile.TemporaryDirectory() as folder:
        def append(data: bytes, name: str) -> int:
            path = Path(folder, name)
            path.write_bytes(data)
            start = len(writer.pages)
            writer.append(PdfReader(path))
            return start

        append(cover_pdf, "cover.pdf")
        parts = []
        for index, (page_path, info, pdf) in enumerate(printed):
            start = append(pdf, f"{index:02d}.pdf")
            parts.append(Part(page_path, info["title"], start, len(writer.pages) - start, info["figures"]))
            writer.add_outline_item(title=info["title"], page_number=start)
        writer.add_metadata({"/Title": f"{TITLE} (edition {version})", "/Author": AUTHOR,
                             "/Subject": "An open course on the Transformer architecture. " + LICENCE,
                             "/Keywords": "transformer, attention, deep learning, PyTorch, course"})
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        with open(out, "wb") as handle:
            writer.write(handle)
    out.with_suffix(".json").write_text(json.dumps([asdict(p) for p in parts], indent=1) + "\n")
    return parts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[1:]))
    parser.add_argument("--site", type=Path, default=SITE, help="the built site (default: _build/html)")
    parser.add_argument("--out", type=Path, default=OUT, help=f"the PDF to write (default: {OUT.relative_to(ROOT)})")
    parser.add_argument("--with-solutions", action="store_true", help="print the exercises' solutions, open")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    try:
        parts = build(args.site, args.out, args.with_solutions)
    except BuildError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    total = parts[-1].first_page + parts[-1].pages
    print(f"wrote {args.out} ({total} pages, {len(parts)} chapters and pages, "
          f"{sum(p.figures for p in parts)} figures) in {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
