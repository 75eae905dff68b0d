import pytest
import torch

from transformer_course.experiments.data import (BOS_ID, EOS_ID, NUM_SPECIAL, VOCAB_SIZE, apply_task, digits_to_tokens,
                                     is_heldout, make_batch, sample_digits, shift_right, tokens_to_text)


def test_shift_right_inputs_and_labels():
    target = torch.tensor([[5, 6, 7], [8, 9, 10]])
    decoder_input, labels = shift_right(target)
    assert decoder_input.tolist() == [[BOS_ID, 5, 6, 7], [BOS_ID, 8, 9, 10]]
    assert labels.tolist() == [[5, 6, 7, EOS_ID], [8, 9, 10, EOS_ID]]
    # the input at position t + 1 is the label at position t
    assert torch.equal(decoder_input[:, 1:], labels[:, :-1])


def test_shift_right_one_dimensional_and_custom_ids():
    decoder_input, labels = shift_right(torch.tensor([4]), bos_id=9, eos_id=8)
    assert decoder_input.tolist() == [9, 4] and labels.tolist() == [4, 8]


@pytest.mark.parametrize("target, error, match", [
    (torch.tensor([1.0, 2.0]), TypeError, "target must hold integer"),
    (torch.zeros(2, 2, 2, dtype=torch.long), ValueError, "target must have 1 or 2 dimensions"),
    ([1, 2], TypeError, "target must be a torch.Tensor"),
])
def test_shift_right_rejects_bad_targets(target, error, match):
    with pytest.raises(error, match=match):
        shift_right(target)


def test_shift_right_rejects_negative_ids():
    with pytest.raises(ValueError, match="bos_id must be >= 0"):
        shift_right(torch.tensor([3]), bos_id=-1)


def test_tasks():
    digits = torch.tensor([[3, 1, 2]])
    assert apply_task("copy", digits).tolist() == [[3, 1, 2]]
    assert apply_task("reverse", digits).tolist() == [[2, 1, 3]]
    assert apply_task("sort", digits).tolist() == [[1, 2, 3]]
    with pytest.raises(ValueError, match="task must be one of"):
        apply_task("shuffle", digits)


def test_tokens_round_trip_to_text():
    assert tokens_to_text(torch.tensor([BOS_ID, NUM_SPECIAL + 7, EOS_ID, 0])) == ["<bos>", "7", "<eos>", "<pad>"]
    assert digits_to_tokens(torch.tensor([0, 9])).tolist() == [NUM_SPECIAL, VOCAB_SIZE - 1]


def test_splits_are_disjoint_and_reproducible():
    train = sample_digits(500, 5, torch.Generator().manual_seed(0), "train")
    heldout = sample_digits(100, 5, torch.Generator().manual_seed(0), "heldout")
    assert train.shape == (500, 5) and heldout.shape == (100, 5)
    assert not is_heldout(train).any() and is_heldout(heldout).all()
    assert torch.equal(train, sample_digits(500, 5, torch.Generator().manual_seed(0), "train"))
    assert int(train.min()) >= 0 and int(train.max()) <= 9


def test_make_batch_shapes_and_content(gen):
    src, decoder_input, labels = make_batch("reverse", 4, 6, gen)
    assert src.shape == (4, 6) and decoder_input.shape == labels.shape == (4, 7)
    assert torch.equal(labels[:, :-1], src.flip(-1))
    assert (decoder_input[:, 0] == BOS_ID).all() and (labels[:, -1] == EOS_ID).all()


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(batch_size=0), ValueError, "batch_size must be >= 1"),
    (dict(length=0), ValueError, "length must be >= 1"),
    (dict(split="test"), ValueError, "split must be one of"),
    (dict(generator=0), TypeError, "generator must be a torch.Generator"),
])
def test_sample_digits_rejects_bad_arguments(kwargs, error, match):
    arguments = dict(batch_size=2, length=3, generator=torch.Generator(), split="train") | kwargs
    with pytest.raises(error, match=match):
        sample_digits(**arguments)
