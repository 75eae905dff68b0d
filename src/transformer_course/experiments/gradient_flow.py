"""Gradient flow through deep Post-LN and Pre-LN stacks at initialization, and a small training race.

Xiong et al. (2020) show that where the LayerNorm sits decides how large the gradients are at
initialization: in a Post-LN stack (x <- LN(x + F(x))) the gradients of the layers near the output
are large, which makes large early updates unstable and calls for a learning-rate warm-up; in a
Pre-LN stack (x <- x + F(LN(x)), plus a final LN) the residual stream grows with depth, the final
LN divides by its size, and the last layers' gradients shrink instead.

Everything here is measured on ``transformer_course.nn.model.Encoder`` stacks with a random
classification loss, so the numbers come from the same code the chapters teach.

Shape legend: B batch, T length, D = d_model, L layers, V vocabulary / classes.
"""

from __future__ import annotations

import math
from typing import Iterable

import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from transformer_course._exhibit import exhibit
from transformer_course._validation import check_bool, check_choice, check_instance, check_int
from transformer_course.nn.model import Encoder
from transformer_course.nn.positional import SinusoidalPositionalEncoding
from .training import seeded

INITS = ("xavier", "pytorch")
PLACEMENTS = {"Post-LN": False, "Pre-LN": True}


def init_xavier_(module: nn.Module) -> nn.Module:
    """Xavier-uniform init for every weight matrix and zero biases; LayerNorm keeps gamma=1, beta=0.

    This is the initialization of the original Transformer code (tensor2tensor, fairseq) and the
    one Xiong et al. (2020) analyse. PyTorch's default ``nn.Linear`` init is about 1.7 times
    smaller, which weakens every residual branch against its skip path.

    Args:
        module: any module; changed in place.

    Returns:
        ``module``, for chaining.

    Raises:
        TypeError: if ``module`` is not an ``nn.Module``.
    """
    check_instance("module", module, nn.Module, "torch.nn.Module")
    with torch.no_grad():
        for name, parameter in module.named_parameters():
            if parameter.dim() >= 2:
                nn.init.xavier_uniform_(parameter)
            elif name.endswith("bias") and "norm" not in name:
                parameter.zero_()
    return module


