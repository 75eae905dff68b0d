"""DL0035's experiment as an ensemble: a small encoder-decoder learns to reverse digits, over seeds.

One run (:func:`reversal_run`) trains ``toy_transformer`` with ``train_seq2seq`` on the reversal
task (the settings of :data:`REVERSAL`, shared by the chapter and its calibration), then measures
on held-out sources:

* exact match of greedy decoding (whole output, <eos> included);
* the cross-attention mass on the mirrored source position S - 1 - t, per decoder layer and head
  (``cross_attention.antidiagonal_mass``): what the attention *looks at*;
* an activation-patching test of what the decoder *uses* (:func:`patch_memory_effect`): replace
  the encoder output at one source position s by that of another source and record which
  output predictions change. If output t reads source position S - 1 - t, patching s changes
  output S - 1 - s (into the donor's digit) and no other.

:func:`reversal_ensemble` runs seeds ``base_seed .. base_seed + 7``; :func:`reversal_claims` turns
the ensemble into the chapter's asserted conclusions (``claims.Claim``), the same claims that
``benchmarks/calibration/dl0035_transformer_architecture.py`` checks over 30 base seeds.

Shape legend: B batch, S source length, T decoder length (S + 1), N decoder layers, H heads.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from transformer_course._validation import check_instance, check_int
from transformer_course.nn.model import Transformer
from .claims import Claim
from .cross_attention import antidiagonal_mass, cross_attention_weights
from .data import make_batch
from .parallel import map_runs, workers_for
from .seeds import ensemble_seeds
from .seq2seq import (exact_match, residual_stream_table, stream_departure, toy_transformer, train_seq2seq,
                      with_placement)

ENSEMBLE_SIZE = 8  # seeds per ensemble: ensemble_seeds(base_seed, EXPERIMENT, 8)
EXPERIMENT = "reversal"  # the ensemble's name for seeds.ensemble_seeds
HELDOUT_OFFSET = 1000  # the held-out sources of seed k are drawn with seed k + HELDOUT_OFFSET
LOSS_THRESHOLD = 0.1  # "learned": the first step whose training loss is below this


@dataclass(frozen=True)
class ReversalSettings:
    """Model, training and evaluation sizes of DL0035's reversal experiment."""

    d_model: int = 64
    num_heads: int = 4
    num_layers: int = 2
    d_ff: int = 128
    length: int = 8
    steps: int = 140
    batch_size: int = 64
    lr: float = 1e-3
    warmup_steps: int = 30
    num_heldout: int = 500


REVERSAL = ReversalSettings()


@dataclass
class ReversalRun:
    """What one seed's run measured (see the module docstring)."""

    seed: int
    losses: list[float]
    accuracy: float  # exact match on the held-out sources
    alignment: torch.Tensor  # (N, H) mass on the mirrored source position
    alignment_near: torch.Tensor  # (N,) head-mean mass within one position of it
    patch_changed: torch.Tensor  # (T, S) fraction of sources whose output t changes when memory s is patched
    patch_copied: torch.Tensor  # (S,) fraction whose output S - 1 - s becomes the donor's digit
    post_ln_departure: float  # stream_departure of the trained (Post-LN) model
    pre_ln_departure: float  # the same weights placed Pre-LN
    model: Transformer | None = field(default=None, repr=False)

    @property
    def steps_to_threshold(self) -> int | None:
        """First step (counting from 1) whose loss is below ``LOSS_THRESHOLD``; None if never."""
        return next((i + 1 for i, loss in enumerate(self.losses) if loss < LOSS_THRESHOLD), None)

    @property
    def mirror_changed(self) -> float:
        """Mean over s of the fraction of outputs S - 1 - s that change when memory s is patched."""
        s = self.patch_changed.shape[1]
        return float(torch.stack([self.patch_changed[s - 1 - j, j] for j in range(s)]).mean())

    @property
    def next_changed(self) -> float:
        """Mean over s of the fraction of outputs S - s (the step after the mirror) changed by patching s.

        Output S - s is the one whose decoder *input* (teacher forcing) is the digit at source
        position s, the digit written at the step before.
        """
        s = self.patch_changed.shape[1]
        return float(torch.stack([self.patch_changed[s - j, j] for j in range(s)]).mean())

    @property
    def far_changed(self) -> float:
        """Largest fraction, over (t, s) with t neither S - 1 - s nor S - s (<eos> row included), of changed outputs."""
        s = self.patch_changed.shape[1]
        far = self.patch_changed.clone()
        for j in range(s):
            far[s - 1 - j, j] = 0.0
            far[s - j, j] = 0.0
        return float(far.max())

    @property
    def copied(self) -> float:
        """Mean over s of the fraction of outputs S - 1 - s that become the patched-in digit."""
        return float(self.patch_copied.mean())

    @property
    def best_layer_alignment(self) -> float:
        """Head-mean mirrored mass of the decoder layer where it is largest."""
        return float(self.alignment.mean(dim=1).max())


