import matplotlib
import pytest
from matplotlib.figure import Figure

from transformer_course.nn.layers import DecoderLayer, EncoderLayer
from transformer_course.plotting.layer_diagram import (describe_layer, placement_formula, plot_layer,
                                                      plot_layer_placement, sublayers)
from transformer_course.plotting.style import new_figure

matplotlib.use("Agg")


def _texts(ax):
    return [t.get_text() for t in ax.texts] + [ax.get_title()]


def test_labels_are_read_off_the_module():
    layer = EncoderLayer(48, 3, 80, dropout=0.2, activation="gelu")
    fig = plot_layer(layer)
    assert isinstance(fig, Figure)
    text = "\n".join(_texts(fig.axes[0]))
    assert "3 heads × d_head=16" in text
    assert "d_model=48 → d_ff=80 → 48" in text
    assert "gelu" in text
    assert "dropout p=0.2" in text
    assert "LayerNorm (over d_model=48)" in text
    other = "\n".join(_texts(plot_layer(EncoderLayer(64, 8, 256)).axes[0]))
    assert "8 heads × d_head=8" in other and "d_ff=256" in other and "dropout" not in other


def test_post_and_pre_ln_differ():
    post, pre = EncoderLayer(16, 2, 32, norm_first=False), EncoderLayer(16, 2, 32, norm_first=True)
    assert describe_layer(post) == ["self-attention", "add", "norm", "feed-forward", "add", "norm"]
    assert describe_layer(pre) == ["norm", "self-attention", "add", "norm", "feed-forward", "add"]
    post_title = plot_layer(post).axes[0].get_title()
    pre_title = plot_layer(pre).axes[0].get_title()
    assert "Post-LN" in post_title and placement_formula(False) in post_title
    assert "Pre-LN" in pre_title and placement_formula(True) in pre_title
    # the boxes are stacked in a different order: the lowest box is the attention (Post) or a norm (Pre)
    def lowest_box_label(layer):
        ax = plot_layer(layer).axes[0]
        boxes = [t for t in ax.texts if "LayerNorm" in t.get_text() or "attention" in t.get_text()]
        return min(boxes, key=lambda t: t.get_position()[1]).get_text()
    assert "attention" in lowest_box_label(post)
    assert "LayerNorm" in lowest_box_label(pre)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_has_three_sublayers(norm_first):
    layer = DecoderLayer(32, 4, 64, norm_first=norm_first)
    kinds = [part.kind for part in sublayers(layer)]
    assert kinds == ["masked self-attention", "cross-attention", "feed-forward"]
    assert describe_layer(layer).count("add") == 3 and describe_layer(layer).count("norm") == 3
    text = "\n".join(_texts(plot_layer(layer).axes[0]))
    assert "Masked multi-head self-attention" in text and "cross-attention" in text and "memory" in text
    assert text.count("LayerNorm (over d_model=32)") == 3
    assert "Decoder layer" in text


def test_draws_into_a_given_axes():
    fig = new_figure(8, 6)
    left, right = fig.subplots(1, 2)
    assert plot_layer(EncoderLayer(16, 2, 32), ax=right) is fig
    assert right.texts and not left.texts


def test_placement_has_two_panels():
    fig = plot_layer_placement(EncoderLayer(16, 2, 32), EncoderLayer(16, 2, 32, norm_first=True))
    titles = [ax.get_title() for ax in fig.axes]
    assert len(titles) == 2 and "Post-LN" in titles[0] and "Pre-LN" in titles[1]
    decoder = plot_layer_placement(DecoderLayer(16, 2, 32), DecoderLayer(16, 2, 32, norm_first=True))
    assert len(decoder.axes) == 2


def test_bad_inputs():
    with pytest.raises(TypeError, match="layer must be an EncoderLayer or a DecoderLayer"):
        plot_layer("not a layer")
    with pytest.raises(TypeError, match="ax must be a matplotlib Axes"):
        plot_layer(EncoderLayer(16, 2, 32), ax=3)
    with pytest.raises(TypeError, match="layer must be"):
        describe_layer(object())
    with pytest.raises(ValueError, match="post_ln_layer must have norm_first=False"):
        plot_layer_placement(EncoderLayer(16, 2, 32, norm_first=True), EncoderLayer(16, 2, 32, norm_first=True))
    with pytest.raises(ValueError, match="pre_ln_layer must have norm_first=True"):
        plot_layer_placement(EncoderLayer(16, 2, 32), EncoderLayer(16, 2, 32))


def test_plot_layer_names_the_sequence_length():
    text = "\n".join(_texts(plot_layer(EncoderLayer(16, 2, 32), length="S").axes[0]))
    assert "(B, S, d_model=16)" in text and "(B, T," not in text
    assert "(B, T, d_model=16)" in "\n".join(_texts(plot_layer(EncoderLayer(16, 2, 32)).axes[0]))  # the default
    with pytest.raises(ValueError, match="length"):
        plot_layer(EncoderLayer(16, 2, 32), length="")
