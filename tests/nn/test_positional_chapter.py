"""The positional-encoding helpers added for chapter DL0030: relative_rotation and position_similarity."""

import math

import pytest
import torch

from transformer_course.nn.attention import MultiHeadAttention
from transformer_course.nn.positional import (LearnedPositionalEmbedding, SinusoidalPositionalEncoding,
                                           position_similarity, relative_rotation, sinusoidal_encoding)


@pytest.mark.parametrize("d_model, k", [(2, 1), (16, 5), (64, 37), (16, -3), (8, 0)])
def test_relative_rotation_maps_pe_pos_to_pe_pos_plus_k(d_model, k):
    pe = sinusoidal_encoding(120, d_model).double()  # (P, D)
    m = relative_rotation(d_model, k)
    lo, hi = max(0, -k), 120 - max(0, k)
    torch.testing.assert_close(pe[lo:hi] @ m.T, pe[lo + k:hi + k], atol=1e-6, rtol=0)


def test_relative_rotation_matches_an_independent_formula():
    d, k = 6, 4
    m = relative_rotation(d, k)
    for i in range(d // 2):
        w = 10000 ** (-2 * i / d)
        expected = torch.tensor([[math.cos(k * w), math.sin(k * w)], [-math.sin(k * w), math.cos(k * w)]],
                                dtype=torch.float64)
        torch.testing.assert_close(m[2 * i:2 * i + 2, 2 * i:2 * i + 2], expected)
    off_diagonal = m.clone()
    for i in range(d // 2):
        off_diagonal[2 * i:2 * i + 2, 2 * i:2 * i + 2] = 0
    assert (off_diagonal == 0).all()


def test_relative_rotation_is_orthogonal_and_composes():
    a, b = relative_rotation(32, 3), relative_rotation(32, 11)
    torch.testing.assert_close(a @ a.T, torch.eye(32, dtype=torch.float64))
    torch.testing.assert_close(a @ b, relative_rotation(32, 14))
    torch.testing.assert_close(relative_rotation(32, -3), a.T)
    torch.testing.assert_close(relative_rotation(32, 0), torch.eye(32, dtype=torch.float64))


def test_relative_rotation_respects_base():
    pe = sinusoidal_encoding(20, 8, base=100.0).double()
    torch.testing.assert_close(pe[:-2] @ relative_rotation(8, 2, base=100.0).T, pe[2:], atol=1e-6, rtol=0)


def test_relative_rotation_validation():
    with pytest.raises(ValueError, match="d_model must be even"):
        relative_rotation(7, 1)
    with pytest.raises(ValueError, match="d_model must be >= 2"):
        relative_rotation(0, 1)
    with pytest.raises(TypeError, match="k must be an int"):
        relative_rotation(8, 1.5)
    with pytest.raises(ValueError, match="base must be > 0"):
        relative_rotation(8, 1, base=0.0)


def test_position_similarity_depends_only_on_offset_and_decays_nearby():
    sim = position_similarity(sinusoidal_encoding(64, 128).double())  # (P, P)
    assert sim.shape == (64, 64)
    torch.testing.assert_close(sim.diagonal(), torch.ones(64, dtype=torch.float64))
    torch.testing.assert_close(sim, sim.T)
    for offset in range(1, 10):  # Toeplitz: one value per offset
        diagonal = sim.diagonal(offset)
        torch.testing.assert_close(diagonal, diagonal[:1].expand_as(diagonal), atol=1e-6, rtol=0)
    first_row = sim[0, :11]
    assert (first_row[1:] < first_row[:-1]).all()


def test_position_similarity_validation():
    with pytest.raises(ValueError, match="pe must have 2 dimensions"):
        position_similarity(torch.zeros(2, 3, 4))
    with pytest.raises(TypeError, match="pe must be a floating-point tensor"):
        position_similarity(torch.zeros(3, 4, dtype=torch.long))


def test_attention_is_permutation_equivariant_without_positions_only(gen):
    mha = MultiHeadAttention(16, 4).double().eval()
    x = torch.randn(1, 6, 16, generator=gen, dtype=torch.float64)
    perm = torch.randperm(6, generator=gen)
    torch.testing.assert_close(mha(x[:, perm], x[:, perm], x[:, perm]), mha(x, x, x)[:, perm])
    add_pe = SinusoidalPositionalEncoding(16).double()
    z, z_perm = add_pe(x), add_pe(x[:, perm])
    assert not torch.allclose(mha(z_perm, z_perm, z_perm), mha(z, z, z)[:, perm], atol=1e-3)


def test_learned_embedding_refuses_too_long_inputs_while_sinusoidal_extrapolates():
    with pytest.raises(ValueError, match="sequence length 9 exceeds max_len=8"):
        LearnedPositionalEmbedding(8, 4)(torch.zeros(1, 9, 4))
    out = SinusoidalPositionalEncoding(4, max_len=8)(torch.zeros(1, 9, 4))
    torch.testing.assert_close(out[0], sinusoidal_encoding(9, 4))
