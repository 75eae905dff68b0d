"""Every link of the built site, checked without a browser and without the network.

Every ``href`` and ``src`` of every HTML page in ``_build/html`` (built first if missing, like the
browser test; ``COURSE_SITE_HTML`` points at another build):

* (every page: every ``.html`` file but those under ``_static/``, the theme's Jinja macro files)
* an internal link (relative, or root-relative) resolves to a file of the site, and its
  ``#fragment``, when it has one, to an ``id`` or ``name`` on the target page;
* a Colab link has the form Colab opens, ``https://colab.research.google.com/github/<owner>/<repo>/
  blob/<branch>/<path>.ipynb``, names the repository and branch of ``_config.yml``, and its path is
  a notebook of this checkout;
* a link into this course's GitHub repository names its branch and a file or folder of this
  checkout (``blob/``, ``tree/``, ``edit/``), or is the repository itself or its issue tracker;
* any other external link is an absolute ``https://`` URL with a host (it is not fetched: CI has
  no network).

The checks that need no site are unit tests of the link rules themselves (below the first test).
"""

from __future__ import annotations

import functools
import html.parser
import re
import urllib.parse
from pathlib import Path

import pytest

import test_site_browser as site

ROOT = site.ROOT
REPOSITORY = site.CONFIG["repository"]
OWNER_REPO = urllib.parse.urlsplit(REPOSITORY["url"]).path.strip("/")
BRANCH = REPOSITORY["branch"]
COLAB = re.compile(r"^https://colab\.research\.google\.com/github/(?P<repo>[^/]+/[^/]+)/blob/"
                   r"(?P<branch>[^/]+)/(?P<path>[^?#]+\.ipynb)$")
GITHUB = re.compile(r"^https://github\.com/(?P<repo>[^/?#]+/[^/?#]+)(?P<rest>/[^?#]*)?(?:[?#].*)?$")
SKIPPED_SCHEMES = ("mailto:", "javascript:", "data:", "tel:")


class _Links(html.parser.HTMLParser):
    """The href/src attributes of a page, and its id/name attributes (the anchors)."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs) -> None:
        for key, value in attrs:
            if value is None:
                continue
            if key in ("id", "name"):
                self.ids.add(value)
            if (key == "href" and tag in ("a", "link", "area")) or \
                    (key == "src" and tag in ("img", "script", "iframe", "source")):
                self.links.append(value)


@functools.lru_cache(maxsize=None)
def _parse(path: Path) -> _Links:
    parser = _Links()
    parser.feed(path.read_text(encoding="utf-8", errors="replace"))
    return parser


def check_external(url: str, root: Path = ROOT) -> str | None:
    """Why an external link is malformed or points at nothing in this checkout (None when fine)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return f"not an absolute http(s) URL: {url}"
    if parts.netloc == "colab.research.google.com":
        match = COLAB.match(url)
        if not match:
            return f"not a Colab 'open from GitHub' link (…/github/<owner>/<repo>/blob/<branch>/<file>.ipynb): {url}"
        if match["repo"] != OWNER_REPO or match["branch"] != BRANCH:
            return f"Colab link to {match['repo']}@{match['branch']}, not {OWNER_REPO}@{BRANCH}: {url}"
        if not (root / urllib.parse.unquote(match["path"])).is_file():
            return f"Colab link to a notebook this checkout does not have ({match['path']}): {url}"
        return None
    if parts.netloc == "github.com":
        match = GITHUB.match(url)
        if not match or match["repo"] != OWNER_REPO:
            return None  # another project on GitHub (a paper's code, bubblewrap): form checked above
        rest = (match["rest"] or "").strip("/")
        if rest in ("", "issues", "issues/new", "pulls", "releases") or rest.startswith("releases/tag/"):
            return None
        kind, _, tail = rest.partition("/")
        branch, _, path = tail.partition("/")
        if kind not in ("blob", "tree", "edit", "raw"):
            return f"a link into the repository that is not a file, folder or issue page: {url}"
        if branch != BRANCH:
            return f"a link into the repository on branch {branch!r}, not {BRANCH!r}: {url}"
        if path and not (root / urllib.parse.unquote(path)).exists():
            return f"a link to {path}, which this checkout does not have: {url}"
        return None
    if parts.scheme != "https":
        return f"plain http link (use https): {url}"
    return None


