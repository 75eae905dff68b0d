"""The PDF of the course (``tools/build_pdf.py``), built from the site and opened with pypdf.

The PDF is printed from ``_build/html`` (built first if missing, like the browser test) by the same
Chromium the browser test drives, into a temporary folder. Then, reading it back:

* one part per page of ``_toc.yml``, after a cover, with one bookmark each, and the page count is
  the cover plus the parts;
* every chapter's title (the notebook's first heading) is a bookmark and is printed on the first
  page of its part;
* every figure of a chapter's outputs (the ``.png`` images of its page on the site, outside the
  solutions, which the PDF leaves out) is embedded as an image in that chapter's pages;
* the document's metadata names the edition and the licences.
"""

from __future__ import annotations

import html.parser
import importlib.util
import re
import sys
import unicodedata
from pathlib import Path

import pytest

import test_site_browser as site
from transformer_course import __version__
from transformer_course.course.ipynb import chapter_title, read_notebook

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ROOT = site.ROOT
_spec = importlib.util.spec_from_file_location("build_pdf", ROOT / "tools" / "build_pdf.py")
build_pdf = importlib.util.module_from_spec(_spec)
sys.modules["build_pdf"] = build_pdf  # its dataclass looks its module up while it is being made
_spec.loader.exec_module(build_pdf)


class _Figures(html.parser.HTMLParser):
    """Counts the PNG images inside the page's article, outside any solution block."""

    def __init__(self) -> None:
        super().__init__()
        self.depth = 0
        self.article_depth: int | None = None
        self.solution_depth: int | None = None
        self.count = 0

    def handle_starttag(self, tag, attrs) -> None:
        attrs = dict(attrs)
        classes = (attrs.get("class") or "").split()
        if tag in ("img", "br", "hr", "meta", "link", "input", "source"):
            if tag == "img" and self.article_depth is not None and self.solution_depth is None and \
                    (attrs.get("src") or "").split("?")[0].endswith(".png"):
                self.count += 1
            return
        self.depth += 1
        if "bd-article" in classes and self.article_depth is None:
            self.article_depth = self.depth
        if "solution" in classes and self.solution_depth is None:
            self.solution_depth = self.depth

    def handle_endtag(self, tag) -> None:
        if tag in ("img", "br", "hr", "meta", "link", "input", "source"):
            return
        if self.solution_depth == self.depth:
            self.solution_depth = None
        if self.article_depth == self.depth:
            self.article_depth = None
        self.depth -= 1


def _figures_on_site(page: str) -> int:
    parser = _Figures()
    parser.feed((site.SITE / page).read_text(encoding="utf-8"))
    return parser.count


def _images(obj, seen: set) -> int:
    """Image XObjects reachable from a page's or a form's resources (each counted once)."""
    resources = obj.get("/Resources")
    if resources is None:
        return 0
    resources = resources.get_object()
    xobjects = resources.get("/XObject")
    if xobjects is None:
        return 0
    count = 0
    for ref in xobjects.get_object().values():
        key = getattr(ref, "idnum", None)
        if key in seen:
            continue
        seen.add(key)
        xobject = ref.get_object()
        if xobject.get("/Subtype") == "/Image":
            count += 1
        elif xobject.get("/Subtype") == "/Form":
            count += _images(xobject, seen)
    return count


def _words(text: str) -> str:
    """Lower-case words only; NFKC unfolds the ligatures Chromium prints (the "ff" of "differs")."""
    return " ".join(re.findall(r"[a-z0-9]+", unicodedata.normalize("NFKC", text).lower()))


@pytest.fixture(scope="module")
def printed(tmp_path_factory):
    site.require_chromium()
    site._build_site_if_missing()
    out = tmp_path_factory.mktemp("pdf") / build_pdf.PDF_NAME
    parts = build_pdf.build(site.SITE, out)
    from pypdf import PdfReader

    return parts, PdfReader(out)


def test_one_part_per_page_of_the_table_of_contents_after_a_cover(printed):
    parts, reader = printed
    assert [p.page for p in parts] == build_pdf.site_pages(site.SITE)
    assert parts[0].first_page == 1, "the cover is one page"
    for before, after in zip(parts, parts[1:]):
        assert after.first_page == before.first_page + before.pages
        assert before.pages >= 1
    assert len(reader.pages) == parts[-1].first_page + parts[-1].pages
    outline = [(item.title, reader.get_destination_page_number(item)) for item in reader.outline]
    assert outline == [(p.title, p.first_page) for p in parts]


def test_every_chapter_title_is_a_bookmark_and_printed_on_its_first_page(printed):
    parts, reader = printed
    by_page = {p.page: p for p in parts}
    chapters = sorted((ROOT / "chapters").glob("dl*.ipynb"))
    assert len(chapters) >= 10
    for notebook in chapters:
        title = chapter_title(read_notebook(notebook)["cells"], notebook.stem)
        part = by_page[f"chapters/{notebook.stem}.html"]
        assert part.title == title
        first_page = _words(reader.pages[part.first_page].extract_text())
        assert _words(title) in first_page, (title, first_page[:300])
    cover = _words(reader.pages[0].extract_text())
    assert all(_words(p.title) in cover for p in parts), cover


def test_every_figure_of_every_chapter_is_embedded_in_its_pages(printed):
    parts, reader = printed
    total = 0
    for part in parts:
        expected = _figures_on_site(part.page)
        seen: set = set()
        embedded = sum(_images(reader.pages[i], seen) for i in range(part.first_page, part.first_page + part.pages))
        assert part.figures == expected, (part.page, part.figures, expected)
        assert embedded >= expected, f"{part.page}: {embedded} images embedded, {expected} figures on the site"
        total += expected
    assert total >= 30, f"only {total} figures in the whole course"


def test_the_metadata_names_the_edition_and_the_licences(printed):
    _, reader = printed
    metadata = reader.metadata
    assert metadata.title == f"Transformers, Executed (edition {__version__})"
    assert "CC BY 4.0" in metadata.subject and "MIT" in metadata.subject


def test_without_a_built_site_the_tool_says_how_to_build_it(tmp_path):
    (tmp_path / "intro.html").write_text("<html></html>")
    with pytest.raises(build_pdf.BuildError, match="build the site first"):
        build_pdf.site_pages(tmp_path)
    assert build_pdf.main(["--site", str(tmp_path), "--out", str(tmp_path / "x.pdf")]) == 1