def train_reversal_model(seed: int, settings: ReversalSettings = REVERSAL,
                         device: torch.device | str | None = None,
                         label_smoothing: float = 0.0) -> tuple[Transformer, list[float]]:
    """``toy_transformer`` (dropout off) trained on reversal with ``train_seq2seq``; returned on the CPU in eval mode.

    ``label_smoothing`` is the epsilon of the training loss (``seq2seq_loss``; 0 = plain cross-entropy).
    """
    seed = check_int("seed", seed, minimum=0)
    check_instance("settings", settings, ReversalSettings)
    model = toy_transformer(d_model=settings.d_model, num_heads=settings.num_heads, num_layers=settings.num_layers,
                            d_ff=settings.d_ff, dropout=0.0, seed=seed)
    if device is not None:
        model = model.to(device)
    losses = train_seq2seq(model, task="reverse", length=settings.length, steps=settings.steps,
                           batch_size=settings.batch_size, lr=settings.lr, warmup_steps=settings.warmup_steps,
                           seed=seed, label_smoothing=label_smoothing)
    return model.cpu().eval(), losses


def heldout_reversal_batch(seed: int, settings: ReversalSettings = REVERSAL):
    """The held-out (src, decoder_input, labels) on which seed ``seed``'s model is scored."""
    generator = torch.Generator().manual_seed(check_int("seed", seed, minimum=0) + HELDOUT_OFFSET)
    return make_batch("reverse", settings.num_heldout, settings.length, generator, split="heldout")


