"""What a trained feed-forward layer holds: a width sweep and a key-value reading of its neurons.

Shape legend: N facts, D = d_model, F = d_ff, K labels, E members.

The task ("facts"): N fixed random vectors in R^D (the residual stream of N tokens, frozen), each
with a random label in [0, K). A model reads a fact through one residual FFN and a linear read-out,
``logits = readout(x + FFN(x))``, and must learn every label: a memorization task, so what it
can store grows with the FFN's parameters (2 D F + F + D). Sweeping F is Vaswani et al.'s (2017)
Table 3, rows (C), in miniature: there a wider FFN gave a lower perplexity and a higher BLEU at
the cost of parameters.

Geva et al. (2021) read a trained FFN as a key-value memory: row j of W1 is a *key* matched
against the input (neuron j's activation), column j of W2 a *value* added to the residual stream.
They take each key's top-triggering inputs and ask whether its value, read through the output
embedding, promotes what follows those inputs. :func:`value_label_agreement` asks the same of our
model: for each neuron, the share of its ``triggers`` most-activating facts whose label is the one
its value vector raises most (through the read-out), against the chance level 1 / K.

* :class:`FactMemory`: the model, its task drawn from its seed.
* :func:`value_label_agreement`: the key-value reading of one model.
* :func:`memory_ensemble`: every width x seed, trained together per width (``fit_ensemble``);
  :func:`width_table`, :func:`memory_claims`: its summary and calibrated conclusions.
"""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from transformer_course._exhibit import exhibit
from transformer_course._validation import check_instance, check_int, check_tensor
from transformer_course.nn.feedforward import FeedForward
from .claims import Claim
from .ensemble import fit_ensemble
from .training import seeded

EXPERIMENT = "ffn memory"  # the ensemble's name for seeds.ensemble_seeds
MEMORY_SETTINGS = {  # DL0031's sweep, shared by the chapter and benchmarks/calibration/dl0031_feed_forward_network.py
    "num_facts": 256,
    "num_labels": 16,
    "d_model": 16,
    "widths": (4, 8, 16, 64),
    "steps": 400,
    "lr": 1e-2,
    "triggers": 8,
    "num_seeds": 8,
}
TASK_SEED_OFFSET = 70_000  # seed + offset draws the member's facts, apart from its weights


