"""Expert load of a trained mixture-of-experts FFN, with and without Switch's load-balancing loss.

Shape legend: N tokens, D = d_model, E experts, k experts per token, C clusters.

A router is free to send most tokens to a few experts; Switch (Fedus, Zoph and Shazeer, 2022)
adds the auxiliary loss E sum_e f_e P_e (``MoEFeedForward.load_balancing_loss``) to the task loss,
weighted by a small alpha (they use 0.01 beside a cross-entropy loss), to keep the load near
uniform. Our runs are short (50 steps) and our task loss is a small mean squared error, so the
study uses alpha = 0.05. This module trains a
``MoEFeedForward`` alone on a token-wise toy task and measures the fraction of the token-slots each
expert receives on held-out tokens, for alpha = 0 and alpha > 0, over an ensemble of seeds.

The task ("clusters"): a token x in R^D is drawn around one of C random centres, and its target is
tanh(A_c x) with a random D x D matrix A_c of its cluster: C different functions, one per region
of the input space, which experts can split between them. Each seed draws its own task, weights
and batches.

* :func:`make_cluster_task`, :func:`make_cluster_batch`: the task.
* :func:`moe_run`: one trained layer (seed, alpha) and its expert load, a pure function of both.
* :func:`expert_load_ensemble`: alpha in ``MOE_SETTINGS["balance_weights"]`` x seeds, in worker
  processes; :func:`expert_load_table`, :func:`moe_claims`: its summary and calibrated conclusions.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pandas as pd
import torch
import torch.nn.functional as F

from transformer_course._exhibit import exhibit
from transformer_course._validation import check_instance, check_int
from transformer_course.nn.feedforward import MoEFeedForward
from .claims import Claim
from .parallel import map_runs
from .training import fit, seeded

EXPERIMENT = "expert load"  # the ensemble's name for seeds.ensemble_seeds
MOE_SETTINGS = {  # DL0031's study, shared by the chapter and benchmarks/calibration/dl0031_feed_forward_network.py
    "d_model": 16,
    "d_ff": 32,
    "num_experts": 8,
    "top_k": 2,
    "clusters": 8,
    "steps": 50,
    "batch_size": 128,
    "lr": 1e-2,
    "balance_weights": (0.0, 0.05),  # alpha: without the balancing loss, and with it
    "test_size": 1024,
    "num_seeds": 8,
}
TASK_SEED_OFFSET = 50_000  # seed + offset draws the run's task, apart from its weights and batches
TEST_SEED_OFFSET = 60_000


@dataclass(frozen=True)
class ClusterTask:
    """C centres (C, D) and C target maps (C, D, D) of the clusters task."""

    centers: torch.Tensor
    maps: torch.Tensor


def make_cluster_task(generator: torch.Generator, d_model: int = 16, clusters: int = 8,
                      spread: float = 3.0) -> ClusterTask:
    """Draw C centres with standard deviation ``spread`` and C maps A_c with entries of variance 1/D."""
    check_instance("generator", generator, torch.Generator, "torch.Generator")
    d_model = check_int("d_model", d_model, minimum=1)
    clusters = check_int("clusters", clusters, minimum=1)
    centers = spread * torch.randn(clusters, d_model, generator=generator)  # (C, D)
    maps = torch.randn(clusters, d_model, d_model, generator=generator) / d_model ** 0.5  # (C, D, D)
    return ClusterTask(centers, maps)


def make_cluster_batch(task: ClusterTask, size: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``size`` tokens x = centre_c + N(0, I) of uniformly drawn clusters c, and their targets tanh(A_c x).

    Returns:
        x (N, D) and y (N, D).
    """
    check_instance("task", task, ClusterTask)
    size = check_int("size", size, minimum=1)
    check_instance("generator", generator, torch.Generator, "torch.Generator")
    c = torch.randint(0, task.centers.shape[0], (size,), generator=generator)  # (N,)
    x = task.centers[c] + torch.randn(size, task.centers.shape[1], generator=generator)  # (N, D)
    y = torch.tanh(torch.einsum("nij,nj->ni", task.maps[c], x))  # (N, D)
    return x, y