@torch.no_grad()
def patch_memory_effect(model: Transformer, src: torch.Tensor, decoder_input: torch.Tensor,
                        donor: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Activation patching of the encoder output, one source position at a time.

    For each source position s, the encoder output (memory) of ``src`` at s is replaced by the
    memory of ``donor`` at s, and the decoder is run with teacher forcing on ``decoder_input``.
    Only sources whose donor digit at s differs from their own count for that s.

    Args:
        model: an encoder-decoder ``Transformer``.
        src: (B, S) source ids.
        decoder_input: (B, T) teacher-forced decoder input for ``src``.
        donor: (B, S) other sources, whose memory is patched in.

    Returns:
        changed: (T, S), the fraction of counted sources whose greedy prediction (argmax) at
            decoder position t differs from the unpatched one when position s is patched;
        copied: (S,), the fraction whose prediction at position S - 1 - s equals the donor's
            token at s (for reversal: the output now copies the patched-in digit).

    Raises:
        TypeError, ValueError: for a model that is not a ``Transformer`` or mismatched shapes.
    """
    check_instance("model", model, Transformer, "transformer_course.nn.model.Transformer")
    if src.ndim != 2 or donor.shape != src.shape or decoder_input.ndim != 2 or decoder_input.shape[0] != src.shape[0]:
        raise ValueError("src and donor must be (B, S) and decoder_input (B, T) with the same B, got "
                         f"{tuple(src.shape)}, {tuple(donor.shape)} and {tuple(decoder_input.shape)}")
    model.eval()
    memory, donor_memory = model.encode(src), model.encode(donor)  # (B, S, D) each
    clean = model.decode(decoder_input, memory).argmax(-1)  # (B, T)
    s_len, t_len = src.shape[1], decoder_input.shape[1]
    changed = torch.zeros(t_len, s_len, dtype=torch.float64)
    copied = torch.zeros(s_len, dtype=torch.float64)
    for s in range(s_len):
        counted = donor[:, s] != src[:, s]  # (B,)
        patched = memory.clone()
        patched[:, s] = donor_memory[:, s]
        predicted = model.decode(decoder_input, patched).argmax(-1)  # (B, T)
        changed[:, s] = (predicted != clean)[counted].double().mean(0)
        if s_len - 1 - s < t_len:
            copied[s] = (predicted[:, s_len - 1 - s] == donor[:, s])[counted].double().mean()
    return changed, copied


def reversal_run(seed: int, settings: ReversalSettings = REVERSAL, keep_model: bool = False,
                 device: torch.device | str | None = None) -> ReversalRun:
    """Train one seed (:func:`train_reversal_model`) and measure it (see the module docstring).

    The donors of the patching test are the held-out sources themselves, rolled by one row.
    """
    model, losses = train_reversal_model(seed, settings, device)
    src, decoder_input, labels = heldout_reversal_batch(seed, settings)
    accuracy = exact_match(model, src, labels)
    weights = cross_attention_weights(model, src, decoder_input)  # (N, B, H, T, S)
    alignment = antidiagonal_mass(weights).double()  # (N, H)
    near = antidiagonal_mass(weights, width=1).double().mean(dim=1)  # (N,)
    changed, copied = patch_memory_effect(model, src, decoder_input, src.roll(1, dims=0))
    post = stream_departure(residual_stream_table(model, src[:64], decoder_input[:64]))
    pre = stream_departure(residual_stream_table(with_placement(model, True), src[:64], decoder_input[:64]))
    return ReversalRun(seed, losses, accuracy, alignment, near, changed, copied, post, pre,
                       model if keep_model else None)


def reversal_ensemble(base_seed: int, num_seeds: int = ENSEMBLE_SIZE, settings: ReversalSettings = REVERSAL,
                      keep_models: bool = False, device: torch.device | str | None = None,
                      workers: int = 1) -> list[ReversalRun]:
    """:func:`reversal_run` for the seeds ``ensemble_seeds(base_seed, EXPERIMENT, num_seeds)``.

    On the CPU, ``workers`` > 1 trains them in that many processes
    (:func:`~transformer_course.experiments.parallel.map_runs`, the same runs bit for bit); on
    another device they train one after another.
    """
    base_seed = check_int("base_seed", base_seed, minimum=0)
    num_seeds = check_int("num_seeds", num_seeds, minimum=1)
    return map_runs(reversal_run, [(seed, settings, keep_models, device) for seed in ensemble_seeds(base_seed, EXPERIMENT, num_seeds)],
                    workers=workers_for(workers, device))


def _median(values) -> float:
    return float(torch.tensor(list(values), dtype=torch.float64).median())


def reversal_claims(runs: list[ReversalRun]) -> dict[str, list[Claim]]:
    """The conclusions DL0035 asserts on an ensemble of reversal runs, by section of the chapter.

    The bounds were chosen with margin from the calibration over 30 base seeds
    (``benchmarks/results/calibration/dl0035_transformer_architecture.json``), not from one run.

    Returns:
        {"training": [...], "attention": [...], "patching": [...], "placement": [...]}.
    """
    if not runs or not all(isinstance(run, ReversalRun) for run in runs):
        raise TypeError("runs must be a non-empty list of ReversalRun")
    steps = [run.steps_to_threshold for run in runs]
    latest = float("inf") if None in steps else float(max(steps))
    return {
        "training": [
            Claim("median held-out exact match over the seeds", _median(r.accuracy for r in runs), ">=", 0.98),
            Claim("lowest held-out exact match over the seeds", min(r.accuracy for r in runs), ">=", 0.9),
            Claim(f"latest first step with training loss < {LOSS_THRESHOLD:g}", latest, "<=", 130),
        ],
        "attention": [
            Claim("lowest best-layer mass on the mirrored position", min(r.best_layer_alignment for r in runs),
                  ">=", 0.45),
            Claim("lowest best-layer mass within one position of the mirror",
                  min(float(r.alignment_near.max()) for r in runs), ">=", 0.8),
            Claim("seeds whose last decoder layer puts more mirrored mass than the first (mean of heads)",
                  sum(float(r.alignment[-1].mean()) > float(r.alignment[0].mean()) for r in runs), ">",
                  len(runs) / 2),  # "in most seeds": a majority (the smallest lead was near 0 on some draws)
        ],
        "patching": [
            Claim("lowest share of outputs S-1-s changed by patching memory s", min(r.mirror_changed for r in runs),
                  ">=", 0.95),
            Claim("lowest share of outputs S-1-s turned into the patched-in digit", min(r.copied for r in runs),
                  ">=", 0.95),
            Claim("median share of outputs S-s changed by patching memory s", _median(r.next_changed for r in runs),
                  ">=", 0.3),
            Claim("highest share of any other output changed by patching one position",
                  max(r.far_changed for r in runs), "<", 0.5),  # "for as many as half": one draw of 30 reached 0.38
        ],
        "placement": [
            Claim("largest departure from standardized rows, trained Post-LN model",
                  max(r.post_ln_departure for r in runs), "<=", 1e-3),
            Claim("smallest departure from standardized rows, same weights placed Pre-LN",
                  min(r.pre_ln_departure for r in runs), ">=", 0.5),
        ],
    }
