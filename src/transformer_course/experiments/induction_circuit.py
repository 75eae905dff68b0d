"""A small GPT trained on the course's prose, and the two-layer induction circuit that forms in it.

The model is DL0030's decoder-only language model (``LengthGeneralizationModel`` with rotary
positions): token embeddings, two Pre-LN blocks of causal self-attention and a ReLU feed-forward
layer (d_ff = 4D), a final LayerNorm and a linear read-out, all from the package's ``nn`` pieces.
No smeared key: a head of layer 1 can only match "the token before this key" by reading what a
head of layer 0 wrote there (K-composition, Elhage et al., 2021).

Data: every batch mixes windows of the course's prose with random strings repeated at a random
period (``repeated_fraction`` of the rows), since the prose alone gives too few repeats to form
the circuit in a CPU budget. ``train_circuits`` trains seeds together (``ensemble.fit_ensemble``:
each member is its own run, with its own batches) and measures each, every ``eval_every`` steps, the held-out prose loss and its loss by position (the in-context
learning score), the loss on the first and later copies of repeated random sequences, and every
head's prefix-matching and previous-token scores. At the end it reads the circuit from the
weights (composition scores of every layer-1 head with every layer-0 head, at initialization and
after training) and ablates heads: the induction heads, as many random other heads, the
previous-token head.

Shape legend: B batch, T positions, D width, H heads, Dh = D / H, V vocabulary, L layers (2).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from transformer_course._validation import check_instance, check_int
from transformer_course.measure.induction import (composition_scores, copying_score, in_context_learning_score,
                                                  prefix_matching_score, previous_token_score, repeat_losses,
                                                  repeated_random_tokens)
from .claims import Claim, spread
from .corpus import CharVocabulary, load_course_prose, split_corpus, text_windows
from .ensemble import fit_ensemble
from .length_generalization import LengthGeneralizationModel
from .parallel import map_runs, split_evenly
from .seeds import ensemble_seeds
from .training import seeded

Head = tuple[int, int]  # (layer, head)
EXPERIMENT = "induction circuit"  # the ensemble's name for seeds.ensemble_seeds
PROBE_SEED_OFFSET = 1_000_000  # probes draw from seed + this, apart from the training batches
CONTROL_SEED_OFFSET = 2_000_000  # the random control heads draw from seed + this


@dataclass(frozen=True)
class CircuitSettings:
    """Everything the capstone's training and measurements depend on (the calibration reads the same)."""

    d_model: int = 32
    num_heads: int = 4
    context: int = 48  # T, training window
    batch_size: int = 16
    repeated_fraction: float = 0.75  # share of each batch that is a repeated random string
    min_period: int = 8  # periods of the repeated training strings: min_period .. context // 2
    lr: float = 1e-2
    steps: int = 2400
    eval_every: int = 100
    probe_sequences: int = 32  # repeated random sequences of period context // 2 per probe
    probe_windows: int = 64  # held-out prose windows per probe
    icl_early: range = range(4, 12)  # in-context learning score: mean loss over icl_late ...
    icl_late: range = range(39, 47)  # ... minus over icl_early
    induction_threshold: float = 0.3  # a head whose prefix-matching score reaches this is an induction head
    control_draws: int = 4  # random control ablations averaged per seed
    snapshot_steps: tuple[int, ...] = (100, 600)  # weights kept at these steps (and the last), to sample from
    ensemble: int = 8
    workers: int = 2


CIRCUIT = CircuitSettings()


def periodic_random_tokens(batch_size: int, length: int, min_period: int, max_period: int, vocab_size: int,
                           generator: torch.Generator) -> torch.Tensor:
    """(B, length) tokens: each row a uniform random string of its own period P in [min_period, max_period], repeated.

    A period drawn per row means no fixed offset predicts the repeats: only finding the earlier
    occurrence of the current token does.
    """
    check_int("min_period", min_period, minimum=2)
    if not min_period <= max_period < length:
        raise ValueError(f"need min_period <= max_period < length, got {min_period}, {max_period}, {length}")
    periods = torch.randint(min_period, max_period + 1, (batch_size, 1), generator=generator)  # (B, 1)
    strings = torch.randint(0, vocab_size, (batch_size, length), generator=generator)  # (B, length)
    return strings.gather(1, torch.arange(length).unsqueeze(0) % periods)  # (B, length)


