"""Provenance: makers stamp what they return; the notebook records the stamp; the index reads it."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pandas as pd
import pytest

from transformer_course._exhibit import exhibit, made_by
from transformer_course.course.ipynb import course_notebooks, toc_files
from transformer_course.course.notebook import PROVENANCE_KEY
from transformer_course.course.provenance import (Exhibit, course_exhibits, exhibits_markdown,
                                                  maker_of, notebook_exhibits)
from transformer_course.measure.cost import flop_share_table
from transformer_course.nn.positional import sinusoidal_encoding
from transformer_course.plotting.positional import plot_pe_matrix

ROOT = Path(__file__).resolve().parents[2]


def _figure(caption: str, made: str | None = None, name: str | None = None, tags=()) -> nbformat.NotebookNode:
    """A captioned code cell whose stored output carries the stamp ``made`` (as setup_notebook records it)."""
    figure = {"caption": caption}
    if name:
        figure["name"] = name
    metadata = {"mystnb": {"figure": figure, "image": {"alt": "An alt text long enough."}}}
    if tags:
        metadata["tags"] = list(tags)
    cell = nbformat.v4.new_code_cell("result", metadata=metadata)
    output_metadata = {PROVENANCE_KEY: {"made_by": made}} if made else {}
    cell.outputs = [nbformat.v4.new_output("display_data", data={"text/plain": "x"}, metadata=output_metadata)]
    return cell


def _write(tmp_path: Path, stem: str, cells) -> Path:
    path = tmp_path / f"{stem}.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=list(cells)), path)
    return path


def test_makers_stamp_what_they_return_and_pandas_keeps_the_stamp():
    figure = plot_pe_matrix(sinusoidal_encoding(8, 4))
    assert made_by(figure) == "transformer_course.plotting.positional.plot_pe_matrix"
    table = flop_share_table()
    assert made_by(table) == made_by(table.round(2)) == made_by(table.style) == \
        "transformer_course.measure.cost.flop_share_table"
    assert made_by(pd.DataFrame({"a": [1]})) is None and made_by(object()) is None


def test_the_outermost_maker_wins():
    @exhibit
    def outer():
        return plot_pe_matrix(sinusoidal_encoding(4, 4))

    assert made_by(outer()).endswith("test_the_outermost_maker_wins.<locals>.outer")


def test_notebook_exhibits_reads_figures_and_tables_in_order(tmp_path):
    path = _write(tmp_path, "dl9999_demo", [
        nbformat.v4.new_markdown_cell("# DL9999 · A demo chapter\n\nText."),
        _figure("Figure 1: An empty figure.", "transformer_course.plotting.style.x", name="fig-dl9999-empty"),
        nbformat.v4.new_code_cell("causal_mask(3)"),  # neither caption nor tag: not an exhibit
        _figure("Table 1: The causal mask | as integers.", "transformer_course.m.t", name="tbl-dl9999-mask"),
        _figure("", "transformer_course.m.t", tags=["table"]),
        _figure("Figure 2b. Made without the package."),
    ])
    found = notebook_exhibits(path)
    assert [(e.kind, e.number, e.name, e.function) for e in found] == [
        ("figure", "1", "fig-dl9999-empty", "transformer_course.plotting.style.x"),
        ("table", "1", "tbl-dl9999-mask", "transformer_course.m.t"),
        ("table", "", None, "transformer_course.m.t"),
        ("figure", "2b", None, None),
    ]
    assert found[0] == Exhibit(notebook="dl9999_demo", chapter="DL9999 · A demo chapter", kind="figure",
                               number="1", caption="An empty figure.", name="fig-dl9999-empty",
                               function="transformer_course.plotting.style.x", cell_index=1)
    assert [e.label for e in found] == ["Figure 1", "Table 1", "Table", "Figure 2b"]

    lines = exhibits_markdown(found).splitlines()
    assert len(lines) == 2 + 4
    assert lines[0].startswith("| chapter | exhibit | what it shows | made by `transformer_course.`")
    assert lines[2] == ("| {doc}`DL9999 · A demo chapter <dl9999_demo>` | {ref}`Figure 1 <fig-dl9999-empty>` "
                        "| An empty figure. | `plotting.style.x` |")
    assert lines[3].startswith("|  | {ref}`Table 1 <tbl-dl9999-mask>`")  # the chapter only once
    assert "The causal mask \\| as integers." in lines[3]  # a pipe cannot break the table
    assert "{doc}`Table <dl9999_demo>`" in lines[4]  # no anchor: link to the chapter
    assert "(no package function found)" in lines[5]


def test_maker_of_takes_the_last_stamped_output():
    cell = _figure("Figure 1: x.", "transformer_course.a")
    cell.outputs.append(nbformat.v4.new_output("stream", text="printed\n"))
    assert maker_of(cell) == "transformer_course.a"
    assert maker_of(nbformat.v4.new_code_cell("1")) is None


def test_course_exhibits_skips_the_index_itself_and_sorts_by_file(tmp_path):
    cell = _figure("Figure 1: x.", "transformer_course.f", name="fig-x")
    for stem in ("b_chapter", "a_chapter", "figure_index"):
        _write(tmp_path, stem, [cell])
    assert [e.notebook for e in course_exhibits(tmp_path)] == ["a_chapter", "b_chapter"]
    assert exhibits_markdown([]).startswith("*No chapter")


@pytest.mark.parametrize("path", sorted((ROOT / "chapters").glob("dl*.ipynb")), ids=lambda p: p.stem)
def test_every_exhibit_of_the_chapters_is_stamped_by_a_package_function(path):
    """The real chapters: each captioned figure or table shows an object a package function made."""
    missing = [e.label for e in notebook_exhibits(path) if e.function is None]
    assert not missing, f"exhibits without a transformer_course stamp: {missing}"
    assert all(e.function.startswith("transformer_course.") for e in notebook_exhibits(path))


def test_course_notebooks_follow_the_table_of_contents(tmp_path):
    cell = _figure("Figure 1: x.", "transformer_course.f")
    chapters = tmp_path / "chapters"
    chapters.mkdir()
    for stem in ("dl0030_b", "dl0027_a", "not_listed_yet"):
        _write(chapters, stem, [cell])
    toc = tmp_path / "_toc.yml"
    toc.write_text("format: jb-book\nroot: intro\nparts:\n  - caption: Chapters\n    chapters:\n"
                   "      - file: chapters/dl0030_b\n      - file: \"chapters/dl0027_a\"  # a comment\n"
                   "      - file: chapters/dl0099_missing\n        sections:\n          - file: chapters/nested\n")
    assert toc_files(toc) == ["chapters/dl0030_b", "chapters/dl0027_a", "chapters/dl0099_missing", "chapters/nested"]
    assert [p.stem for p in course_notebooks(chapters, toc)] == ["dl0030_b", "dl0027_a"]
    assert [e.notebook for e in course_exhibits(chapters, toc)] == ["dl0030_b", "dl0027_a"]
    assert [p.stem for p in course_notebooks(chapters)] == ["dl0027_a", "dl0030_b", "not_listed_yet"]
