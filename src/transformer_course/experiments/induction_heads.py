"""The capstone: a small decoder-only model trained on the course's prose, and its induction heads.

The model (``AttentionOnlyLM``) is a two-layer, attention-only, Pre-LN decoder built from the
package's blocks: token embeddings, causal ``MultiHeadAttention`` projections with rotary positions
(``rotary_embedding``), ``LayerNorm`` and a linear unembedding. Its keys may be *smeared*
(Olsson et al., 2022, the "smeared key" architecture): head h's key at position j is
sigma(a_h) k_j + (1 - sigma(a_h)) k_{j-1}, with one learned a_h per head, so that a single head can
match "the token before the key" without a previous-token head in an earlier layer.

Why the training mixture and the smeared key: Olsson et al. saw induction heads form after a few
billion tokens of natural text; a CPU chapter sees about half a million. Every training batch
therefore mixes windows of the course's text with sequences that are a random string repeated
(period drawn at random, so no fixed offset predicts them): on those, only copying from context
lowers the loss. ``run_induction`` trains one seed with the package's ``fit`` and measures, every
``eval_every`` steps, the held-out loss, the in-context learning score, the loss on the first and
later copies of repeated random sequences and every head's prefix-matching and previous-token
scores (``transformer_course.measure.induction``); at the end, every head's copying score and the
repeat advantage with the identified induction heads (or as many other heads) zeroed.

Shape legend: B batch, T positions, D width, H heads, Dh = D / H, V vocabulary, L layers.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from transformer_course._exhibit import exhibit
from transformer_course._validation import check_instance, check_int, check_tensor
from transformer_course.measure.induction import (copying_score, in_context_learning_score, prefix_matching_score,
                                                  previous_token_score, repeat_losses)
from transformer_course.nn.attention import MultiHeadAttention
from transformer_course.nn.normalization import LayerNorm
from transformer_course.nn.positional import rotary_embedding
from .claims import Claim, spread
from .corpus import CharVocabulary
from .induction_circuit import (Probes, capstone_corpus, make_probes, mixture_batches, next_token_loss,
                                periodic_random_tokens)
from .parallel import map_runs
from .seeds import ensemble_seeds
from .training import fit, seeded

Head = tuple[int, int]  # (layer, head)


@dataclass(frozen=True)
class CapstoneSettings:
    """Everything the chapter's training and measurements depend on (the calibration reads the same)."""

    d_model: int = 32
    num_heads: int = 4
    num_layers: int = 2
    smeared_key: bool = True
    context: int = 64  # T, training window
    batch_size: int = 16
    repeated_fraction: float = 0.5  # share of each batch that is a repeated random string
    min_period: int = 8  # periods of the repeated training strings: min_period .. context // 2
    lr: float = 1e-2
    steps: int = 500
    eval_every: int = 25
    probe_sequences: int = 32  # repeated random sequences of period context // 2 per probe
    probe_windows: int = 64  # held-out text windows per probe
    icl_early: range = range(4, 12)  # in-context learning score: mean loss over the positions icl_late ...
    icl_late: range = range(55, 63)  # ... minus over icl_early (bands: one position of 64 windows is too noisy)
    induction_threshold: float = 0.3  # a head whose prefix-matching score reaches this is an induction head
    ensemble: int = 8
    workers: int = 2


CAPSTONE = CapstoneSettings()
EXPERIMENT = "induction heads"  # the ensemble's name for seeds.ensemble_seeds


class InductionAttention(nn.Module):
    """Causal self-attention with rotary positions and optionally smeared keys.

    The four projections are those of a :class:`MultiHeadAttention` (``self.attention``).

    Shape:
        x (B, T, D) -> (B, T, D), plus the weights (B, H, T, T) when ``need_weights=True``.
    """

    def __init__(self, d_model: int, num_heads: int, smeared_key: bool = False) -> None:
        super().__init__()
        self.attention = MultiHeadAttention(d_model, num_heads)
        if self.attention.d_head % 2:
            raise ValueError(f"rotary positions need an even head width, got d_model={d_model}, num_heads={num_heads}")
        # sigma(0) = 1/2: a smeared key starts as the mean of the key and its predecessor's
        self.smear = nn.Parameter(torch.zeros(num_heads, 1, 1)) if smeared_key else None

    def forward(self, x: torch.Tensor, need_weights: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        mha = self.attention
        q = mha.split_heads(mha.q_proj(x))  # (B, H, T, Dh)
        k = mha.split_heads(mha.k_proj(x))  # (B, H, T, Dh)
        v = mha.split_heads(mha.v_proj(x))  # (B, H, T, Dh)
        if self.smear is not None:
            keep = torch.sigmoid(self.smear)  # (H, 1, 1)
            previous = F.pad(k, (0, 0, 1, 0))[:, :, :-1]  # (B, H, T, Dh): k_{j-1}, zero at j = 0
            k = keep * k + (1 - keep) * previous  # (B, H, T, Dh)
        q, k = rotary_embedding(q), rotary_embedding(k)  # rotated by position
        if not need_weights:
            heads = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, Dh)
            return mha.out_proj(mha.merge_heads(heads)), None
        t = x.shape[1]
        scores = q @ k.transpose(-2, -1) / math.sqrt(mha.d_head)  # (B, H, T, T)
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()  # (T, T)
        weights = scores.masked_fill(~causal, float("-inf")).softmax(dim=-1)  # (B, H, T, T)
        return mha.out_proj(mha.merge_heads(weights @ v)), weights


