"""What dilation buys and what it costs, trained: one layer of w keys, spaced 1 or d apart, asked for a near or a far token.

Shape legend: B batch, T sequence length, K number of symbols, E models trained together.

The task is DL0028's "copy from D back" (:func:`.window_reach.make_reach_batch`): T random symbols
end in a query token, and the model must output, at the last position, the symbol D positions
from the end (the query counts as 1, so the answer sits D - 1 positions before it). The model is
DL0028's reader with one Pre-LN encoder layer whose causal mask gives every position w keys:
itself and the w - 1 before it (the plain window, ``keys spaced`` 1), or itself and the keys d,
2d, ..., (w - 1) d before it (the dilated window, ``keys spaced`` d; Longformer's pattern, causal).

With one layer the last position reads the answer directly or not at all, so what each mask can
learn is decided by its row: the plain window reads the D - 1 <= w - 1 nearest positions, the
dilated one only the multiples of d out to (w - 1) d. The default grid asks both masks three
distances: one only the plain window reaches (local detail: D - 1 = 2), one both reach
(D - 1 = 3 = d), and one only the dilated window reaches (D - 1 = 9 = 3d). Where the answer is out
of a mask's reach the logits do not depend on it, so no weights beat chance (1 / K) in expectation;
where it is in reach, training finds it. Seed s gives both masks the same initial weights and the
same training sequences (a paired comparison); the models train together as one
:class:`.window_reach.ReaderEnsemble`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd
import torch

from transformer_course._exhibit import exhibit
from transformer_course._validation import check_instance, check_int
from transformer_course.measure.receptive_field import reachability
from .claims import Claim
from .parallel import map_runs, split_evenly
from .training import seeded
from .window_reach import ReachGrid, WindowedReader, _check_task, reach_mask, train_readers


@dataclass(frozen=True)
class DilationReach:
    """Settings of DL0029's experiment (the chapter and its calibration share them).

    Attributes:
        window: w, keys per query of both masks.
        dilation: d, the gap between the dilated mask's keys.
        distances: the distances D asked of both masks.
        seq_len, num_symbols: the task (T positions, K symbols).
        steps, batch_size, lr: training of every model (Adam, no gradient clipping).
        d_model, num_heads, d_ff: the readers' sizes.
        num_examples: held-out sequences per model for the final accuracy.
        threshold, smooth: "steps to threshold", as in :class:`.window_reach.ReachGrid`.
    """

    window: int = 4
    dilation: int = 3
    distances: tuple[int, ...] = (3, 4, 10)
    seq_len: int = 12
    num_symbols: int = 8
    steps: int = 150
    batch_size: int = 32
    lr: float = 3e-3
    d_model: int = 16
    num_heads: int = 2
    d_ff: int = 32
    num_examples: int = 512
    threshold: float = 0.9
    smooth: int = 25

    def __post_init__(self) -> None:
        check_int("window", self.window, minimum=2)
        check_int("dilation", self.dilation, minimum=2)
        if not self.distances:
            raise ValueError(f"distances must be non-empty, got {self.distances}")
        for distance in self.distances:
            _check_task(self.seq_len, distance, self.num_symbols)
        self.training()  # validates the training settings

    def training(self) -> ReachGrid:
        """The task and training settings in the form :func:`.window_reach.train_readers` reads."""
        return ReachGrid(window=self.window, seq_len=self.seq_len, num_symbols=self.num_symbols, depths=(1,),
                         distances=(self.distances[0],), global_distance=self.seq_len, steps=self.steps,
                         batch_size=self.batch_size, lr=self.lr, d_model=self.d_model, num_heads=self.num_heads,
                         d_ff=self.d_ff, num_examples=self.num_examples, threshold=self.threshold, smooth=self.smooth)

    def in_reach(self, spacing: int, distance: int) -> bool:
        """Whether one layer whose keys are ``spacing`` apart reads the token ``distance`` from the end (from the mask)."""
        mask = reach_mask(self.seq_len, self.window, dilation=spacing)  # (T, T)
        return bool(reachability([mask])[self.seq_len - 1, self.seq_len - distance])


DILATION_REACH = DilationReach()
DILATION_ENSEMBLE = 8  # seeds per cell: a chapter with base seed SEED trains ensemble_seeds(SEED, EXPERIMENT, 8)
EXPERIMENT = "dilation reach"  # the ensemble's name for seeds.ensemble_seeds


def dilation_reach(seeds: Sequence[int], settings: DilationReach = DILATION_REACH, workers: int = 1) -> pd.DataFrame:
    """Train one reader per (keys spaced 1 or d, distance D, seed) and measure it.

    Args:
        seeds: the ensemble's seeds (a chapter passes ``ensemble_seeds(SEED, EXPERIMENT, DILATION_ENSEMBLE)``).
        settings: the grid and the training (default :data:`DILATION_REACH`).
        workers: processes (``parallel.map_runs``); the seeds are split between them, every
            model's numbers unchanged.

    Returns:
        One row per model: "keys spaced", "distance D", "seed", "in reach", "accuracy (%)" (held
        out), "steps to threshold" (NaN: never within the budget).
    """
    if isinstance(seeds, (str, bytes)) or not isinstance(seeds, Sequence) or not seeds:
        raise ValueError(f"seeds must be a non-empty sequence of ints >= 0, got {seeds!r}")
    seeds = [check_int("seeds", seed, minimum=0) for seed in seeds]
    check_instance("settings", settings, DilationReach, "DilationReach")
    workers = check_int("workers", workers, minimum=1)
    rows = {}
    for result in map_runs(_dilation_ensemble, [(chunk, settings) for chunk in split_evenly(seeds, workers)], workers):
        rows.update(result)
    return pd.DataFrame([rows[(spacing, distance, seed)] for spacing in (1, settings.dilation)
                         for distance in settings.distances for seed in seeds])


def _dilation_ensemble(seeds: list[int], s: DilationReach) -> dict[tuple[int, int, int], dict]:
    """Train both masks at every distance for ``seeds`` as one ensemble: (spacing, D, seed) -> table row."""
    members = [(spacing, distance, seed) for spacing in (1, s.dilation) for distance in s.distances for seed in seeds]
    readers = {}
    for seed in seeds:
        with seeded(seed):
            plain = WindowedReader(s.num_symbols, s.seq_len, 1, s.window, False, s.d_model, s.num_heads, s.d_ff)
        dilated = WindowedReader(s.num_symbols, s.seq_len, 1, s.window, False, s.d_model, s.num_heads, s.d_ff,
                                 dilation=s.dilation)
        dilated.load_state_dict(plain.state_dict())  # same weights: only the mask differs
        readers[(1, seed)], readers[(s.dilation, seed)] = plain, dilated
    _, reached, held_out = train_readers([readers[(spacing, seed)] for spacing, _, seed in members],
                                         [distance for _, distance, _ in members],
                                         [seed for _, _, seed in members], s.training())
    return {(spacing, distance, seed): {"keys spaced": spacing, "distance D": distance, "seed": seed,
                                        "in reach": s.in_reach(spacing, distance),
                                        "accuracy (%)": 100 * float(held_out[index]),
                                        "steps to threshold": float(reached[index])}
            for index, (spacing, distance, seed) in enumerate(members)}


@exhibit
def dilation_reach_summary(table: pd.DataFrame, settings: DilationReach = DILATION_REACH) -> pd.DataFrame:
    """One row per (keys spaced, D): in reach, the ensemble's held-out accuracy and how many seeds reached the threshold."""
    _check_table(table)
    rows = []
    for (spacing, distance), cell in table.groupby(["keys spaced", "distance D"], sort=False):
        rows.append({"mask": "plain window" if spacing == 1 else f"dilated, d = {spacing}",
                     "distance D": int(distance), "answer's offset": int(distance) - 1,
                     "in reach": bool(cell["in reach"].iloc[0]),
                     "accuracy median (%)": float(cell["accuracy (%)"].median()),
                     "accuracy min (%)": float(cell["accuracy (%)"].min()),
                     "accuracy max (%)": float(cell["accuracy (%)"].max()),
                     "reached 90%": f"{int(cell['steps to threshold'].notna().sum())} / {len(cell)}"})
    return pd.DataFrame(rows).set_index(["mask", "distance D"])