def expert_fractions(moe: MoEFeedForward) -> torch.Tensor:
    """The fraction of the last forward pass's token-slots (N x k) that each expert received, (E,), sums to 1."""
    check_instance("moe", moe, MoEFeedForward)
    if moe.expert_index is None:
        raise RuntimeError("expert_fractions needs a forward pass first")
    return F.one_hot(moe.expert_index, moe.num_experts).double().mean(dim=(0, 1))  # (E,)


@dataclass
class MoERun:
    """One trained layer: its seed, alpha, expert loads (E,) before and after training, and test loss."""

    seed: int
    balance_weight: float
    load_before: list[float]
    load_after: list[float]
    test_mse: float


def moe_run(seed: int, balance_weight: float, steps: int | None = None) -> MoERun:
    """Train ``MoEFeedForward`` with ``MOE_SETTINGS`` on the clusters task; loss = MSE + alpha * balancing loss.

    The task comes from ``seed + TASK_SEED_OFFSET``, the weights and batches from ``seed`` (``fit``:
    one thread), the held-out tokens from ``seed + TEST_SEED_OFFSET``; the expert loads are measured
    on those tokens with the initial router and with the trained one.

    Args:
        seed: the run's seed (>= 0).
        balance_weight: alpha >= 0 (0: no balancing loss).
        steps: Adam steps (default ``MOE_SETTINGS["steps"]``).

    Raises:
        TypeError, ValueError: for a negative seed or alpha.

    Fedus, Zoph and Shazeer, 2022 (Switch Transformer), section 2.2.
    """
    seed = check_int("seed", seed, minimum=0)
    check_instance("balance_weight", balance_weight, (int, float), "a number")
    if isinstance(balance_weight, bool) or balance_weight < 0:
        raise ValueError(f"balance_weight must be >= 0, got {balance_weight!r}")
    s = MOE_SETTINGS
    steps = s["steps"] if steps is None else check_int("steps", steps, minimum=1)
    task = make_cluster_task(torch.Generator().manual_seed(seed + TASK_SEED_OFFSET), s["d_model"], s["clusters"])
    x_test, y_test = make_cluster_batch(task, s["test_size"], torch.Generator().manual_seed(seed + TEST_SEED_OFFSET))
    with seeded(seed):
        moe = MoEFeedForward(s["d_model"], s["d_ff"], s["num_experts"], s["top_k"])
    with torch.no_grad():
        moe(x_test)
    before = expert_fractions(moe).tolist()

    def loss_fn(model: MoEFeedForward, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x, y = batch
        mse = F.mse_loss(model(x), y)
        return mse + balance_weight * model.load_balancing_loss() if balance_weight else mse

    fit(moe, lambda g: make_cluster_batch(task, s["batch_size"], g), loss_fn, steps, lr=s["lr"], seed=seed)
    with torch.no_grad():
        test_mse = float(F.mse_loss(moe(x_test), y_test))
    return MoERun(seed, float(balance_weight), before, expert_fractions(moe).tolist(), test_mse)


def expert_load_ensemble(seeds: Iterable[int], balance_weights: Sequence[float] = MOE_SETTINGS["balance_weights"],
                         workers: int = 1) -> pd.DataFrame:
    """:func:`moe_run` for every alpha and seed; one row per (alpha, seed, expert).

    ``workers`` processes train runs side by side (``parallel.map_runs``); each run is a function of
    (seed, alpha) alone, so the result does not depend on the number of workers.

    Returns:
        Long DataFrame with columns "balance weight", "seed", "expert rank" (1 = the run's busiest
        expert after training), "load before", "load after" (fractions of the token-slots) and
        "test mse" (the run's, repeated on its rows).
    """
    seeds = [check_int("seeds", s, minimum=0) for s in seeds]
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be a non-empty collection of distinct ints >= 0, got {seeds}")
    weights = [float(w) for w in balance_weights]
    if not weights:
        raise ValueError("balance_weights must hold at least one alpha, got none")
    keys = [(seed, w) for w in weights for seed in seeds]
    return runs_frame(map_runs(moe_run, keys, workers))


def runs_frame(runs: Iterable[MoERun]) -> pd.DataFrame:
    """The long table of :func:`expert_load_ensemble` from its runs (experts ranked by load after training)."""
    records = []
    for run in runs:
        check_instance("runs", run, MoERun)
        order = sorted(range(len(run.load_after)), key=lambda e: -run.load_after[e])  # busiest first
        before_sorted = sorted(run.load_before, reverse=True)  # the initial router's loads, also ranked
        for rank, e in enumerate(order, start=1):
            records.append({"balance weight": run.balance_weight, "seed": run.seed, "expert rank": rank,
                            "load before": before_sorted[rank - 1], "load after": run.load_after[e],
                            "test mse": run.test_mse})
    if not records:
        raise ValueError("runs must hold at least one run, got none")
    return pd.DataFrame.from_records(records)


@exhibit
def expert_load_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Per alpha: median (and range over seeds) of the busiest expert's load, the idlest's, and the test MSE.

    Raises:
        TypeError, ValueError: for a frame without the columns of :func:`expert_load_ensemble`.
    """
    check_instance("frame", frame, pd.DataFrame, "pandas.DataFrame")
    needed = {"balance weight", "seed", "expert rank", "load before", "load after", "test mse"}
    if frame.empty or needed - set(frame.columns):
        raise ValueError(f"frame must be a non-empty table with columns {sorted(needed)}")
    per_run = frame.groupby(["balance weight", "seed"]).agg(
        busiest=("load after", "max"), idlest=("load after", "min"), busiest_before=("load before", "max"),
        mse=("test mse", "first"))
    rows = {}
    for w, group in per_run.groupby(level="balance weight"):
        rows[w] = {"runs": len(group),
                   "busiest expert before training, median": group["busiest_before"].median(),
                   "busiest expert, median": group["busiest"].median(), "busiest expert, min": group["busiest"].min(),
                   "busiest expert, max": group["busiest"].max(),
                   "idlest expert, median": group["idlest"].median(), "idlest expert, min": group["idlest"].min(),
                   "test MSE, median": group["mse"].median()}
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("balancing weight alpha")


def moe_claims(frame: pd.DataFrame) -> list[Claim]:
    """The chapter's conclusions about the expert load (the bounds come from the calibration record)."""
    table = expert_load_table(frame)
    if 0.0 not in table.index or len(table) < 2:
        raise ValueError(f"frame must hold runs with alpha = 0 and with an alpha > 0, got {list(table.index)}")
    alpha = max(table.index)
    off, on = table.loc[0.0], table.loc[alpha]
    uniform = 1 / MOE_SETTINGS["num_experts"]
    return [
        Claim(f"alpha = {alpha:g}: busiest expert's share of the token-slots, median over seeds (uniform: {uniform:g})",
              float(on["busiest expert, median"]), "<=", 0.2),
        Claim("alpha = 0: busiest expert's share of the token-slots, median over seeds",
              float(off["busiest expert, median"]), ">=", 0.15),  # "well over 1/8": 20% over it
        Claim(f"busiest expert's share, medians: alpha = 0 minus alpha = {alpha:g}",
              float(off["busiest expert, median"] - on["busiest expert, median"]), ">", 0.0),  # "falls"
        Claim(f"alpha = {alpha:g}: idlest expert's share, median over seeds", float(on["idlest expert, median"]),
              ">=", 0.06),
        Claim("alpha = 0: idlest expert's share, median over seeds", float(off["idlest expert, median"]), "<", 0.075),
        Claim(f"test MSE, medians: alpha = {alpha:g} over alpha = 0", float(on["test MSE, median"] / off["test MSE, median"]),
              "<", 1.1),  # two-sided: "within 10%", either way
        Claim(f"test MSE, medians: alpha = {alpha:g} over alpha = 0 (lower side)",
              float(on["test MSE, median"] / off["test MSE, median"]), ">", 0.9),
    ]
