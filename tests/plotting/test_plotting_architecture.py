import pytest
import torch
from matplotlib.figure import Figure

from transformer_course.nn.masks import causal_mask, padding_mask
from transformer_course.nn.model import Transformer, TransformerConfig
from transformer_course.plotting.architecture import (plot_attention_sources, plot_loss_curve, plot_stacks,
                                                      plot_transformer, sublayer_label)


def _model(enc=2, dec=3, norm_first=False):
    torch.manual_seed(0)
    return Transformer(TransformerConfig(20, 20, d_model=16, num_heads=4, num_encoder_layers=enc, num_decoder_layers=dec, d_ff=40,
                       max_len=32, norm_first=norm_first))


def _texts(figure):
    return [t.get_text() for ax in figure.axes for t in ax.texts] + [ax.get_title() for ax in figure.axes]


@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer_figure_reads_counts_and_widths_from_the_model(norm_first):
    figure = plot_transformer(_model(norm_first=norm_first))
    texts = _texts(figure)
    assert isinstance(figure, Figure)
    assert "2×" in texts and "3×" in texts
    assert any("d_model=16" in t and "d_ff=40" in t for t in texts)
    assert any(t.startswith("Multi-head masked self-attention\n4 heads × d_head=4") for t in texts)
    assert any("16 → 40 → 16" in t for t in texts)
    assert sum(t == ("LayerNorm" if norm_first else "Add & Norm") for t in texts) == 2 + 3


def test_stacks_figure_draws_every_layer():
    texts = _texts(plot_stacks(_model(enc=2, dec=4)))
    assert texts.count("Self-attention") == 2
    assert texts.count("Masked self-attention") == texts.count("Cross-attention") == 4
    assert "Encoder: 2 layers × 2 sub-layers" in texts and "Decoder: 4 layers × 3 sub-layers" in texts


def test_sublayer_labels():
    layer = _model().decoder.layers[0]
    assert sublayer_label(layer, "cross_attn", short=True) == "Cross-attention"
    assert sublayer_label(layer, "self_attn", causal=True).startswith("Multi-head masked self-attention")


def test_attention_sources_figure_shows_the_masks():
    s, t = 5, 4
    key_mask = padding_mask([4], s)[0, 0]  # (1, S)
    figure = plot_attention_sources(key_mask.expand(s, s), causal_mask(t), key_mask.expand(t, s))
    images = [ax.images[0].get_array() for ax in figure.axes if ax.images]
    assert [tuple(image.shape) for image in images] == [(s, s), (t, t), (t, s)]
    assert images[1].tolist() == causal_mask(t).float().tolist()


@pytest.mark.parametrize("masks, error, match", [
    ((torch.ones(3, 3), causal_mask(2), torch.ones(2, 3, dtype=torch.bool)), TypeError, "encoder_mask must be a 2-D bool"),
    ((torch.ones(3, 3, dtype=torch.bool), causal_mask(2), torch.ones(3, 2, dtype=torch.bool)), ValueError,
     "expected encoder_mask"),
])
def test_attention_sources_rejects_bad_masks(masks, error, match):
    with pytest.raises(error, match=match):
        plot_attention_sources(*masks)


def test_loss_curve_and_bad_inputs():
    assert isinstance(plot_loss_curve([3.0, 2.0, 1.0, 0.5]), Figure)
    with pytest.raises(ValueError, match="losses must hold at least one value"):
        plot_loss_curve([])
    with pytest.raises(TypeError, match="model must be a transformer_course"):
        plot_transformer(torch.nn.Linear(2, 2))
    with pytest.raises(TypeError, match="model must be a transformer_course"):
        plot_stacks("model")


def test_loss_curves_of_an_ensemble_mark_the_threshold():
    from transformer_course.plotting.architecture import plot_loss_curves

    fig = plot_loss_curves({0: [3.0, 1.0, 0.05, 0.01], 1: [3.0, 2.0, 0.5, 0.2]}, threshold=0.1)
    ax = fig.axes[0]
    dots = [line for line in ax.lines if line.get_marker() == "o"]
    assert len(dots) == 1 and list(dots[0].get_xdata()) == [3]  # seed 0 first below 0.1 at step 3; seed 1 never
    with pytest.raises(ValueError, match="one length"):
        plot_loss_curves({0: [1.0, 0.5], 1: [1.0]})
    with pytest.raises(ValueError, match="at least one seed"):
        plot_loss_curves({})


def test_encoder_layer_is_labelled_with_the_source_length():
    from transformer_course.plotting.architecture import plot_encoder_and_decoder_layers

    model = _model()
    fig = plot_encoder_and_decoder_layers(model.encoder.layers[0], model.decoder.layers[0])
    left, right = ([t.get_text() for t in ax.texts] for ax in fig.axes[:2])
    assert any("(B, S, d_model=16)" in t for t in left) and not any("(B, T," in t for t in left)
    assert any("(B, T, d_model=16)" in t for t in right)
