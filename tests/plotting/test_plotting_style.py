"""The figure text-size record: the smallest text is found, and the retina PNG carries it."""

import base64
import io

import pytest
from PIL import Image

from transformer_course.course.notebook import TEXT_SIZE_KEY, retina_png
from transformer_course.plotting.style import new_figure, smallest_text_points, use_course_style


def _figure(tick_size: float):
    use_course_style()
    figure = new_figure(4.0, 3.0)
    ax = figure.add_subplot()
    ax.plot([0, 1], [0, 1])
    ax.set_title("title", fontsize=14)
    ax.tick_params(labelsize=tick_size)
    return figure


def test_smallest_text_is_the_tick_labels_when_they_are_smallest():
    assert smallest_text_points(_figure(6.5)) == 6.5
    assert smallest_text_points(_figure(20)) == 14  # then the title is

def test_empty_and_invisible_texts_do_not_count():
    figure = _figure(12)
    ax = figure.axes[0]
    ax.text(0.5, 0.5, "  ", fontsize=3)
    ax.text(0.5, 0.5, "hidden", fontsize=3, visible=False)
    assert smallest_text_points(figure) == 12


def test_a_figure_without_text_has_infinite_smallest_text():
    figure = new_figure(2, 2)
    assert smallest_text_points(figure) == float("inf")


def test_smallest_text_points_rejects_a_non_figure():
    with pytest.raises(TypeError, match="fig must be a matplotlib Figure"):
        smallest_text_points("figure")


def test_retina_png_records_the_smallest_text_in_image_pixels():
    figure = _figure(7.2)
    data, metadata = retina_png(figure, bbox_inches="tight")
    image = Image.open(io.BytesIO(base64.b64decode(data)))
    assert image.width // 2 == metadata["width"]  # twice the 1x width
    assert float(image.info[TEXT_SIZE_KEY]) == pytest.approx(7.2 * 2 * figure.dpi / 72, abs=0.05)
