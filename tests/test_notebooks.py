"""The notebook pipeline's invariants: pairs in sync, outputs from an in-order run, Colab cell first.

nbval (run over chapters/*.ipynb by the same pytest command) checks that the stored outputs match
a fresh execution; these tests check what nbval cannot see: it silently passes cells that have no
stored output, and it does not know about the jupytext twin, the table of contents or alt text.
"""

from __future__ import annotations

import base64
import io
import re
from pathlib import Path

import jupytext
import nbformat
import pytest
import yaml
from PIL import Image

from transformer_course.course.notebook import TEXT_SIZE_KEY

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = ROOT / "chapters"
NOTEBOOKS = sorted(CHAPTERS.glob("*.ipynb"))
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
REPOSITORY_URL = CONFIG["repository"]["url"]


def _code_cells(notebook):
    return [cell for cell in notebook.cells if cell.cell_type == "code"]


def _toc_files() -> set[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files: set[str] = set()

    def walk(node):
        if isinstance(node, dict):
            if "file" in node:
                files.add(node["file"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(toc)
    return files


def test_there_are_notebooks():
    assert NOTEBOOKS, "no chapter notebooks found"


def test_every_notebook_has_its_twin_and_vice_versa():
    stems_ipynb = {p.stem for p in NOTEBOOKS}
    stems_md = {p.name[: -len(".myst.md")] for p in CHAPTERS.glob("*.myst.md")}
    assert stems_ipynb == stems_md, f"unpaired: {sorted(stems_ipynb ^ stems_md)}"
    assert not [p for p in CHAPTERS.glob("*.md") if not p.name.endswith(".myst.md")], \
        "a plain .md beside an .ipynb makes Jupyter Book see two files for one document"


def test_every_notebook_is_in_the_table_of_contents():
    listed = {f for f in _toc_files() if f.startswith("chapters/")}
    assert listed == {f"chapters/{p.stem}" for p in NOTEBOOKS}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_pair_is_in_sync(path):
    from_ipynb = jupytext.read(path)
    from_md = jupytext.read(path.with_name(path.stem + ".myst.md"))
    assert len(from_ipynb.cells) == len(from_md.cells), "the two files have different numbers of cells"
    for index, (a, b) in enumerate(zip(from_ipynb.cells, from_md.cells)):
        assert (a.cell_type, a.source.strip()) == (b.cell_type, b.source.strip()), \
            f"cell {index} differs: run python tools/refresh_notebooks.py {path.relative_to(ROOT)}"
        assert a.metadata.get("tags", []) == b.metadata.get("tags", []), f"cell {index} tags differ"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_every_code_cell_was_executed_in_order_without_errors(path):
    notebook = nbformat.read(path, as_version=4)
    counts = [cell.execution_count for cell in _code_cells(notebook)]
    assert None not in counts, f"unexecuted code cells at {[i for i, c in enumerate(counts) if c is None]}"
    assert counts == list(range(1, len(counts) + 1)), f"cells executed out of order: {counts}"
    for cell in _code_cells(notebook):
        for output in cell.outputs:
            assert output.output_type != "error", f"stored error output: {output.get('ename')}"
            if output.output_type == "stream" and output.name == "stderr":
                assert "Warning" not in output.text, f"a warning in the stored outputs: {output.text[:200]}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_first_cell_installs_from_the_configured_repository_only_in_colab(path):
    first = _code_cells(nbformat.read(path, as_version=4))[0]
    assert 'if "google.colab" in sys.modules:' in first.source, "the install must be guarded for Colab"
    urls = re.findall(r"git\+(https://[^\"'\s@]+)@\{COURSE_REF\}", first.source)
    assert urls == [REPOSITORY_URL], f"install URL {urls} != repository.url {REPOSITORY_URL} in _config.yml"
    assert "remove-cell" in first.metadata.get("tags", []), "the install cell must be hidden on the site"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_second_cell_sets_up_the_notebook(path):
    second = _code_cells(nbformat.read(path, as_version=4))[1]
    assert "setup_notebook(" in second.source


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_every_figure_has_a_caption_and_alt_text(path):
    for cell in _code_cells(nbformat.read(path, as_version=4)):
        images = [o for o in cell.outputs if {"image/png", "image/svg+xml"} & set(o.get("data", {}))]
        caption = cell.metadata.get("mystnb", {}).get("figure", {}).get("caption", "")
        if caption.startswith("Table"):
            tables = [o for o in cell.outputs if "text/html" in o.get("data", {})]
            assert "table" in cell.metadata.get("tags", []), f"a table cell must be tagged 'table': {caption[:60]!r}"
            assert len(tables) == 1 and not images, f"a table cell must show one table and no image: {caption[:60]!r}"
            continue
        if caption:
            # A captioned cell that stored only "<Figure size ...>" text would show no image.
            assert len(images) == 1, f"a captioned figure cell stored {len(images)} images: {cell.source[:60]!r}"
        if not images:
            continue
        mystnb = cell.metadata.get("mystnb", {})
        alt = mystnb.get("image", {}).get("alt", "")
        caption = mystnb.get("figure", {}).get("caption", "")
        assert len(alt) >= 20, f"figure without a descriptive alt text: {cell.source[:60]!r}"
        assert re.match(r"Figure \d+[a-z]?:", caption), f"caption must start 'Figure N:': {caption[:60]!r}"
        assert len(images) == 1, f"a cell shows {len(images)} figures; show one per cell"


# The width of the book's content column in a 1280 px desktop window (sphinx-book-theme; 774 px from 1440 px up): a
# figure wider than this is scaled down to it, and its text with it.
COLUMN_PX = 672
MIN_TEXT_PX = 9


def displayed_text_px(output: dict) -> tuple[float, float]:
    """(smallest text height, displayed width) of a stored PNG figure where the page shows it, in CSS px.

    The PNG records the height of its smallest text in image pixels (``course.notebook.retina_png``);
    the page shows the image at its stored 1x width, or at the column's width if that is narrower.
    """
    image = Image.open(io.BytesIO(base64.b64decode(output["data"]["image/png"])))
    assert TEXT_SIZE_KEY in image.info, "a figure PNG without its text-size record: not shown by setup_notebook's formatter"
    width = output.get("metadata", {}).get("image/png", {}).get("width", image.width)
    shown = min(COLUMN_PX, width)
    return float(image.info[TEXT_SIZE_KEY]) * shown / image.width, shown


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_figure_text_is_at_least_9_px_where_the_page_shows_it(path):
    problems = []
    for cell in _code_cells(nbformat.read(path, as_version=4)):
        for output in cell.outputs:
            if "image/png" in output.get("data", {}):
                text_px, shown = displayed_text_px(output)
                if text_px < MIN_TEXT_PX:
                    problems.append(f"{cell.source.splitlines()[-1][:50]!r}: smallest text {text_px:.1f} px "
                                    f"at {shown} px wide")
    assert not problems, "\n".join(problems)


IGNORE_REASON = "# nbval ignores this output:"


def _ignores_output(cell) -> bool:
    return "nbval-ignore-output" in cell.metadata.get("tags", []) or "NBVAL_IGNORE_OUTPUT" in cell.source


def test_ignored_outputs_are_rare_and_each_says_why():
    """Only volatile outputs (times, the machine) escape nbval: under 5% of code cells, each explained."""
    cells = [(path.stem, cell) for path in NOTEBOOKS for cell in _code_cells(nbformat.read(path, as_version=4))]
    ignored = [(stem, cell) for stem, cell in cells if _ignores_output(cell)]
    assert len(ignored) < 0.05 * len(cells), f"{len(ignored)} of {len(cells)} code cells ignore their output"
    unexplained = [f"{stem}: {cell.source.splitlines()[0]!r}" for stem, cell in ignored
                   if IGNORE_REASON not in cell.source]
    assert not unexplained, f"say why with a comment starting {IGNORE_REASON!r}: {unexplained}"



def _sanitize(text: str) -> str:
    """``text`` as nbval compares it: the patterns of ``tests/nbval_sanitize.cfg``, read and applied in order as nbval does."""
    from nbval.plugin import get_sanitize_patterns

    for regex, replace in get_sanitize_patterns((ROOT / "tests" / "nbval_sanitize.cfg").read_text(encoding="utf-8")):
        text = re.sub(regex, replace, text)
    return text


def test_the_sanitizer_masks_times_and_speed_ratios_and_nothing_else():
    """A cell compared with its times masked still fails on any other number that changed."""
    run_a = "64 tokens, one thread: 82.1 ms without the cache, 68.9 ms with it (1.2x faster; 32.7x fewer FLOPs)"
    run_b = "64 tokens, one thread: 90.4 ms without the cache, 61.0 ms with it (1.5x faster; 32.7x fewer FLOPs)"
    assert _sanitize(run_a) == _sanitize(run_b)
    for changed in ["65 tokens", "32.8x fewer FLOPs", "one thread: 82.1 MB"]:
        other = run_a.replace({"65 tokens": "64 tokens", "32.8x fewer FLOPs": "32.7x fewer FLOPs",
                               "one thread: 82.1 MB": "one thread: 82.1 ms"}[changed], changed)
        assert _sanitize(other) != _sanitize(run_a), changed
    assert _sanitize("trained in 100 s (2 worker processes") == _sanitize("trained in 64.7 s (2 worker processes")
    assert _sanitize("trained in 100 s (2 worker") != _sanitize("trained in 100 s (3 worker")

@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_no_stored_output_prints_rounding_noise(path):
    """A difference at rounding level (1e-13 .. 1e-19) differs from CPU to CPU: print a bound instead."""
    for cell in _code_cells(nbformat.read(path, as_version=4)):
        if _ignores_output(cell):
            continue
        text = "".join(output.get("text", "") + output.get("data", {}).get("text/plain", "")
                       for output in cell.outputs)
        noise = re.search(r"\b\d\.\de-1[3-9]\b", text)
        assert noise is None, f"prints rounding noise {noise.group()} in {cell.source.splitlines()[0]!r}"


BARE_SEED = re.compile(r"\b(?:seed\s*=\s*\d+|manual_seed\(\s*\d+\s*\)|seeded\(\s*\d+\s*\)|seeds\s*=\s*(?:range\(\s*\d|[(\[]\s*\d))")


@pytest.mark.parametrize("path", [p for p in NOTEBOOKS if p.name.startswith("dl")], ids=lambda p: p.stem)
def test_every_seed_of_a_chapter_derives_from_its_base_seed(path):
    """COURSE_SEED changes every draw: no code cell seeds anything with a bare number."""
    bare = [(index, match.group()) for index, cell in enumerate(_code_cells(nbformat.read(path, as_version=4)))
            for match in BARE_SEED.finditer(cell.source)]
    assert not bare, f"bare literal seeds (derive them from course_seed()): {bare}"


def test_the_seed_check_finds_bare_seeds():
    for literal in ("seed=0", "manual_seed(7)", "seeded(3)", "seeds=(0, 1, 2)", "seeds = range(8)"):
        assert BARE_SEED.search(literal), literal
    for derived in ("seed=SEED", "manual_seed(SEED + 7)", "seeds=range(SEED, SEED + 8)", "seeded(seed)"):
        assert not BARE_SEED.search(derived), derived