def check_internal(page: Path, href: str, site_root: Path) -> str | None:
    """Why a link of ``page`` to the site itself is broken (None when it resolves)."""
    parts = urllib.parse.urlsplit(href)
    if parts.path:
        if parts.path.startswith("/"):
            target = site_root / urllib.parse.unquote(parts.path.lstrip("/"))
        else:
            target = page.parent / urllib.parse.unquote(parts.path)
    else:
        target = page
    target = Path(*target.parts).resolve() if target.exists() else target
    if target.is_dir():
        target = target / "index.html"
    if not target.is_file():
        return f"broken link {href}"
    if site_root.resolve() not in target.resolve().parents:
        return f"link outside the site {href}"
    fragment = urllib.parse.unquote(parts.fragment)
    if fragment and target.suffix == ".html" and fragment not in _parse(target).ids:
        return f"link to a missing anchor {href}"
    return None


@pytest.mark.slow  # builds the site (executing every chapter) when it is missing
def test_every_link_of_the_built_site_resolves_or_has_the_right_form():
    site._build_site_if_missing()
    pages = [site.SITE / page for page in site._pages()]  # not _static/'s theme macro files
    assert len(pages) >= 10, f"only {len(pages)} pages in {site.SITE}"
    problems, internal, external = [], 0, 0
    for page in pages:
        for href in sorted(set(_parse(page).links)):
            if not href or href.startswith(SKIPPED_SCHEMES) or href == "#":
                continue
            name = page.relative_to(site.SITE).as_posix()
            if urllib.parse.urlsplit(href).scheme or href.startswith("//"):
                external += 1
                problem = check_external(href)
            else:
                internal += 1
                problem = check_internal(page, href, site.SITE)
            if problem:
                problems.append(f"{name}: {problem}")
    assert internal > 100 and external > 10, (internal, external)
    assert not problems, "\n".join(problems)


# The rules themselves, on made-up links (no site needed).

def test_colab_links_must_name_this_repository_branch_and_an_existing_notebook():
    good = f"https://colab.research.google.com/github/{OWNER_REPO}/blob/{BRANCH}/student/" + \
        sorted(p.name for p in (ROOT / "student").glob("*.ipynb"))[0]
    assert check_external(good) is None
    assert "not a Colab" in check_external(good.replace("/blob/", "/tree/"))
    assert "not" in check_external(good.replace(f"/blob/{BRANCH}/", "/blob/dev/"))
    assert "does not have" in check_external(good.replace("student/", "student/missing_"))


def test_repository_links_must_point_at_files_of_this_checkout():
    base = f"https://github.com/{OWNER_REPO}"
    assert check_external(base) is None
    assert check_external(f"{base}/issues/new?title=x&body=y") is None
    assert check_external(f"{base}/blob/{BRANCH}/README.md") is None
    assert check_external(f"{base}/tree/{BRANCH}/chapters") is None
    assert "does not have" in check_external(f"{base}/blob/{BRANCH}/NO_SUCH_FILE.md")
    assert "branch" in check_external(f"{base}/blob/gh-pages/README.md")
    assert check_external("https://github.com/containers/bubblewrap") is None
    assert "absolute" in check_external("https:/typo")
    assert "http" in check_external("http://example.org/")


def test_internal_links_and_anchors(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "index.html").write_text('<h1 id="top">t</h1><a name="old"></a>')
    page = tmp_path / "sub" / "page.html"
    page.write_text('<p id="here">x</p>')
    assert check_internal(page, "../index.html#top", tmp_path) is None
    assert check_internal(page, "../index.html#old", tmp_path) is None
    assert check_internal(page, "#here", tmp_path) is None
    assert check_internal(page, "/index.html", tmp_path) is None
    assert "missing anchor" in check_internal(page, "../index.html#nowhere", tmp_path)
    assert "missing anchor" in check_internal(page, "#nowhere", tmp_path)
    assert "broken link" in check_internal(page, "../missing.html", tmp_path)
