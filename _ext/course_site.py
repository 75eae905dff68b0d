"""A small Sphinx extension for the course site.

1. Offer each chapter's MyST twin for download.

sphinx-book-theme's download menu offers a chapter's ``.ipynb`` (its source) and a PDF print. The
readable twin, ``chapters/X.myst.md`` (jupytext's MyST format), is what reviewers diff and what many
readers prefer to keep; this extension copies it beside the notebook under ``_sources/`` and adds a
``.md`` entry to the same menu.

2. Keep the vendored MathJax (``_static/mathjax/``) out of every page's ``<script>`` tags. Jupyter
Book adds every ``.js`` file under ``_static`` to ``html_js_files``; MathJax's components must
instead be loaded by MathJax itself, on demand, from ``mathjax_path``.

Loaded through ``sphinx.local_extensions`` in ``_config.yml``.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from sphinx.application import Sphinx

TWIN_SUFFIX = ".myst.md"
VENDORED_MATHJAX = "mathjax/"


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


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("config-inited", drop_vendored_mathjax_scripts)
    # After sphinx-book-theme builds the header buttons (priority 501).
    app.connect("html-page-context", add_myst_download, priority=510)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