class AttentionOnlyLM(nn.Module):
    """logits = W_U norm(x_L), x_l = x_{l-1} + Attn_l(norm_l(x_{l-1})), x_0 = Embed(tokens).

    A decoder-only, attention-only, Pre-LN language model (no FFN: every computation is attention,
    which makes each head's job readable). Positions enter through the rotary queries and keys.

    Shape:
        tokens (B, T) -> logits (B, T, V); with ``need_weights=True`` also a list of L (B, H, T, T).
    """

    def __init__(self, vocab_size: int, d_model: int = 32, num_heads: int = 4, num_layers: int = 2,
                 smeared_key: bool = False) -> None:
        super().__init__()
        self.vocab_size = check_int("vocab_size", vocab_size, minimum=2)
        check_int("num_layers", num_layers, minimum=1)
        self.embed = nn.Embedding(vocab_size, d_model)
        self.norms = nn.ModuleList(LayerNorm(d_model) for _ in range(num_layers))
        self.layers = nn.ModuleList(InductionAttention(d_model, num_heads, smeared_key) for _ in range(num_layers))
        self.norm = LayerNorm(d_model)
        self.unembed = nn.Linear(d_model, vocab_size)

    @property
    def num_heads(self) -> int:
        return self.layers[0].attention.num_heads

    def forward(self, tokens: torch.Tensor, need_weights: bool = False):
        check_tensor("tokens", tokens, ndim=2)
        if tokens.is_floating_point() or tokens.numel() and (tokens.min() < 0 or tokens.max() >= self.vocab_size):
            raise ValueError(f"tokens must be integer ids in [0, {self.vocab_size})")
        x = self.embed(tokens)  # (B, T, D)
        weights = []
        for norm, layer in zip(self.norms, self.layers):
            out, w = layer(norm(x), need_weights)
            x = x + out  # (B, T, D)
            weights.append(w)
        logits = self.unembed(self.norm(x))  # (B, T, V)
        return (logits, weights) if need_weights else logits

    def ov_circuits(self) -> torch.Tensor:
        """(L, H, V, V): what each head writes to the logits when it reads one token (rows: read, columns: written).

        Embed -> layer norm gain -> W_V^h -> W_O^h -> final norm gain -> W_U: the direct path from the
        attended token to the logits, with LayerNorm's centring and scaling left out (its gains kept).
        """
        rows = []
        with torch.no_grad():
            for norm, layer in zip(self.norms, self.layers):
                mha, per_head = layer.attention, []
                for h in range(mha.num_heads):
                    cols = slice(h * mha.d_head, (h + 1) * mha.d_head)
                    read = (self.embed.weight * norm.weight) @ mha.v_proj.weight[cols].T  # (V, Dh)
                    written = mha.out_proj.weight[:, cols].T * self.norm.weight  # (Dh, D)
                    per_head.append(read @ written @ self.unembed.weight.T)  # (V, V)
                rows.append(torch.stack(per_head))
        return torch.stack(rows)  # (L, H, V, V)


def ablate_heads(model: AttentionOnlyLM, heads: Iterable[Head]) -> AttentionOnlyLM:
    """A copy of ``model`` with the output of every (layer, head) in ``heads`` zeroed.

    Head h of layer l writes through columns h*Dh ... (h+1)*Dh - 1 of that layer's W^O; zeroing
    them removes exactly its contribution. The original model is not changed.
    """
    check_instance("model", model, AttentionOnlyLM)
    copied = copy.deepcopy(model)
    heads = list(heads)
    with torch.no_grad():
        for head in heads:
            if (not isinstance(head, tuple) or len(head) != 2 or not 0 <= head[0] < len(copied.layers)
                    or not 0 <= head[1] < copied.num_heads):
                raise ValueError(f"heads must be (layer, head) pairs within {len(copied.layers)} layers and "
                                 f"{copied.num_heads} heads, got {head!r}")
            mha = copied.layers[head[0]].attention
            mha.out_proj.weight[:, head[1] * mha.d_head:(head[1] + 1) * mha.d_head] = 0.0
    return copied