def probe_batch(encoder: Encoder, parameter: str, seed: int, batch_size: int, seq_len: int, d_model: int,
                num_classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The random classification batch a gradient probe uses, after checking that ``parameter``
    names a parameter of ``encoder``'s layers: inputs (B, T, D) and labels (B, T), drawn from ``seed``.
    """
    names = dict(encoder.layers[0].named_parameters())
    if parameter not in names:
        raise ValueError(f"parameter must name a parameter of one layer, e.g. {sorted(names)[:3]}, got {parameter!r}")
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(batch_size, seq_len, d_model, generator=generator)  # (B, T, D)
    labels = torch.randint(0, num_classes, (batch_size, seq_len), generator=generator)  # (B, T)
    return x, labels


def layer_gradient_norms(num_layers: int, norm_first: bool, d_model: int = 64, num_heads: int = 4,
                         d_ff: int = 256, batch_size: int = 8, seq_len: int = 16, num_classes: int = 10,
                         seed: int = 0, init: str = "xavier",
                         parameter: str = "feed_forward.linear2.weight") -> torch.Tensor:
    """||dLoss/dW_l|| for one weight ``parameter`` of every layer l of a freshly built Encoder.

    The stack reads standard-normal token vectors (B, T, D); a linear head maps its output to
    ``num_classes`` logits and the loss is the cross-entropy against random labels. Nothing is
    trained: this is the gradient the first optimizer step would see.

    Args:
        num_layers: depth L of the stack.
        norm_first: False for Post-LN, True for Pre-LN (which ends with one more LayerNorm).
        d_model, num_heads, d_ff: layer sizes.
        batch_size, seq_len: shape of the random input batch.
        num_classes: number of random labels of the loss.
        seed: seeds the weights and the data.
        init: "xavier" (``init_xavier_``, as analysed by Xiong et al.) or "pytorch" (defaults).
        parameter: name of the parameter inside each layer whose gradient is measured; the
            default is the FFN's output matrix W^2, the one of Xiong et al.'s Figure 3.

    Returns:
        (L,) float64 gradient norms, layer 1 (next to the input) first.

    Raises:
        TypeError: if an integer argument is not an int or ``norm_first`` is not a bool.
        ValueError: on a non-positive size, an unknown ``init`` or ``parameter``.

    Xiong et al., 2020, "On Layer Normalization in the Transformer Architecture", section 3.
    """
    for name, value in (("num_layers", num_layers), ("batch_size", batch_size), ("seq_len", seq_len),
                        ("num_classes", num_classes)):
        check_int(name, value, minimum=1)
    check_int("seed", seed, minimum=0)
    check_choice("init", init, INITS)
    check_bool("norm_first", norm_first)
    with seeded(seed):
        encoder = Encoder(num_layers, d_model, num_heads, d_ff, dropout=0.0, norm_first=norm_first)
        head = nn.Linear(d_model, num_classes)
        if init == "xavier":
            init_xavier_(encoder)
            init_xavier_(head)
    x, labels = probe_batch(encoder, parameter, seed, batch_size, seq_len, d_model, num_classes)  # (B, T, D), (B, T)
    logits = head(encoder(x))  # (B, T, V)
    F.cross_entropy(logits.flatten(0, 1), labels.flatten()).backward()
    return torch.tensor([float(dict(layer.named_parameters())[parameter].grad.norm())
                         for layer in encoder.layers], dtype=torch.float64)  # (L,)


@exhibit
def gradient_norm_profile(num_layers: int, seeds: Iterable[int] = (0, 1, 2), **kwargs) -> pd.DataFrame:
    """Per-layer gradient norms at init for Post-LN and Pre-LN, averaged over ``seeds``.

    Args:
        num_layers: depth L of both stacks.
        seeds: one stack per seed and placement; the table holds the mean.
        **kwargs: passed on to ``layer_gradient_norms`` (sizes, ``init``, ``parameter``).

    Returns:
        A DataFrame indexed by layer (1..L) with columns "Post-LN" and "Pre-LN".

    Raises:
        ValueError: if ``seeds`` is empty (and whatever ``layer_gradient_norms`` raises).
    """
    seeds = list(seeds)
    if not seeds:
        raise ValueError("seeds must hold at least one seed, got none")
    columns = {label: torch.stack([layer_gradient_norms(num_layers, norm_first, seed=seed, **kwargs)
                                   for seed in seeds]).mean(dim=0).numpy()
               for label, norm_first in PLACEMENTS.items()}
    return pd.DataFrame(columns, index=pd.RangeIndex(1, num_layers + 1, name="layer"))


# --- A small training race: the same task, Post-LN vs Pre-LN, no warm-up ---------------------------


class SortingEncoder(nn.Module):
    """Token embedding * sqrt(D) + sinusoidal positions -> Encoder stack -> linear head over the vocabulary.

    Args:
        vocab_size: number of token ids V.
        num_layers, d_model, num_heads, d_ff, norm_first: passed on to ``Encoder``.
        max_len: longest sequence the positional table covers.
        qk_norm, deepnorm_alpha: passed on to ``Encoder`` (QK-norm; DeepNorm's residual weight).

    Shape:
        tokens (B, T) -> logits (B, T, V).
    """

    def __init__(self, vocab_size: int, num_layers: int, d_model: int, num_heads: int, d_ff: int,
                 norm_first: bool, max_len: int = 64, qk_norm: str | None = None,
                 deepnorm_alpha: float | None = None) -> None:
        super().__init__()
        self.d_model = check_int("d_model", d_model, minimum=1)
        self.embed = nn.Embedding(check_int("vocab_size", vocab_size, minimum=2), d_model)
        self.positional = SinusoidalPositionalEncoding(d_model, max_len, 0.0)
        self.encoder = Encoder(num_layers, d_model, num_heads, d_ff, dropout=0.0, norm_first=norm_first,
                               qk_norm=qk_norm, deepnorm_alpha=deepnorm_alpha)
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.positional(self.embed(tokens) * math.sqrt(self.d_model))  # (B, T, D)
        return self.head(self.encoder(x))  # (B, T, V)


def sorting_batch(generator: torch.Generator, batch_size: int = 32, seq_len: int = 10,
                  vocab_size: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    """Random token sequences and the same tokens sorted: (B, T) inputs, (B, T) targets."""
    tokens = torch.randint(0, vocab_size, (batch_size, seq_len), generator=generator)  # (B, T)
    return tokens, tokens.sort(dim=1).values  # (B, T), (B, T)


def sorting_loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Cross-entropy of the model's (B, T, V) logits against the sorted tokens."""
    tokens, targets = batch
    return F.cross_entropy(model(tokens).flatten(0, 1), targets.flatten())
