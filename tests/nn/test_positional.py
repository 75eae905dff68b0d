import math

import pytest
import torch

from transformer_course.nn.attention import scaled_dot_product_attention
from transformer_course.nn.positional import (LearnedPositionalEmbedding, SinusoidalPositionalEncoding, alibi_bias,
                                           rotary_embedding, sinusoidal_encoding, wavelengths)


def test_sinusoidal_formula():
    pe = sinusoidal_encoding(50, 16)
    pos, i = 7, 3
    assert math.isclose(pe[pos, 2 * i], math.sin(pos / 10000 ** (2 * i / 16)), abs_tol=1e-6)
    assert math.isclose(pe[pos, 2 * i + 1], math.cos(pos / 10000 ** (2 * i / 16)), abs_tol=1e-6)
    assert pe.shape == (50, 16)


def test_wavelengths_are_geometric_from_2pi():
    w = wavelengths(512)
    assert math.isclose(w[0], 2 * math.pi)
    ratios = w[1:] / w[:-1]
    torch.testing.assert_close(ratios, torch.full_like(ratios, 10000 ** (2 / 512)))


def test_sinusoidal_module_adds_and_extrapolates():
    module = SinusoidalPositionalEncoding(8, max_len=4)
    x = torch.zeros(1, 6, 8)
    torch.testing.assert_close(module(x)[0], sinusoidal_encoding(6, 8))


def test_learned_embedding_adds_per_position():
    module = LearnedPositionalEmbedding(5, 4)
    x = torch.zeros(2, 3, 4)
    torch.testing.assert_close(module(x)[1], module.embedding.weight[:3])


def test_rope_scores_depend_only_on_offset(gen):
    q = torch.randn(1, 8, dtype=torch.float64, generator=gen)
    k = torch.randn(1, 8, dtype=torch.float64, generator=gen)

    def score(m, n):
        qm = rotary_embedding(q, torch.tensor([m]))
        kn = rotary_embedding(k, torch.tensor([n]))
        return float(qm @ kn.T)

    assert math.isclose(score(3, 1), score(10, 8), rel_tol=1e-9)
    assert math.isclose(score(0, 5), score(20, 25), rel_tol=1e-9)
    assert not math.isclose(score(3, 1), score(3, 2), rel_tol=1e-6)


def test_rope_preserves_norm(gen):
    x = torch.randn(2, 5, 6, generator=gen, dtype=torch.float64)
    torch.testing.assert_close(rotary_embedding(x).norm(dim=-1), x.norm(dim=-1))


def test_alibi_bias_shape_and_usable_as_attention_bias(gen):
    bias = alibi_bias(4, 6)
    assert bias.shape == (4, 6, 6)
    assert (bias.diagonal(dim1=-2, dim2=-1) == 0).all() and (bias <= 0).all()
    torch.testing.assert_close(bias[0, 5, 0], torch.tensor(-5 * 2 ** -2.0))
    q = torch.randn(1, 4, 6, 8, generator=gen)
    out, _ = scaled_dot_product_attention(q, q, q, bias=bias)
    assert out.shape == (1, 4, 6, 8)


def test_interpolated_positions_squeeze_long_inputs_into_the_trained_range():
    from transformer_course.nn.positional import interpolated_positions

    assert torch.equal(interpolated_positions(10, 16), torch.arange(10, dtype=torch.float64))  # T <= L: unchanged
    squeezed = interpolated_positions(64, 16)
    assert squeezed.dtype == torch.float64 and squeezed.shape == (64,)
    assert torch.allclose(squeezed, torch.arange(64, dtype=torch.float64) / 4)
    assert float(squeezed.max()) < 16  # every position inside [0, L)
    for bad in ((0, 4), (4, 0)):
        with pytest.raises(ValueError):
            interpolated_positions(*bad)


def test_ntk_scaled_base_keeps_the_fastest_pair_and_slows_the_slowest_by_the_scale():
    from transformer_course.nn.positional import ntk_scaled_base, pair_frequencies

    for head_dim, scale in ((8, 4.0), (128, 8.0)):
        new = pair_frequencies(head_dim, ntk_scaled_base(10000.0, scale, head_dim))
        old = pair_frequencies(head_dim)
        assert math.isclose(float(new[0]), 1.0) and math.isclose(float(new[-1]), float(old[-1]) / scale, rel_tol=1e-9)
        assert (new[1:-1] < old[1:-1]).all() and (new[1:-1] > old[1:-1] / scale).all()  # in between: less than PI
    assert ntk_scaled_base(10000.0, 1.0, 8) == 10000.0
    with pytest.raises(ValueError, match="scale"):
        ntk_scaled_base(10000.0, 0.5, 8)
    with pytest.raises(ValueError, match="head_dim"):
        ntk_scaled_base(10000.0, 2.0, 7)


def test_rope_decay_bound_starts_at_its_maximum_and_decays_for_wide_heads():
    from transformer_course.nn.positional import rope_decay_bound

    distances = torch.tensor([0.0, 16.0, 256.0])
    wide = rope_decay_bound(128, distances)
    assert math.isclose(float(wide[0]), (64 + 1) / 2)  # |S_j(0)| = j, averaged over j = 1..64
    assert wide[0] > wide[1] > wide[2]
    # brute force: the same sums written as a loop over pairs
    omega = [10000 ** (-2 * k / 8) for k in range(4)]
    r = 5.0
    sums = [abs(sum(complex(math.cos(r * w), math.sin(r * w)) for w in omega[:j])) for j in range(1, 5)]
    assert math.isclose(float(rope_decay_bound(8, torch.tensor([r]))[0]), sum(sums) / 4, rel_tol=1e-12)
    with pytest.raises(ValueError):
        rope_decay_bound(8, torch.zeros(2, 2))