def capstone_corpus() -> tuple[CharVocabulary, torch.Tensor, torch.Tensor]:
    """(vocabulary, train ids, held-out ids) of the course prose."""
    text = load_course_prose()
    vocabulary = CharVocabulary.of(text)
    train, held_out = split_corpus(vocabulary.encode(text))
    return vocabulary, train, held_out


def build_model(vocab_size: int, settings: CircuitSettings = CIRCUIT) -> LengthGeneralizationModel:
    """The two-block rotary GPT of the capstone (DL0030's model class)."""
    s = settings
    return LengthGeneralizationModel("rope", vocab_size, s.d_model, s.num_heads, num_layers=2, max_len=s.context)


def attention_patterns(model: LengthGeneralizationModel, tokens: torch.Tensor) -> list[torch.Tensor]:
    """Every block's attention weights on ``tokens`` (B, T): a list of L tensors (B, H, T, T)."""
    check_instance("model", model, LengthGeneralizationModel)
    patterns = []
    with torch.no_grad():
        x = model.positional(model.embed(tokens))  # (B, T, D)
        for block in model.blocks:
            _, weights = block.self_attn(block.norm1(x), need_weights=True)  # (B, H, T, T)
            patterns.append(weights)
            x = block(x)  # (B, T, D)
    return patterns


def head_circuits(model: LengthGeneralizationModel) -> tuple[torch.Tensor, torch.Tensor]:
    """Per layer and head, W_QK = W_Q^T W_K and W_OV = W_O W_V, as (L, H, D, D) each (float64).

    Both act on the residual stream as the block reads it: the LayerNorm gain before the attention
    is folded into W_Q, W_K and W_V (its centring and scaling left out). Rotary positions turn the
    query and key by the angle of their offset; W_QK is the form at offset 0 (no turn).
    """
    check_instance("model", model, LengthGeneralizationModel)
    qks, ovs = [], []
    with torch.no_grad():
        for block in model.blocks:
            mha = block.self_attn.attention
            gain = block.norm1.weight.double()  # (D,)
            per_qk, per_ov = [], []
            for h in range(mha.num_heads):
                rows = slice(h * mha.d_head, (h + 1) * mha.d_head)
                w_q = mha.q_proj.weight[rows].double() * gain  # (Dh, D)
                w_k = mha.k_proj.weight[rows].double() * gain  # (Dh, D)
                w_v = mha.v_proj.weight[rows].double() * gain  # (Dh, D)
                w_o = mha.out_proj.weight[:, rows].double()  # (D, Dh)
                per_qk.append(w_q.T @ w_k)  # (D, D)
                per_ov.append(w_o @ w_v)  # (D, D)
            qks.append(torch.stack(per_qk))
            ovs.append(torch.stack(per_ov))
    return torch.stack(qks), torch.stack(ovs)  # (L, H, D, D) each


def layer_composition(model: LengthGeneralizationModel) -> dict[str, torch.Tensor]:
    """Q-, K- and V-composition of every layer-1 head (rows) with every layer-0 head (columns), (H, H) each."""
    qk, ov = head_circuits(model)
    return composition_scores(qk[1], ov[1], ov[0])


def ov_circuits(model: LengthGeneralizationModel) -> torch.Tensor:
    """(L, H, V, V): what each head writes to the logits when it reads one token's embedding (direct path).

    W_U diag(final gain) W_OV W_E^T: rows = the token read, columns = the logit written.
    """
    _, ov = head_circuits(model)  # (L, H, D, D)
    with torch.no_grad():
        embed = model.embed.weight.double()  # (V, D)
        read_out = model.head.weight.double() * model.norm.weight.double()  # (V, D)
        return (embed @ ov.transpose(-2, -1) @ read_out.T).float()  # (L, H, V, V)