class FactMemory(nn.Module):
    """``readout(x + FFN(x))`` over N fixed facts x in R^D, each with a label in [0, K).

    Args:
        d_ff: the FFN's hidden width F.
        seed: draws the facts and labels (from ``seed + TASK_SEED_OFFSET``) and the weights (``seed``).
        num_facts, num_labels, d_model: N, K and D.

    Shape:
        ids (B,) long in [0, N) -> logits (B, K).
    """

    def __init__(self, d_ff: int, seed: int, num_facts: int = MEMORY_SETTINGS["num_facts"],
                 num_labels: int = MEMORY_SETTINGS["num_labels"], d_model: int = MEMORY_SETTINGS["d_model"]) -> None:
        super().__init__()
        d_ff = check_int("d_ff", d_ff, minimum=1)
        seed = check_int("seed", seed, minimum=0)
        self.num_facts = check_int("num_facts", num_facts, minimum=1)
        self.num_labels = check_int("num_labels", num_labels, minimum=2)
        d_model = check_int("d_model", d_model, minimum=1)
        task = torch.Generator().manual_seed(seed + TASK_SEED_OFFSET)
        self.register_buffer("facts", torch.randn(num_facts, d_model, generator=task))  # (N, D), frozen
        self.register_buffer("labels", torch.randint(0, num_labels, (num_facts,), generator=task))  # (N,)
        with seeded(seed):
            self.ffn = FeedForward(d_model, d_ff)
            self.readout = nn.Linear(d_model, num_labels)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.facts[ids]  # (B, D)
        return self.readout(x + self.ffn(x))  # (B, K)

    def loss(self, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """Cross-entropy of the labels of ``batch``'s fact ids (``fit_ensemble``'s loss, as a method)."""
        (ids,) = batch
        return F.cross_entropy(self(ids), self.labels[ids])

    @torch.no_grad()
    def accuracy(self) -> float:
        """Share of the N facts whose label the model ranks first."""
        return float((self(torch.arange(self.num_facts)).argmax(-1) == self.labels).float().mean())


@torch.no_grad()
def value_label_agreement(model: FactMemory, triggers: int = MEMORY_SETTINGS["triggers"]) -> float:
    """Geva et al.'s reading: how often a neuron's top-triggering facts carry the label its value promotes.

    Neuron j's key activation on fact i is a_ij = ReLU(x_i W1 + b1)_j; its value is column j of W2,
    whose effect on the logits is ``readout.weight @ W2[:, j]`` (K,). For every neuron, take the
    ``triggers`` facts with the largest activation (those with a_ij = 0 do not count: the neuron
    adds nothing there) and count those whose label is the value's top logit.

    Returns:
        The share over all (neuron, trigger) pairs with a_ij > 0, in [0, 1]; chance is about 1 / K.

    Raises:
        TypeError, ValueError: for a model that is not a :class:`FactMemory`, or ``triggers`` out of
            [1, N]; ValueError if no neuron fires on any fact.
    """
    check_instance("model", model, FactMemory)
    triggers = check_int("triggers", triggers, minimum=1)
    if triggers > model.num_facts:
        raise ValueError(f"triggers must be at most num_facts = {model.num_facts}, got {triggers}")
    activations = F.relu(model.ffn.linear1(model.facts))  # (N, F)
    promoted = (model.readout.weight @ model.ffn.linear2.weight).argmax(0)  # (K, F) -> (F,)
    top = activations.topk(triggers, dim=0)  # values, indices: (triggers, F)
    fires = top.values > 0  # (triggers, F)
    if not fires.any():
        raise ValueError("no neuron of the model fires on any fact")
    hits = model.labels[top.indices] == promoted  # (triggers, F)
    return float(hits[fires].float().mean())


def memory_ensemble(seeds: Iterable[int], widths: Iterable[int] = MEMORY_SETTINGS["widths"],
                    steps: int = MEMORY_SETTINGS["steps"], lr: float = MEMORY_SETTINGS["lr"],
                    triggers: int = MEMORY_SETTINGS["triggers"]) -> pd.DataFrame:
    """Train a :class:`FactMemory` per (width, seed), full batch with Adam; one row each.

    The members of one width train together (``fit_ensemble``); member s is the run of its seed alone.

    Returns:
        DataFrame with columns "d_ff", "seed", "FFN parameters", "accuracy (%)", "agreement" (after
        training) and "agreement at init" (the same model before its first step).
    """
    seeds = [check_int("seeds", s, minimum=0) for s in seeds]
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be a non-empty collection of distinct ints >= 0, got {seeds}")
    widths = [check_int("widths", w, minimum=1) for w in widths]
    if not widths:
        raise ValueError("widths must hold at least one width, got none")
    steps = check_int("steps", steps, minimum=1)
    rows = []
    for width in widths:
        models = [FactMemory(width, seed) for seed in seeds]
        at_init = [value_label_agreement(m, triggers) for m in models]
        every_fact = (torch.arange(models[0].num_facts),)  # full batch: the same N ids at every step
        fit_ensemble(models, lambda generator: every_fact, FactMemory.loss, steps, seeds, lr=lr,
                     clip_grad_norm=None)
        for seed, model, init in zip(seeds, models, at_init):
            rows.append({"d_ff": width, "seed": seed, "FFN parameters": sum(p.numel() for p in model.ffn.parameters()),
                         "accuracy (%)": 100 * model.accuracy(), "agreement": value_label_agreement(model, triggers),
                         "agreement at init": init})
    return pd.DataFrame.from_records(rows)


@exhibit
def width_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Per width: FFN parameters, median (and range over seeds) of the accuracy, median agreement trained and at init.

    Raises:
        TypeError, ValueError: for a frame without the columns of :func:`memory_ensemble`.
    """
    check_instance("frame", frame, pd.DataFrame, "pandas.DataFrame")
    needed = {"d_ff", "seed", "FFN parameters", "accuracy (%)", "agreement", "agreement at init"}
    if frame.empty or needed - set(frame.columns):
        raise ValueError(f"frame must be a non-empty table with columns {sorted(needed)}")
    table = frame.groupby("d_ff").agg(**{
        "FFN parameters": ("FFN parameters", "first"), "runs": ("seed", "count"),
        "accuracy (%), median": ("accuracy (%)", "median"), "accuracy (%), min": ("accuracy (%)", "min"),
        "accuracy (%), max": ("accuracy (%)", "max"), "agreement, median": ("agreement", "median"),
        "agreement at init, median": ("agreement at init", "median")})
    return table


def memory_claims(frame: pd.DataFrame, num_labels: int = MEMORY_SETTINGS["num_labels"]) -> list[Claim]:
    """The chapter's conclusions about width and the key-value reading (bounds from the calibration record)."""
    table = width_table(frame)
    num_labels = check_int("num_labels", num_labels, minimum=2)
    if len(table) < 3:
        raise ValueError(f"frame must hold at least three widths, got {list(table.index)}")
    narrowest, widest = table.index.min(), table.index.max()
    medians = table["accuracy (%), median"]
    stored = medians[medians >= 99.0]  # the widths whose median seed stores (nearly) every fact
    until = stored.index.min() if len(stored) else widest
    rises = medians[medians.index <= until].diff().dropna()  # below saturation: each wider FFN stores more
    if rises.empty:
        raise ValueError(f"the narrowest width d_ff = {narrowest} already stores every fact: no rise to measure")
    chance = 1 / num_labels
    paired = frame[frame.d_ff == widest]
    gain = (paired["agreement"] - paired["agreement at init"]).median()
    return [
        Claim(f"d_ff = {narrowest}: highest accuracy of any seed (%)", float(table.loc[narrowest, "accuracy (%), max"]),
              "<", 75.0),
        Claim(f"d_ff = {widest}: lowest accuracy of any seed (%)", float(table.loc[widest, "accuracy (%), min"]),
              ">=", 99.0),
        Claim("smallest rise of the median accuracy from one width to the next, up to the first width whose "
              "median seed stores every fact (points)", float(rises.min()), ">", 10.0),
        Claim(f"d_ff = {widest}: median agreement over chance (1/{num_labels})",
              float(table.loc[widest, "agreement, median"] / chance), ">=", 1.5),
        Claim(f"d_ff = {widest}: median agreement at initialization over chance",
              float(table.loc[widest, "agreement at init, median"] / chance), "<", 1.5),
        Claim(f"d_ff = {widest}: median over seeds of agreement trained minus at initialization", float(gain),
              ">", 0.03),
    ]
