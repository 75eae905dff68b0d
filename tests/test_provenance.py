"""transformer_course.course.provenance: figures and tables found in notebooks, each traced to its function."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from transformer_course.course import provenance
from transformer_course.course.provenance import (
    Exhibit,
    course_exhibits,
    defining_name,
    exhibits_frame,
    exhibits_markdown,
    find_maker,
    notebook_exhibits,
    package_imports,
)

ROOT = Path(__file__).resolve().parent.parent


def _figure(source: str, caption: str, name: str | None = None, tags=()) -> nbformat.NotebookNode:
    figure = {"caption": caption}
    if name:
        figure["name"] = name
    metadata = {"mystnb": {"figure": figure, "image": {"alt": "An alt text long enough."}}}
    if tags:
        metadata["tags"] = list(tags)
    return nbformat.v4.new_code_cell(source, metadata=metadata)


def _write(tmp_path: Path, stem: str, cells) -> Path:
    notebook = nbformat.v4.new_notebook(cells=list(cells))
    path = tmp_path / f"{stem}.ipynb"
    nbformat.write(notebook, path)
    return path


def test_package_imports_maps_local_names_to_dotted_paths():
    names = package_imports([
        "import torch\nfrom transformer_course.nn.masks import causal_mask, padding_mask as pm",
        "import transformer_course.measure.cost as cost\nimport transformer_course.plotting.style",
        "from transformer_course.nn import attention\nfrom .local import x\nfrom numpy import *",
        "%matplotlib inline\n!pip list\nfrom transformer_course.nn.positional import sinusoidal_encoding",
    ])
    assert names == {
        "causal_mask": "transformer_course.nn.masks.causal_mask",
        "pm": "transformer_course.nn.masks.padding_mask",
        "cost": "transformer_course.measure.cost",
        "transformer_course": "transformer_course",
        "attention": "transformer_course.nn.attention",
        "sinusoidal_encoding": "transformer_course.nn.positional.sinusoidal_encoding",
    }


IMPORTS = {
    "plot_pe": "transformer_course.plotting.positional.plot_pe",
    "sinusoidal": "transformer_course.nn.positional.sinusoidal",
    "flop_table": "transformer_course.measure.cost.flop_table",
    "cost": "transformer_course.measure.cost",
    "tc": "transformer_course",
}


@pytest.mark.parametrize("source, expected", [
    # The recipe's shape: assign, then end with the variable.
    ("pe = sinusoidal(64, 32)\nfig = plot_pe(pe)\nfig", "transformer_course.plotting.positional.plot_pe"),
    # The call as the last expression.
    ("plot_pe(sinusoidal(64, 32))", "transformer_course.plotting.positional.plot_pe"),
    # A method chain on a package result: the receiver's maker.
    ("table = flop_table(d_model=512).round(2)\ntable", "transformer_course.measure.cost.flop_table"),
    ("flop_table(d_model=512).style.format(precision=2)", "transformer_course.measure.cost.flop_table"),
    # Module attributes, aliased and nested.
    ("cost.flop_table(d_model=512)", "transformer_course.measure.cost.flop_table"),
    ("tc.plotting.positional.plot_pe(x)", "transformer_course.plotting.positional.plot_pe"),
    # A subscript of a package result.
    ("flop_table(d_model=512)[['mha', 'ffn']]", "transformer_course.measure.cost.flop_table"),
    # No expression at the end: the last plotting call wins over other package calls.
    ("pe = sinusoidal(64, 32)\nfig = plot_pe(pe)\ndisplay(fig)",
     "transformer_course.plotting.positional.plot_pe"),
    # Magics do not stop the parse.
    ("%%time\nfig = plot_pe(sinusoidal(8, 4))\nfig", "transformer_course.plotting.positional.plot_pe"),
    # Nothing from the package.
    ("import numpy as np\nnp.arange(3)", None),
    # Not Python at all.
    ("this is not python (", None),
])
def test_find_maker(source, expected):
    assert find_maker(source, IMPORTS) == expected


def test_find_maker_follows_a_name_assigned_in_an_earlier_cell():
    earlier = ["fig = plot_pe(sinusoidal(64, 32))", "fig = 3  # rebinding in a later cell wins"]
    assert find_maker("fig", IMPORTS, earlier[:1]) == "transformer_course.plotting.positional.plot_pe"
    assert find_maker("fig", IMPORTS, earlier) is None


def test_defining_name_resolves_real_functions_and_keeps_unknown_ones():
    assert defining_name("transformer_course.nn.masks.causal_mask") == "transformer_course.nn.masks.causal_mask"
    # A name re-exported elsewhere resolves to where it is defined.
    assert defining_name("transformer_course.course.notebook.use_course_style") == \
        "transformer_course.plotting.style.use_course_style"
    assert defining_name("transformer_course.nn.masks.no_such_function") == "transformer_course.nn.masks.no_such_function"
    assert defining_name("transformer_course.no_such_module.f") == "transformer_course.no_such_module.f"


def test_notebook_exhibits_reads_figures_and_tables_in_order(tmp_path):
    path = _write(tmp_path, "dl9999_demo", [
        nbformat.v4.new_markdown_cell("# DL9999 · A demo chapter\n\nText."),
        nbformat.v4.new_code_cell("from transformer_course.course.notebook import setup_notebook\n"
                                  "from transformer_course.nn.masks import causal_mask\n"
                                  "from transformer_course.plotting.style import new_figure"),
        _figure("fig = new_figure()\nfig", "Figure 1: An empty figure.", name="fig-dl9999-empty"),
        nbformat.v4.new_code_cell("causal_mask(3)"),  # neither caption nor tag: not an exhibit
        _figure("causal_mask(4).int()", "Table 1: The causal mask | as integers.", name="tbl-dl9999-mask"),
        nbformat.v4.new_code_cell("causal_mask(2)", metadata={"tags": ["table"]}),
        _figure("import numpy as np\nnp.eye(2)", "Figure 2b. Made without the package."),
    ])
    found = notebook_exhibits(path)
    assert [(e.kind, e.number, e.name, e.function) for e in found] == [
        ("figure", "1", "fig-dl9999-empty", "transformer_course.plotting.style.new_figure"),
        ("table", "1", "tbl-dl9999-mask", "transformer_course.nn.masks.causal_mask"),
        ("table", "", None, "transformer_course.nn.masks.causal_mask"),
        ("figure", "2b", None, None),
    ]
    first = found[0]
    assert first == Exhibit(notebook="dl9999_demo", chapter="DL9999 · A demo chapter", kind="figure",
                            number="1", caption="An empty figure.", name="fig-dl9999-empty",
                            function="transformer_course.plotting.style.new_figure", cell_index=2)
    assert [e.label for e in found] == ["Figure 1", "Table 1", "Table", "Figure 2b"]

    frame = exhibits_frame(found)
    assert list(frame.columns) == ["chapter", "exhibit", "caption", "made by", "anchor"]
    assert frame["exhibit"].tolist() == ["Figure 1", "Table 1", "Table", "Figure 2b"]

    markdown = exhibits_markdown(found)
    lines = markdown.splitlines()
    assert len(lines) == 2 + 4
    assert lines[0].startswith("| chapter | exhibit | what it shows | made by `transformer_course.`")
    assert lines[2] == ("| {doc}`DL9999 · A demo chapter <dl9999_demo>` | {ref}`Figure 1 <fig-dl9999-empty>` "
                        "| An empty figure. | `plotting.style.new_figure` |")
    assert lines[3].startswith("|  | {ref}`Table 1 <tbl-dl9999-mask>`")  # the chapter only once
    assert "The causal mask \\| as integers." in lines[3]  # a pipe cannot break the table
    assert "{doc}`Table <dl9999_demo>`" in lines[4]  # no anchor: link to the chapter
    assert "(no package function found)" in lines[5]


def test_course_exhibits_skips_the_index_itself_and_sorts_by_file(tmp_path):
    cell = _figure("from transformer_course.plotting.style import new_figure\nnew_figure()",
                   "Figure 1: x.", name="fig-x")
    _write(tmp_path, "b_chapter", [cell])
    _write(tmp_path, "a_chapter", [cell])
    _write(tmp_path, "figure_index", [cell])
    assert [e.notebook for e in course_exhibits(tmp_path)] == ["a_chapter", "b_chapter"]
    assert exhibits_markdown([]).startswith("*No chapter")


def test_the_course_chapters_parse_and_every_exhibit_names_a_package_function():
    """The real chapters: each captioned figure or table is made by a function of the package."""
    exhibits = course_exhibits(ROOT / "chapters", ROOT / "_toc.yml")
    missing = [f"{e.notebook}: {e.label}" for e in exhibits if e.function is None]
    assert not missing, f"exhibits not made by a transformer_course function: {missing}"
    for e in exhibits:
        assert e.function.startswith(provenance.PACKAGE + ".")


def test_course_notebooks_follow_the_table_of_contents(tmp_path):
    cell = _figure("from transformer_course.plotting.style import new_figure\nnew_figure()", "Figure 1: x.")
    chapters = tmp_path / "chapters"
    chapters.mkdir()
    for stem in ("dl0030_b", "dl0027_a", "not_listed_yet"):
        _write(chapters, stem, [cell])
    toc = tmp_path / "_toc.yml"
    toc.write_text("format: jb-book\nroot: intro\nparts:\n  - caption: Chapters\n    chapters:\n"
                   "      - file: chapters/dl0030_b\n      - file: \"chapters/dl0027_a\"  # a comment\n"
                   "      - file: chapters/dl0099_missing\n")
    assert provenance.toc_files(toc) == ["chapters/dl0030_b", "chapters/dl0027_a", "chapters/dl0099_missing"]
    assert [p.stem for p in provenance.course_notebooks(chapters, toc)] == ["dl0030_b", "dl0027_a"]
    assert [e.notebook for e in course_exhibits(chapters, toc)] == ["dl0030_b", "dl0027_a"]
    assert [p.stem for p in provenance.course_notebooks(chapters)] == ["dl0027_a", "dl0030_b", "not_listed_yet"]
