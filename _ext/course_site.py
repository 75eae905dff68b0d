"""A small Sphinx extension for the course site.

1. Offer each chapter's MyST twin for download.

sphinx-book-theme's download menu offers a chapter's ``.ipynb`` (its source) and a PDF print. The
readable twin, ``chapters/X.myst.md`` (jupytext's MyST format), is what reviewers diff and what many
readers prefer to keep; this extension copies it beside the notebook under ``_sources/`` and adds a
``.md`` entry to the same menu.

2. Keep the vendored MathJax (``_static/mathjax/``) out of every page's ``<script>`` tags. Jupyter
Book adds every ``.js`` file under ``_static`` to ``html_js_files``; MathJax's components must
instead be loaded by MathJax itself, on demand, from ``mathjax_path``.

3. Send readers to the student edition. A chapter's Colab button and its ``.ipynb`` download
point at ``student/<chapter>.ipynb`` (made by ``tools/student_edition.py``: no solutions, no
hidden tests) instead of the instructor notebook the page was built from; the theme's ".pdf"
entry (the browser's print dialog, not a PDF) is dropped from the download menu.

4. The student site. With ``COURSE_EDITION=student`` in the environment, every solution block is
removed from the pages (sphinx-exercise's own ``hide_solutions`` hides only the directive and
leaves a gated solution's code cell on the page):

    COURSE_EDITION=student jupyter-book build . --path-output _build/student

(the pages land in ``_build/student/_build/html``).

5. Accessibility and licences. ``_ext/templates/`` holds the course's copies of two theme
components (the search button and the colour-mode switch) whose accessible names match what they
show (axe-core's label-content-name-mismatch); it is searched before the theme's own templates.
The footer (``html.extra_footer`` in ``_config.yml``) names the licences of the text and the code
and the edition; ``{edition}`` there becomes the package's version (``__version__`` in
``src/transformer_course/__init__.py``, read as text, so the build needs no import of torch).

6. Tables in outputs have no empty header cell. pandas writes the corner cells of a table with a
named index (and a Styler its blank header cells) as empty ``<th>`` elements, which a screen reader
announces as nothing (axe-core's empty-table-header); each gets a visually hidden label.

Loaded through ``sphinx.local_extensions`` in ``_config.yml``.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

from sphinx.application import Sphinx

TWIN_SUFFIX = ".myst.md"
VENDORED_MATHJAX = "mathjax/"
STUDENT_FOLDER = "student"
EDITION_VARIABLE = "COURSE_EDITION"
TEMPLATES = Path(__file__).resolve().parent / "templates"
PACKAGE_INIT = Path(__file__).resolve().parent.parent / "src" / "transformer_course" / "__init__.py"
VERSION_LINE = re.compile(r'^__version__ = "(?P<version>[^"]+)"$', re.MULTILINE)


EMPTY_HEADER = re.compile(r"<th(?P<attributes>[^>]*)>(?:\s|&nbsp;)*</th>")
HIDDEN_LABEL = '<span class="visually-hidden">(no heading)</span>'


def label_empty_headers(html: str) -> str:
    """Every empty ``<th>`` of ``html`` with a visually hidden label (screen readers read it)."""
    return EMPTY_HEADER.sub(lambda m: f"<th{m['attributes']}>{HIDDEN_LABEL}</th>", html)


def label_empty_table_headers(app: Sphinx, doctree: Any, docname: str) -> None:
    """Label the empty header cells of the HTML outputs (DataFrames, Stylers) of a page."""
    from docutils import nodes

    for node in list(doctree.findall(nodes.raw)):
        if "html" in node.get("format", "").split() and EMPTY_HEADER.search(node.astext()):
            text = label_empty_headers(node.astext())
            node.replace_self(nodes.raw("", text, format=node["format"], classes=node.get("classes", [])))


def package_version() -> str:
    """The package's ``__version__`` (the edition), read from its source."""
    match = VERSION_LINE.search(PACKAGE_INIT.read_text(encoding="utf-8"))
    if match is None:
        raise RuntimeError(f"no __version__ line in {PACKAGE_INIT}")
    return match["version"]


def accessible_templates_and_footer(app: Sphinx, config: Any) -> None:
    """Put ``_ext/templates`` first on the template path; fill in the edition in the footer."""
    config.templates_path = [str(TEMPLATES)] + [p for p in config.templates_path if p != str(TEMPLATES)]
    version = package_version()
    config.version = config.release = version
    options = dict(config.html_theme_options or {})
    if "extra_footer" in options:
        options["extra_footer"] = options["extra_footer"].replace("{edition}", version)
    config.html_theme_options = options


