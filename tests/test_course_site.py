"""The site extension's student mode: every solution block leaves the page, exercises stay."""

from __future__ import annotations

import sys
from pathlib import Path

from docutils import nodes
from docutils.frontend import get_default_settings
from docutils.parsers.rst import Parser
from docutils.utils import new_document
from sphinx_exercise.nodes import exercise_enumerable_node, solution_node

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "_ext"))
import course_site  # noqa: E402


def test_the_student_site_drops_every_solution_and_keeps_the_exercises():
    document = new_document("page", get_default_settings(Parser))
    section = nodes.section()
    document += section
    section += exercise_enumerable_node()
    section += solution_node()
    section += nodes.paragraph(text="after")
    section += solution_node()
    course_site.remove_solutions(None, document, "page")
    assert not list(document.findall(solution_node))
    assert len(list(document.findall(exercise_enumerable_node))) == 1
    assert [p.astext() for p in document.findall(nodes.paragraph)] == ["after"]


def test_empty_table_header_cells_get_a_hidden_label():
    html = ('<table class="dataframe"><thead><tr><th></th><th>value</th></tr>'
            '<tr><th class="blank level0" >&nbsp;</th><th> </th><th>x</th></tr></thead></table>')
    labelled = course_site.label_empty_headers(html)
    assert labelled.count(course_site.HIDDEN_LABEL) == 3
    assert '<th class="blank level0" ><span class="visually-hidden">' in labelled
    assert "<th>value</th>" in labelled and "<th>x</th>" in labelled
    assert course_site.label_empty_headers("<th>a</th>") == "<th>a</th>"


def test_the_footer_names_the_package_version():
    assert course_site.package_version() == __import__("transformer_course").__version__