@torch.no_grad()
def generate(model: nn.Module, prompt: torch.Tensor, new_tokens: int, temperature: float = 0.0,
             generator: torch.Generator | None = None, context: int | None = None) -> torch.Tensor:
    """Extend ``prompt`` (1-D ids) by ``new_tokens`` tokens, one at a time.

    temperature 0 takes the argmax (greedy decoding); temperature tau > 0 samples from
    softmax(logits / tau) with ``generator``. With ``context`` the model reads only the last
    ``context`` tokens (the window it was trained on).

    Returns:
        (len(prompt) + new_tokens,) ids.
    """
    check_instance("model", model, nn.Module, "a language model, tokens (1, T) -> logits (1, T, V)")
    check_tensor("prompt", prompt, ndim=1)
    new_tokens = check_int("new_tokens", new_tokens, minimum=1)
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or temperature < 0:
        raise ValueError(f"temperature must be a number >= 0, got {temperature!r}")
    if temperature > 0 and not isinstance(generator, torch.Generator):
        raise TypeError("sampling (temperature > 0) needs a torch.Generator")
    if len(prompt) == 0:
        raise ValueError("prompt must hold at least one token")
    tokens = prompt.clone()
    for _ in range(new_tokens):
        window = tokens if context is None else tokens[-check_int("context", context, minimum=1):]
        logits = model(window.unsqueeze(0))[0, -1]  # (V,)
        if temperature == 0:
            following = logits.argmax()
        else:
            following = torch.multinomial((logits / temperature).softmax(-1), 1, generator=generator)[0]
        tokens = torch.cat((tokens, following.view(1)))
    return tokens