def add_myst_download(app: Sphinx, pagename: str, templatename: str, context: dict[str, Any],
                      doctree: Any) -> None:
    """Copy ``<page>.myst.md`` to ``_sources/`` and add it to the page's download menu."""
    if doctree is None or "header_buttons" not in context:
        return
    source = Path(app.srcdir, pagename + TWIN_SUFFIX)
    if not source.is_file():
        return
    target = Path(app.outdir, "_sources", pagename + TWIN_SUFFIX)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)
    for group in context["header_buttons"]:
        if group.get("label") == "download-buttons":
            buttons = group["buttons"]
            position = next((i + 1 for i, b in enumerate(buttons)
                             if b.get("label") == "download-source-button"), len(buttons))
            buttons.insert(position, {
                "type": "link",
                "url": f"{context['pathto']('_sources', 1)}/{pagename}{TWIN_SUFFIX}",
                "text": ".md",
                "icon": "fas fa-file-lines",
                "tooltip": "Download the MyST Markdown twin (jupytext)",
                "label": "download-myst-button",
            })
            return


def drop_vendored_mathjax_scripts(app: Sphinx, config: Any) -> None:
    """Remove ``mathjax/...`` entries that Jupyter Book put into ``html_js_files``."""
    def keep(entry: Any) -> bool:
        name = entry[0] if isinstance(entry, (tuple, list)) else entry
        return not str(name).startswith(VENDORED_MATHJAX)

    config.html_js_files = [entry for entry in config.html_js_files if keep(entry)]


def default_colour_mode(app: Sphinx, config: Any) -> None:
    """Give the theme an explicit default colour mode ("auto").

    pydata-sphinx-theme reads the stored mode, else ``html_context["default_mode"]``; Jupyter Book
    leaves the latter empty, so every first visit logged "Got invalid theme mode" before falling
    back to auto.
    """
    context = dict(config.html_context or {})
    context.setdefault("default_mode", "auto")
    config.html_context = context


def student_edition_links(app: Sphinx, pagename: str, templatename: str, context: dict[str, Any],
                          doctree: Any) -> None:
    """Point the Colab button and the ``.ipynb`` download at ``student/<chapter>.ipynb``."""
    if doctree is None or "header_buttons" not in context:
        return
    stem = Path(pagename).name
    student = Path(app.srcdir, STUDENT_FOLDER, stem + ".ipynb")
    for group in context["header_buttons"]:
        buttons = group.get("buttons", [])
        if group.get("label") == "download-buttons":
            buttons[:] = [b for b in buttons if b.get("label") != "download-pdf-button"]
        if not student.is_file():
            continue
        for button in buttons:
            url = button.get("url", "")
            if group.get("label") == "launch-buttons" and url.endswith(f"/{pagename}.ipynb"):
                button["url"] = url[: -len(f"{pagename}.ipynb")] + f"{STUDENT_FOLDER}/{stem}.ipynb"
                button["tooltip"] = "Open the student edition (no solutions) in Colab"
            elif group.get("label") == "download-buttons" and url.endswith(f"/{pagename}.ipynb"):
                target = Path(app.outdir, "_sources", STUDENT_FOLDER, stem + ".ipynb")
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(student, target)
                button["url"] = f"{context['pathto']('_sources', 1)}/{STUDENT_FOLDER}/{stem}.ipynb"
                button["tooltip"] = "Download the student edition (.ipynb, no solutions)"


def remove_solutions(app: Sphinx, doctree: Any, docname: str) -> None:
    """In the student site, drop every solution block (gated solutions included) from the page."""
    from sphinx_exercise.nodes import solution_node

    for node in list(doctree.findall(solution_node)):
        node.parent.remove(node)


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("config-inited", drop_vendored_mathjax_scripts)
    app.connect("config-inited", default_colour_mode)
    app.connect("config-inited", accessible_templates_and_footer)
    app.connect("html-page-context", student_edition_links, priority=511)
    app.connect("doctree-resolved", label_empty_table_headers)
    if os.environ.get(EDITION_VARIABLE, "").lower() == "student":
        app.connect("doctree-resolved", remove_solutions)
    # After sphinx-book-theme builds the header buttons (priority 501).
    app.connect("html-page-context", add_myst_download, priority=510)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
