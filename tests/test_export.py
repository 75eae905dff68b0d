"""tools/export_figures.py: every figure as PNG and SVG, every table as CSV, byte-identical twice.

Runs the tool twice, in two processes, on a small chapter-shaped notebook (a figure made by the
package's plotting code, a table made by a package function, the same metadata conventions as the
chapters), and compares the two exports byte for byte. A small notebook keeps the test fast; the
export code path is the one every chapter takes.
"""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "tools" / "export_figures.py"


def _chapter(path: Path) -> Path:
    cells = [
        nbformat.v4.new_markdown_cell("# DL9998 · Export check"),
        nbformat.v4.new_code_cell("from transformer_course.course.notebook import setup_notebook\n\n"
                                  "device = setup_notebook(seed=0)"),
        nbformat.v4.new_code_cell("from transformer_course.measure.cost import flop_share_table\n"
                                  "from transformer_course.plotting.positional import plot_pe_matrix\n"
                                  "from transformer_course.nn.positional import sinusoidal_encoding"),
        nbformat.v4.new_code_cell(
            "fig = plot_pe_matrix(sinusoidal_encoding(32, 16))\nfig",
            metadata={"mystnb": {"figure": {"caption": "Figure 1: The encoding.", "name": "fig-dl9998-pe"},
                                 "image": {"alt": "A heatmap of the sinusoidal encoding."}}}),
        nbformat.v4.new_code_cell(  # displayed with display(), numbered but without an anchor
            "from IPython.display import display\n"
            "display(plot_pe_matrix(sinusoidal_encoding(16, 8), title='small'))",
            metadata={"mystnb": {"figure": {"caption": "Figure 2: A smaller one."}}}),
        nbformat.v4.new_code_cell(
            "flop_share_table(d=512).round(2)",
            metadata={"tags": ["table"],
                      "mystnb": {"figure": {"caption": "Table 1: FLOP shares.", "name": "tbl-dl9998-flops"}}}),
    ]
    notebook = nbformat.v4.new_notebook(cells=cells)
    notebook.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    nbformat.write(notebook, path)
    return path


def _export(notebook: Path, out: Path) -> dict[str, bytes]:
    result = subprocess.run([sys.executable, str(TOOL), "--out", str(out), str(notebook)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_export_writes_every_exhibit_and_is_byte_identical_across_runs(tmp_path):
    notebook = _chapter(tmp_path / "dl9998_export_check.ipynb")
    first = _export(notebook, tmp_path / "first")
    second = _export(notebook, tmp_path / "second")

    chapter = "dl9998_export_check"
    assert sorted(first) == [
        f"{chapter}/fig-dl9998-pe.png", f"{chapter}/fig-dl9998-pe.svg",
        f"{chapter}/figure-2.png", f"{chapter}/figure-2.svg",
        f"{chapter}/tbl-dl9998-flops.csv", "index.csv",
    ]
    different = [name for name in first if first[name] != second[name]]
    assert not different, f"not byte-identical across two runs: {different}"

    png = first[f"{chapter}/fig-dl9998-pe.png"]
    assert png.startswith(b"\x89PNG")
    assert b"Software" not in png and b"matplotlib" not in png.lower()
    svg = first[f"{chapter}/fig-dl9998-pe.svg"].decode()
    assert "<svg" in svg and "<dc:date>" not in svg and "Matplotlib v" not in svg

    rows = list(csv.reader(first[f"{chapter}/tbl-dl9998-flops.csv"].decode().splitlines()))
    assert rows[0][1:] == ["MHA Share (%)", "FFN Share (%)", "Dominant Component"]
    assert [row[0] for row in rows[1:]] == ["64", "256", "1024", "4096"]

    index = list(csv.DictReader(first["index.csv"].decode().splitlines()))
    assert [(r["exhibit"], r["function"], r["files"]) for r in index] == [
        ("Figure 1", "transformer_course.plotting.positional.plot_pe_matrix",
         f"{chapter}/fig-dl9998-pe.png {chapter}/fig-dl9998-pe.svg"),
        ("Figure 2", "transformer_course.plotting.positional.plot_pe_matrix",
         f"{chapter}/figure-2.png {chapter}/figure-2.svg"),
        ("Table 1", "transformer_course.measure.cost.flop_share_table", f"{chapter}/tbl-dl9998-flops.csv"),
    ]