def token_losses(model: AttentionOnlyLM, tokens: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Per-token losses (B, T - 1) of predicting tokens 1 .. T-1, and the attention weights."""
    with torch.no_grad():
        logits, weights = model(tokens, need_weights=True)  # (B, T, V)
        losses = F.cross_entropy(logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten(), reduction="none")
    return losses.view(tokens.shape[0], -1), weights


def measure(model: AttentionOnlyLM, probes: Probes, settings: CapstoneSettings = CAPSTONE) -> dict:
    """One row of a training record: held-out loss, ICL score, repeat losses, per-head scores (L, H)."""
    s = settings
    text_losses, _ = token_losses(model, probes.held_out)  # (M, T - 1)
    repeat, weights = token_losses(model, probes.repeated)  # (N, T - 1)
    first, later = repeat_losses(repeat, probes.period)
    return {
        "held_out_loss": float(text_losses.mean()),
        "first_repeat_loss": first,
        "later_repeat_loss": later,
        "text_loss_by_position": text_losses.mean(dim=0).tolist(),  # (T - 1,)
        "repeat_loss_by_position": repeat.mean(dim=0).tolist(),  # (T - 1,)
        "prefix_matching": torch.stack([prefix_matching_score(w, probes.period) for w in weights]).tolist(),
        "previous_token": torch.stack([previous_token_score(w) for w in weights]).tolist(),
    }


def icl_scores(record: pd.DataFrame, settings: CapstoneSettings = CAPSTONE) -> pd.Series:
    """The in-context learning score at every probe step, from the held-out loss by position."""
    return record["text_loss_by_position"].map(lambda losses: in_context_learning_score(
        torch.tensor([losses], dtype=torch.float64), settings.icl_early, settings.icl_late))


def icl_change_at_phase(record: pd.DataFrame, settings: CapstoneSettings = CAPSTONE, probes: int = 4) -> float:
    """Mean ICL score of the last ``probes`` probes minus that of the ``probes`` probes before the phase step.

    Negative when the in-context learning score falls as the induction heads form. NaN when no head
    reaches the threshold or the phase step is the first probe.
    """
    check_int("probes", probes, minimum=1)
    step = phase_step(record, settings.induction_threshold)
    icl = icl_scores(record, settings)
    before = icl[record["step"] < step].tail(probes)
    if math.isnan(step) or before.empty:
        return float("nan")
    return float(icl.tail(probes).mean() - before.mean())


def training_key(settings: CapstoneSettings = CAPSTONE) -> tuple:
    """The settings a run's record depends on (not the analysis thresholds, the ensemble size or the workers)."""
    analysis = {"icl_early", "icl_late", "induction_threshold", "ensemble", "workers"}
    return tuple((name, getattr(settings, name)) for name in settings.__dataclass_fields__ if name not in analysis)


def induction_heads(prefix_matching: Sequence[Sequence[float]], threshold: float) -> list[Head]:
    """The (layer, head) pairs whose prefix-matching score reaches ``threshold`` (the top one if none does)."""
    scores = torch.tensor(prefix_matching, dtype=torch.float64)  # (L, H)
    chosen = [(int(l), int(h)) for l, h in (scores >= threshold).nonzero().tolist()]
    if not chosen:
        flat = int(scores.argmax())
        chosen = [(flat // scores.shape[1], flat % scores.shape[1])]
    return chosen


def control_heads(prefix_matching: Sequence[Sequence[float]], chosen: Sequence[Head]) -> list[Head]:
    """As many heads as ``chosen``, from the others, lowest prefix-matching score first (the control ablation)."""
    scores = torch.tensor(prefix_matching, dtype=torch.float64)  # (L, H)
    others = [(l, h) for l in range(scores.shape[0]) for h in range(scores.shape[1]) if (l, h) not in chosen]
    others.sort(key=lambda head: (float(scores[head]), head))
    return others[:len(chosen)]


COPY_PROMPT = ("|Vk9J#qZ| is |Vk9", "J#qZ|")  # (prompt, the continuation an induction head copies)


def copies_from_prompt(model: AttentionOnlyLM, vocabulary: CharVocabulary, prompt: tuple[str, str] = COPY_PROMPT,
                       context: int = CAPSTONE.context) -> bool:
    """Whether greedy decoding continues ``prompt[0]`` with exactly ``prompt[1]``: a string of rare
    characters seen once earlier in the prompt, which no statistic of the training text predicts."""
    text, expected = prompt
    out = generate(model, vocabulary.encode(text), len(expected), context=context)
    return vocabulary.decode(out[len(text):]) == expected


def repeat_advantage(model: AttentionOnlyLM, tokens: torch.Tensor, period: int) -> float:
    """Loss on the first copy minus loss on the later copies (nats; > 0 when the model copies)."""
    losses, _ = token_losses(model, tokens)
    first, later = repeat_losses(losses, period)
    return first - later


@dataclass
class InductionRun:
    """One seed's training record and end-of-training measurements."""

    seed: int
    losses: list[float]
    record: pd.DataFrame  # one row per probe step
    induction: list[Head]
    control: list[Head]
    copying: list[list[float]]  # (L, H)
    advantage: dict[str, float]  # repeat advantage: intact, induction heads zeroed, control heads zeroed
    state: dict = field(repr=False, default_factory=dict)  # the trained weights

    def model(self, vocab_size: int, settings: CapstoneSettings = CAPSTONE) -> AttentionOnlyLM:
        model = build_model(vocab_size, settings)
        model.load_state_dict(self.state)
        return model.eval()


def build_model(vocab_size: int, settings: CapstoneSettings = CAPSTONE) -> AttentionOnlyLM:
    s = settings
    return AttentionOnlyLM(vocab_size, s.d_model, s.num_heads, s.num_layers, s.smeared_key)


def run_induction(seed: int, settings: CapstoneSettings = CAPSTONE) -> InductionRun:
    """Train one seed (weights, batches and probes all from ``seed``) and measure it; see the module docstring."""
    s = settings
    seed = check_int("seed", seed, minimum=0)
    vocabulary, train, held_out = capstone_corpus()
    with seeded(seed):
        model = build_model(vocabulary.size, s)
    probes = make_probes(held_out, vocabulary.size, seed, s)
    draw = mixture_batches(train, vocabulary.size, s)
    rows, step = [], [0]

    def make_batch(generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        if step[0] % s.eval_every == 0:  # the model before this step's update
            rows.append({"step": step[0], **measure(model, probes, s)})
        step[0] += 1
        return draw(generator)

    losses = fit(model, make_batch, next_token_loss, s.steps, lr=s.lr, seed=seed)
    rows.append({"step": s.steps, **measure(model, probes, s)})
    record = pd.DataFrame(rows)
    final = rows[-1]["prefix_matching"]
    chosen = induction_heads(final, s.induction_threshold)
    control = control_heads(final, chosen)
    advantage = {
        "intact": repeat_advantage(model, probes.repeated, probes.period),
        "induction heads zeroed": repeat_advantage(ablate_heads(model, chosen), probes.repeated, probes.period),
        "other heads zeroed": repeat_advantage(ablate_heads(model, control), probes.repeated, probes.period),
    }
    copying = copying_score(model.ov_circuits()).tolist()
    return InductionRun(seed, losses, record, chosen, control, copying, advantage,
                        {k: v.detach().clone() for k, v in model.state_dict().items()})


def run_ensemble(base_seed: int, settings: CapstoneSettings = CAPSTONE,
                 run: Callable[[int, CapstoneSettings], InductionRun] = run_induction) -> list[InductionRun]:
    """The seeds ``ensemble_seeds(base_seed, EXPERIMENT, settings.ensemble)``, trained by ``settings.workers`` processes."""
    seeds = ensemble_seeds(base_seed, EXPERIMENT, settings.ensemble)
    return map_runs(run, [(seed, settings) for seed in seeds], workers=settings.workers)


def top_prefix_matching(record: pd.DataFrame) -> pd.Series:
    """Per probe step, the highest prefix-matching score of any head."""
    return record["prefix_matching"].map(lambda scores: max(max(row) for row in scores))


def phase_step(record: pd.DataFrame, threshold: float) -> float:
    """The first probe step at which some head's prefix-matching score reaches ``threshold`` (NaN if none)."""
    top = top_prefix_matching(record)
    reached = record["step"][top >= threshold]
    return float(reached.iloc[0]) if len(reached) else float("nan")


@exhibit
def ensemble_summary(runs: Sequence[InductionRun], settings: CapstoneSettings = CAPSTONE) -> pd.DataFrame:
    """One row per seed: held-out loss, ICL score, repeat losses, scores and ablation at the end of training."""
    rows = []
    for run in runs:
        end = run.record.iloc[-1]
        icl = icl_scores(run.record, settings)
        copying = [run.copying[l][h] for l, h in run.induction]
        rows.append({
            "seed": run.seed,
            "held-out loss": end["held_out_loss"],
            "ICL score": float(icl.iloc[-1]),
            "ICL score at step 0": float(icl.iloc[0]),
            "ICL change at the phase": icl_change_at_phase(run.record, settings),
            "first repeat loss": end["first_repeat_loss"],
            "later repeat loss": end["later_repeat_loss"],
            "induction heads": ", ".join(f"{l}.{h}" for l, h in run.induction),
            "top prefix matching": float(top_prefix_matching(run.record).iloc[-1]),
            "induction copying score": min(copying),
            "phase step": phase_step(run.record, settings.induction_threshold),
            **{f"advantage, {k}": v for k, v in run.advantage.items()},
        })
    return pd.DataFrame(rows).set_index("seed")


def capstone_claims(runs: Sequence[InductionRun], settings: CapstoneSettings = CAPSTONE) -> list[Claim]:
    """The chapter's conclusions about an ensemble (bounds chosen from the 30-base-seed calibration).

    A seed whose heads never reach the threshold has no phase step: it counts as never (infinitely
    late) in the median phase step, and its ICL change is undefined (left out of that median).
    """
    table = ensemble_summary(runs, settings)
    n = len(runs)
    formed = table["phase step"].notna()
    intact = table["advantage, intact"]
    return [
        Claim(f"seeds (of {n}) in which a head reaches prefix matching {settings.induction_threshold:g} within "
              f"{settings.steps} steps", float(formed.sum()), ">", n - 2),
        Claim("median phase step (training step)", float(table["phase step"].fillna(math.inf).median()), "<=", 400),
        Claim("median top prefix-matching score at step 0", spread(
            float(top_prefix_matching(run.record).iloc[0]) for run in runs)["median"], "<=", 0.1),
        Claim("median top prefix-matching score at the end", spread(table["top prefix matching"])["median"], ">=", 0.5),
        Claim("median copying score of the induction heads", spread(table["induction copying score"])["median"],
              ">=", 0.9),
        Claim("median repeat advantage (nats), intact", spread(intact)["median"], ">=", 3.0),
        Claim(f"seeds (of {n}) with a repeat advantage of at least 1 nat", float((intact >= 1.0).sum()), ">", n - 2),
        Claim("median ICL score change, last 4 probes minus the 4 before the phase step (nats)",
              float(table["ICL change at the phase"].median()), "<=", -0.02),
        Claim("median repeat advantage left with the induction heads zeroed, as a share of intact",
              spread(table["advantage, induction heads zeroed"] / intact)["median"], "<=", 0.2),
        Claim("median repeat advantage left with as many other heads zeroed, as a share of intact",
              spread(table["advantage, other heads zeroed"] / intact)["median"], ">=", 0.8),
    ]