DILATION_BOUNDS = {  # chosen with margin from the calibration over 30 base seeds (benchmarks/calibration/dl0029_...)
    "out of reach, highest accuracy of any seed (%)": ("<", 20.0),
    "in reach, lowest cell median accuracy (%)": (">=", 90.0),
}


def dilation_claims(table: pd.DataFrame) -> list[Claim]:
    """DL0029's conclusions from the experiment (bounds: ``DILATION_BOUNDS``).

    * out of a mask's reach, no model beats chance by much (the highest held-out accuracy of any
      seed: the plain window asked the far token, the dilated one asked the near one);
    * in reach, every cell is solved on the median seed (the plain window near, the dilated window
      far, both at D - 1 = d).
    """
    _check_table(table)
    inside = table[table["in reach"]].groupby(["keys spaced", "distance D"])["accuracy (%)"].median()
    values = {"out of reach, highest accuracy of any seed (%)": float(table.loc[~table["in reach"], "accuracy (%)"].max()),
              "in reach, lowest cell median accuracy (%)": float(inside.min())}
    return [Claim(name, values[name], op, bound) for name, (op, bound) in DILATION_BOUNDS.items()]


def _check_table(table: object) -> None:
    check_instance("table", table, pd.DataFrame, "pandas.DataFrame")
    needed = {"keys spaced", "distance D", "seed", "in reach", "accuracy (%)", "steps to threshold"}
    if not needed <= set(table.columns) or table.empty:
        raise ValueError(f"table must be dilation_reach's output (columns {sorted(needed)}), got {list(table.columns)}")
    if table["in reach"].all() or not table["in reach"].any():
        raise ValueError("table must hold cells both in and out of reach")
