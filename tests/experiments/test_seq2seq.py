import pytest
import torch

from transformer_course.experiments.data import EOS_ID, VOCAB_SIZE, make_batch
from transformer_course.experiments.seq2seq import (encoder_decoder_table, exact_match, heldout_exact_match,
                                                    init_embeddings_, reads_memory, seq2seq_loss, toy_transformer,
                                                    train_seq2seq)
from transformer_course.measure.dependency import sees_future
from transformer_course.nn.model import Transformer, TransformerConfig


@pytest.mark.slow
def test_short_training_run_reverses_heldout_sequences():
    model = toy_transformer(d_model=32, num_heads=4, num_layers=1, d_ff=64)
    losses = train_seq2seq(model, "reverse", length=4, steps=150, batch_size=32, lr=3e-3, warmup_steps=20)
    assert losses[-1] < 0.1 * losses[0]
    assert heldout_exact_match(model, "reverse", length=4, num_examples=200) >= 0.95


def test_loss_at_initialization_is_about_log_vocab(gen):
    model = toy_transformer(d_model=16, num_heads=2, num_layers=1, d_ff=32).eval()
    with torch.no_grad():
        loss = seq2seq_loss(model, make_batch("copy", 16, 5, gen))
    assert abs(loss.item() - torch.log(torch.tensor(float(VOCAB_SIZE)))) < 1.0


def test_init_embeddings_sets_the_scale_once_for_shared_embeddings():
    model = Transformer(TransformerConfig(50, 50, d_model=64, num_heads=4, num_encoder_layers=1, num_decoder_layers=1, d_ff=32,
                        share_embeddings=True))
    init_embeddings_(model)
    std = float(model.src_embed.weight.detach().std())
    assert 0.1 < std < 0.15 and model.generator.weight is model.src_embed.weight


def test_exact_match_scores_whole_sequences(gen):
    model = toy_transformer(d_model=16, num_heads=2, num_layers=1, d_ff=32)
    src, _, labels = make_batch("copy", 5, 3, gen)
    generated = model.greedy_decode(src, labels.shape[1], 1, EOS_ID)[:, 1:]
    expected = float((torch.nn.functional.pad(generated, (0, labels.shape[1] - generated.shape[1]), value=EOS_ID)
                      == labels).all(1).float().mean())
    assert exact_match(model, src, labels) == expected
    assert exact_match(model, src, labels, use_cache=True) == expected
    with pytest.raises(ValueError, match="same batch size"):
        exact_match(model, src, labels[:2])


def test_architecture_is_read_off_the_modules():
    model = toy_transformer(d_model=16, num_heads=2, num_layers=2, d_ff=32)
    enc, dec = model.encoder.layers[0], model.decoder.layers[0]
    assert [s.name for s in enc.SUBLAYERS] == ["self_attn", "feed_forward"]
    assert [s.name for s in dec.SUBLAYERS] == ["self_attn", "cross_attn", "feed_forward"]
    assert [s.norm for s in enc.SUBLAYERS] == ["norm1", "norm2"] and len(dec.SUBLAYERS) == 3
    assert not reads_memory(enc) and reads_memory(dec)
    assert sees_future(model, "encoder") and not sees_future(model, "decoder")


def test_encoder_decoder_table_matches_the_card():
    table = encoder_decoder_table(toy_transformer(d_model=16, num_heads=2, num_layers=1, d_ff=32))
    assert list(table.columns) == ["Encoder", "Decoder"]
    assert table.loc["Self-attention", "Encoder"].startswith("Unmasked")
    assert table.loc["Self-attention", "Decoder"].startswith("Masked")
    assert table.loc["Cross-attention", "Encoder"] == "Not present"
    assert table.loc["Sub-layers per layer", "Decoder"].startswith("3")


@pytest.mark.parametrize("call, error, match", [
    (lambda m: train_seq2seq(m, "shuffle"), ValueError, "task must be one of"),
    (lambda m: train_seq2seq(torch.nn.Linear(2, 2)), TypeError, "model must be a transformer_course"),
    (lambda m: train_seq2seq(m, batch_size=0), ValueError, "batch_size must be >= 1"),
    (lambda m: sees_future(m, "middle"), ValueError, "stack must be one of"),
    (lambda m: init_embeddings_("model"), TypeError, "model must be a transformer_course"),
])
def test_bad_arguments(call, error, match):
    model = toy_transformer(d_model=16, num_heads=2, num_layers=1, d_ff=32)
    with pytest.raises(error, match=match):
        call(model)


# --- the residual stream after every sub-layer, and the placement of the norms -------------------

def test_post_ln_streams_are_standardized_and_pre_ln_streams_are_not():
    from transformer_course.experiments.seq2seq import residual_stream_table, stream_departure, with_placement

    model = toy_transformer(d_model=16, num_heads=2, num_layers=2, d_ff=32, seed=2)
    with torch.no_grad():  # trained-looking norms: gamma and beta away from 1 and 0
        for module in model.modules():
            if hasattr(module, "weight") and module.__class__.__name__ == "LayerNorm":
                module.weight.uniform_(0.5, 2.0)
                module.bias.uniform_(-1.0, 1.0)
    src, decoder_input, _ = make_batch("reverse", 8, 5, torch.Generator().manual_seed(0))
    post = residual_stream_table(model, src, decoder_input)
    assert len(post) == 2 * 2 + 3 * 2 and (post["rows"] > 0).all()
    assert stream_departure(post) < 1e-3
    pre_model = with_placement(model, norm_first=True)
    assert pre_model.config.norm_first and torch.equal(pre_model.encoder.layers[0].norm1.weight,
                                                       model.encoder.layers[0].norm1.weight)
    assert stream_departure(residual_stream_table(pre_model, src, decoder_input)) > 0.05
    back = with_placement(pre_model, norm_first=False)  # and back: the same function as the original
    with torch.no_grad():
        assert torch.allclose(back(src, decoder_input), model.eval()(src, decoder_input), atol=1e-6)
    with pytest.raises(TypeError, match="norm_first"):
        with_placement(model, norm_first=1)
