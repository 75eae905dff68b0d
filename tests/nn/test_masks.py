import torch

from transformer_course.nn.masks import causal_mask, dilated_mask, padding_mask, sliding_window_mask


def test_causal_mask_is_lower_triangular():
    assert torch.equal(causal_mask(5), torch.ones(5, 5, dtype=torch.bool).tril())
    assert causal_mask(5).dtype == torch.bool


def test_causal_mask_with_more_keys_shifts_the_diagonal():
    mask = causal_mask(2, 5)  # the last two of five positions
    assert torch.equal(mask, torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], dtype=torch.bool))
    assert causal_mask(1, 7).all()


def test_sliding_window_band():
    mask = sliding_window_mask(8, 4)
    i, j = torch.meshgrid(torch.arange(8), torch.arange(8), indexing="ij")
    assert torch.equal(mask, (i - j).abs() <= 2)
    assert mask.sum(-1).max() == 5  # itself plus two on each side


def test_causal_sliding_window_sees_last_w_positions():
    mask = sliding_window_mask(10, 3, causal=True)
    assert mask.sum(-1).tolist() == [1, 2, 3, 3, 3, 3, 3, 3, 3, 3]
    assert not (mask & ~causal_mask(10)).any()


def test_window_wider_than_sequence_is_full_attention():
    assert sliding_window_mask(6, 100).all()


def test_dilated_mask_strides():
    mask = dilated_mask(9, 3)
    assert mask[0].nonzero().flatten().tolist() == [0, 3, 6]
    assert mask[4].nonzero().flatten().tolist() == [1, 4, 7]
    assert dilated_mask(7, 1).all()
    assert torch.equal(dilated_mask(9, 3, causal=True), mask & causal_mask(9))


def test_padding_mask_shape_and_values():
    mask = padding_mask(torch.tensor([2, 4]), 4)
    assert mask.shape == (2, 1, 1, 4)
    assert mask[:, 0, 0].tolist() == [[True, True, False, False], [True, True, True, True]]
    assert torch.equal(padding_mask([2, 4], 4), mask)