def ablate_heads(model: LengthGeneralizationModel, heads: Iterable[Head]) -> LengthGeneralizationModel:
    """A copy of ``model`` with the output of every (layer, head) in ``heads`` zeroed (columns of W^O)."""
    check_instance("model", model, LengthGeneralizationModel)
    copied = copy.deepcopy(model)
    num_layers, num_heads = len(copied.blocks), copied.blocks[0].self_attn.attention.num_heads
    with torch.no_grad():
        for head in heads:
            if (not isinstance(head, tuple) or len(head) != 2 or not 0 <= head[0] < num_layers
                    or not 0 <= head[1] < num_heads):
                raise ValueError(f"heads must be (layer, head) pairs within {num_layers} layers and {num_heads} "
                                 f"heads, got {head!r}")
            mha = copied.blocks[head[0]].self_attn.attention
            mha.out_proj.weight[:, head[1] * mha.d_head:(head[1] + 1) * mha.d_head] = 0.0
    return copied


def token_losses(model: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    """Per-token losses (B, T - 1) of predicting tokens 1 .. T-1 of ``tokens`` (B, T)."""
    with torch.no_grad():
        logits = model(tokens)  # (B, T, V)
        losses = F.cross_entropy(logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten(), reduction="none")
    return losses.view(tokens.shape[0], -1)


def repeat_advantage(model: nn.Module, tokens: torch.Tensor, period: int) -> float:
    """Loss on the first copy minus loss on the later copies (nats; > 0 when the model copies)."""
    first, later = repeat_losses(token_losses(model, tokens), period)
    return first - later


@dataclass
class Probes:
    """Fixed evaluation data of one run: repeated random sequences and held-out prose windows."""

    repeated: torch.Tensor  # (N, T), period T // 2
    held_out: torch.Tensor  # (M, T)
    period: int


def make_probes(held_out: torch.Tensor, vocab_size: int, seed: int, settings: CircuitSettings = CIRCUIT) -> Probes:
    s = settings
    generator = torch.Generator().manual_seed(seed + PROBE_SEED_OFFSET)
    period = s.context // 2
    return Probes(repeated_random_tokens(s.probe_sequences, period, vocab_size, generator),
                  text_windows(held_out, s.probe_windows, s.context, generator), period)


def measure(model: LengthGeneralizationModel, probes: Probes) -> dict:
    """One row of a training record: prose loss (mean and by position), repeat losses, per-head scores (L, H)."""
    text = token_losses(model, probes.held_out)  # (M, T - 1)
    repeat = token_losses(model, probes.repeated)  # (N, T - 1)
    first, later = repeat_losses(repeat, probes.period)
    patterns = attention_patterns(model, probes.repeated)
    return {
        "held_out_loss": float(text.mean()),
        "text_loss_by_position": text.mean(dim=0).tolist(),  # (T - 1,)
        "first_repeat_loss": first,
        "later_repeat_loss": later,
        "prefix_matching": [prefix_matching_score(w, probes.period).tolist() for w in patterns],  # (L, H)
        "previous_token": [previous_token_score(w).tolist() for w in patterns],  # (L, H)
    }


def mixture_batches(train: torch.Tensor, vocab_size: int, settings: CircuitSettings = CIRCUIT):
    """make_batch for ``fit`` or ``fit_ensemble``: prose windows and repeated random strings, as (inputs,
    next tokens). ``settings`` gives batch_size, repeated_fraction, context and min_period."""
    s = settings
    repeated = int(round(s.batch_size * s.repeated_fraction))

    def make_batch(generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        text = text_windows(train, s.batch_size - repeated, s.context + 1, generator)  # (B_text, T + 1)
        copies = periodic_random_tokens(repeated, s.context + 1, s.min_period, s.context // 2, vocab_size,
                                        generator)  # (B_rep, T + 1)
        tokens = torch.cat((text, copies))  # (B, T + 1)
        return tokens[:, :-1], tokens[:, 1:]

    return make_batch


def next_token_loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    inputs, targets = batch
    return F.cross_entropy(model(inputs).flatten(0, 1), targets.flatten())


@dataclass
class CircuitRun:
    """One seed's training record and end-of-training measurements."""

    seed: int
    losses: list[float]
    record: pd.DataFrame  # one row per probe step
    composition: dict[str, list[list[float]]]  # "Q", "K", "V" -> (H, H) layer-1 rows x layer-0 columns, trained
    composition_at_init: dict[str, list[list[float]]]  # the same, at step 0
    copying: list[list[float]]  # (L, H) copying scores of the direct-path OV circuits
    advantage: dict[str, float]  # repeat advantage: intact and with heads zeroed
    state: dict = field(repr=False, default_factory=dict)  # the trained weights
    snapshots: dict[int, dict] = field(repr=False, default_factory=dict)  # step -> the weights then

    def model(self, vocab_size: int, settings: CircuitSettings = CIRCUIT, step: int | None = None
              ) -> LengthGeneralizationModel:
        """The trained model, or the model at ``step`` (one of ``settings.snapshot_steps``)."""
        if step is not None and step not in self.snapshots:
            raise ValueError(f"step must be one of the snapshot steps {sorted(self.snapshots)}, got {step!r}")
        model = build_model(vocab_size, settings)
        model.load_state_dict(self.state if step is None else self.snapshots[step])
        return model.eval()


def induction_heads(prefix_matching: Sequence[Sequence[float]], threshold: float) -> list[Head]:
    """The (layer, head) pairs whose prefix-matching score reaches ``threshold``."""
    scores = torch.tensor(prefix_matching, dtype=torch.float64)  # (L, H)
    return [(int(l), int(h)) for l, h in (scores >= threshold).nonzero().tolist()]


def top_head(scores: Sequence[Sequence[float]], layer: int) -> Head:
    """The head of ``layer`` with the highest score."""
    row = list(scores[layer])
    return layer, max(range(len(row)), key=lambda h: (row[h], -h))


def _as_lists(scores: dict[str, torch.Tensor]) -> dict[str, list[list[float]]]:
    return {kind: matrix.tolist() for kind, matrix in scores.items()}


def _finish(seed: int, model: LengthGeneralizationModel, losses: list[float], rows: list[dict], probes: Probes,
            at_init: dict[str, list[list[float]]], snapshots: dict[int, dict], settings: CircuitSettings) -> CircuitRun:
    """A trained member's run: its record, its circuit read from the weights, and its ablations."""
    s = settings
    record = pd.DataFrame(rows)
    final = rows[-1]
    induction = [head for head in induction_heads(final["prefix_matching"], s.induction_threshold) if head[0] == 1]
    previous = top_head(final["previous_token"], 0)
    others = [(l, h) for l in range(2) for h in range(s.num_heads) if (l, h) not in induction and (l, h) != previous]
    generator = torch.Generator().manual_seed(seed + CONTROL_SEED_OFFSET)
    controls = []
    for _ in range(s.control_draws if induction else 0):
        chosen = torch.randperm(len(others), generator=generator)[:len(induction)].tolist()
        controls.append(repeat_advantage(ablate_heads(model, [others[i] for i in chosen]), probes.repeated,
                                         probes.period))
    advantage = {
        "intact": repeat_advantage(model, probes.repeated, probes.period),
        "induction heads zeroed": repeat_advantage(ablate_heads(model, induction), probes.repeated, probes.period),
        "random other heads zeroed": sum(controls) / len(controls) if controls else float("nan"),
        "previous-token head zeroed": repeat_advantage(ablate_heads(model, [previous]), probes.repeated,
                                                       probes.period),
    }
    return CircuitRun(seed, losses, record, _as_lists(layer_composition(model)), at_init,
                      copying_score(ov_circuits(model)).tolist(), advantage, _weights(model), snapshots)


def _weights(model: nn.Module) -> dict:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def train_circuits(seeds: Sequence[int], settings: CircuitSettings = CIRCUIT) -> list[CircuitRun]:
    """Train one model per seed (weights, batches, probes and control draws all from its seed), together
    (``fit_ensemble``), measuring each every ``eval_every`` steps; see the module docstring."""
    s = settings
    seeds = [check_int("seeds", seed, minimum=0) for seed in seeds]
    vocabulary, train, held_out = capstone_corpus()
    models = []
    for seed in seeds:
        with seeded(seed):
            models.append(build_model(vocabulary.size, s))
    at_init = [_as_lists(layer_composition(model)) for model in models]
    probes = [make_probes(held_out, vocabulary.size, seed, s) for seed in seeds]
    rows: list[list[dict]] = [[] for _ in seeds]
    snapshots: list[dict[int, dict]] = [{} for _ in seeds]

    def observe(step: int, members: list[nn.Module]) -> None:
        for member, member_probes, member_rows, kept in zip(members, probes, rows, snapshots):
            member_rows.append({"step": step, **measure(member, member_probes)})
            if step in s.snapshot_steps:
                kept[step] = _weights(member)

    losses = fit_ensemble(models, mixture_batches(train, vocabulary.size, s), next_token_loss, s.steps, seeds,
                          lr=s.lr, observe=observe, observe_every=s.eval_every)
    return [_finish(*member, s) for member in zip(seeds, models, losses, rows, probes, at_init, snapshots)]


def run_circuit(seed: int, settings: CircuitSettings = CIRCUIT) -> CircuitRun:
    """One seed's run: the same numbers as that seed's member of any ensemble (``fit_ensemble``)."""
    return train_circuits([seed], settings)[0]


def run_ensemble(base_seed: int, settings: CircuitSettings = CIRCUIT) -> list[CircuitRun]:
    """The seeds ``ensemble_seeds(base_seed, EXPERIMENT, settings.ensemble)``, split among ``settings.workers``
    processes, each training its share together."""
    seeds = ensemble_seeds(base_seed, EXPERIMENT, settings.ensemble)
    parts = map_runs(train_circuits, [(part, settings) for part in split_evenly(seeds, settings.workers)],
                     workers=settings.workers)
    return [run for part in parts for run in part]


def layer_top_score(record: pd.DataFrame, column: str, layer: int) -> pd.Series:
    """Per probe step, the highest score in ``column`` ("prefix_matching" or "previous_token") among ``layer``'s heads."""
    return record[column].map(lambda scores: max(scores[layer]))


def transition(record: pd.DataFrame, low: float = 0.1, high: float = 0.9) -> tuple[float, float]:
    """The phase change of layer 1's top prefix-matching score: the steps from which it stays at least
    ``low`` and ``high`` of the way from its step-0 value to its final value (NaN, NaN if it never rises).

    "Stays from" rather than "first reaches": before the phase the score wanders by a few hundredths,
    which is already a tenth of the way on some seeds.
    """
    top = layer_top_score(record, "prefix_matching", 1)
    start, end = float(top.iloc[0]), float(top.iloc[-1])
    if end <= start:
        return float("nan"), float("nan")
    progress = ((top - start) / (end - start)).to_numpy()
    steps = record["step"].to_numpy()
    below = [progress < share for share in (low, high)]
    return tuple(float(steps[np.flatnonzero(b)[-1] + 1]) if b.any() else float(steps[0]) for b in below)


def steepest_drop(record: pd.DataFrame, column: str) -> float:
    """The probe step that ends the largest fall of ``column`` between two consecutive probes."""
    fall = -record[column].diff()
    return float(record["step"][fall.idxmax()])


def icl_scores(record: pd.DataFrame, settings: CircuitSettings = CIRCUIT) -> pd.Series:
    """The in-context learning score on held-out prose at every probe step."""
    return record["text_loss_by_position"].map(lambda losses: in_context_learning_score(
        torch.tensor([losses], dtype=torch.float64), settings.icl_early, settings.icl_late))


@torch.no_grad()
def ngram_baselines(train: torch.Tensor, held_out: torch.Tensor, vocab_size: int) -> dict[str, float]:
    """Held-out loss (nats per character) of the unigram and bigram models of the training text (add-one smoothing)."""
    unigram = torch.bincount(train, minlength=vocab_size).double() + 1.0  # (V,)
    pairs = torch.bincount(train[:-1] * vocab_size + train[1:], minlength=vocab_size ** 2).double()
    bigram = pairs.view(vocab_size, vocab_size) + 1.0  # (V, V)
    uni = -(unigram / unigram.sum()).log()[held_out[1:]].mean()
    bi = -(bigram / bigram.sum(dim=1, keepdim=True)).log()[held_out[:-1], held_out[1:]].mean()
    return {"unigram": float(uni), "bigram": float(bi)}


def circuit_summary(runs: Sequence[CircuitRun], settings: CircuitSettings = CIRCUIT) -> pd.DataFrame:
    """One row per seed: where the heads are, the circuit's composition scores, the phase, ICL and ablations."""
    rows = []
    for run in runs:
        end = run.record.iloc[-1]
        induction = induction_heads(end["prefix_matching"], settings.induction_threshold)
        reader = top_head(end["prefix_matching"], 1)
        writer = top_head(end["previous_token"], 0)
        k = torch.tensor(run.composition["K"])  # (H, H)
        others = [float(k[reader[1], h]) for h in range(k.shape[1]) if h != writer[1]]
        # the phase of a seed whose circuit never formed is not a phase: NaN (its layer-1 score only wanders)
        start, finish = transition(run.record) if any(l == 1 for l, _ in induction) else (float("nan"), float("nan"))
        icl = icl_scores(run.record, settings)
        steps = run.record["step"]
        before = steps < start  # the probes before the phase (none if it never rose)
        last_before = int(np.flatnonzero(before.to_numpy())[-1]) if before.any() else None
        at_end = int(np.flatnonzero((steps == finish).to_numpy())[0]) if not math.isnan(finish) else None
        prose = run.record["held_out_loss"]

        def at(series, index):
            return float(series.iloc[index]) if index is not None else float("nan")

        intact = run.advantage["intact"]
        rows.append({
            "seed": run.seed,
            "held-out loss": end["held_out_loss"],
            "induction heads, layer 0": sum(l == 0 for l, _ in induction),
            "induction heads, layer 1": sum(l == 1 for l, _ in induction),
            "top prefix matching, layer 1": max(end["prefix_matching"][1]),
            "top previous-token score, layer 0": max(end["previous_token"][0]),
            "K-composition": float(k[reader[1], writer[1]]),
            "K-composition at init": run.composition_at_init["K"][reader[1]][writer[1]],
            "Q-composition": run.composition["Q"][reader[1]][writer[1]],
            "V-composition": run.composition["V"][reader[1]][writer[1]],
            "K-composition, other layer-0 heads": max(others),
            "K-composition picks the previous-token head": int(int(k[reader[1]].argmax()) == writer[1]),
            "phase 10%": start, "phase 90%": finish, "phase width": finish - start,
            "steepest repeat-loss drop": steepest_drop(run.record, "later_repeat_loss"),
            "steepest prose-loss drop": steepest_drop(run.record, "held_out_loss"),
            "prose loss before the phase": at(prose, last_before),
            "prose loss at 90% of the phase": at(prose, at_end),
            "prose loss at the end": float(prose.iloc[-1]),
            "ICL score at step 0": float(icl.iloc[0]),
            "ICL score before the phase": at(icl, last_before),
            "ICL score at the end": float(icl.iloc[-1]),
            "copying score, top induction head": run.copying[reader[0]][reader[1]],
            "advantage intact": intact,
            "share left, induction heads zeroed": run.advantage["induction heads zeroed"] / intact,
            "share left, random other heads zeroed": run.advantage["random other heads zeroed"] / intact,
            "share left, previous-token head zeroed": run.advantage["previous-token head zeroed"] / intact,
        })
    return pd.DataFrame(rows).set_index("seed")


def circuit_claims(runs: Sequence[CircuitRun], settings: CircuitSettings = CIRCUIT) -> list[Claim]:
    """The capstone's conclusions about an ensemble (bounds chosen from the calibration record).

    How many seeds form the circuit (a seed forms all of it or none), and, over the seeds that do,
    where it is (layer 1 reads layer 0), what the weights say (K- against Q- and V-composition,
    against the other layer-0 heads and against initialization), what removing heads does, how
    sharp the phase is and where the repeat loss falls; over every seed, what the prose sees. A
    median "over the seeds with an induction head" is NaN, and its claim fails, if none has one.
    """
    table = circuit_summary(runs, settings)
    n = len(runs)
    vocabulary, train, held_out = capstone_corpus()
    bigram = ngram_baselines(train, held_out, vocabulary.size)["bigram"]
    formed = table["induction heads, layer 1"] > 0
    circuit = table[formed]  # the seeds with an induction head in layer 1
    k = circuit["K-composition"]
    inside = ((circuit["steepest repeat-loss drop"] >= circuit["phase 10%"])
              & (circuit["steepest repeat-loss drop"] <= circuit["phase 90%"]))

    def median(values) -> float:  # over the seeds that have a value (NaN if none: the claim then fails)
        values = pd.Series(values, dtype=float).dropna()
        return spread(values)["median"] if len(values) else float("nan")

    def med(column: str) -> float:
        return median(circuit[column])

    def share(mask) -> float:
        return float(mask.mean()) if len(mask) else float("nan")

    where = "seeds with an induction head"
    return [
        Claim(f"seeds (of {n}) with an induction head in layer 1 (prefix matching >= {settings.induction_threshold:g})",
              float(formed.sum()), ">=", 3),
        Claim("median top prefix-matching score in layer 0, every seed", spread(
            max(run.record["prefix_matching"].iloc[-1][0]) for run in runs)["median"], "<", 0.1),
        Claim(f"median top previous-token score in layer 0, {where}", med("top previous-token score, layer 0"),
              ">=", 0.5),
        Claim(f"share of the {where} whose K-composition exceeds the larger of Q- and V-composition by 0.2",
              share(k - circuit[["Q-composition", "V-composition"]].max(axis=1) >= 0.2), ">", 0.5),
        Claim(f"median K-composition minus the larger of Q- and V-composition (same two heads), {where}",
              median(k - circuit[["Q-composition", "V-composition"]].max(axis=1)), ">=", 0.2),
        Claim(f"median K-composition minus the same K-composition at initialization, {where}",
              median(k - circuit["K-composition at init"]), ">=", 0.15),
        Claim(f"median K-composition minus the largest with another layer-0 head, {where}",
              median(k - circuit["K-composition, other layer-0 heads"]), ">", 0.05),
        Claim(f"median repeat advantage left with the induction heads zeroed, as a share of intact, {where}",
              med("share left, induction heads zeroed"), "<=", 0.2),
        Claim(f"median repeat advantage left with the previous-token head zeroed, as a share of intact, {where}",
              med("share left, previous-token head zeroed"), "<=", 0.3),
        Claim(f"median repeat advantage left with as many random other heads zeroed, as a share of intact, {where}",
              med("share left, random other heads zeroed"), ">=", 0.4),  # 0.6 failed a calibration draw (0.47)
        Claim(f"median repeat advantage (nats), intact, {where}", med("advantage intact"), ">=", 3.0),
        Claim(f"median phase width, 10% to 90% of layer 1's rise (steps), {where}", med("phase width"), "<=", 600),
        Claim(f"share of the {where} whose steepest fall of the second-copy loss lies within the phase",
              share(inside), ">", 0.5),
        Claim(f"median rise of the held-out prose loss across the phase (nats), {where}",
              median(circuit["prose loss at 90% of the phase"] - circuit["prose loss before the phase"]), ">", 0.0),
        Claim("size of the median change of the ICL score on held-out prose, step 0 to the end (nats), every seed",
              abs(spread(table["ICL score at the end"] - table["ICL score at step 0"])["median"]), "<", 0.25),
        Claim("largest held-out prose loss over seeds minus the bigram model's (nats)",
              float(table["held-out loss"].max()) - bigram, "<", 0.0),
    ]
