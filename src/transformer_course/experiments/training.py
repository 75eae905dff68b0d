"""A small, explicit training loop for the toy tasks of the chapters (Adam, optional warm-up, tqdm).

The seeding convention of the package: data come from a local ``torch.Generator``; initial
weights are drawn inside ``seeded(seed)``, which forks the global RNG, so building a model never
changes the caller's random state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torch import nn
from tqdm import tqdm

from transformer_course._validation import check_instance, check_int, check_positive_float
from transformer_course.measure.timing import threads

Batch = tuple[torch.Tensor, ...]


@contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Run the body with PyTorch's CPU RNG seeded to ``seed``, then give the caller back its own state.

    Module constructors draw their initial weights from the global RNG; building a model inside
    ``with seeded(seed):`` makes the weights a function of ``seed`` without touching the RNG that
    the rest of a notebook uses.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(check_int("seed", seed, minimum=0))
        yield


def model_device(model: nn.Module) -> torch.device:
    """The device of ``model``'s first parameter (the CPU for a model without parameters)."""
    return next(model.parameters(), torch.empty(0)).device


def fit(
    model: nn.Module,
    make_batch: Callable[[torch.Generator], Batch],
    loss_fn: Callable[[nn.Module, Batch], torch.Tensor],
    steps: int,
    lr: float = 1e-3,
    warmup_steps: int = 0,
    seed: int = 0,
    progress: bool = False,
    clip_grad_norm: float | None = 1.0,
) -> list[float]:
    """Train ``model`` for ``steps`` Adam steps on fresh batches; return the loss of every step.

    Training follows the model: batches are drawn on the CPU and moved to the model's device. On
    the CPU it runs on one thread: the course's toy models gain nothing from more, and one thread
    sums in the same order on every machine, so the same arguments give the same losses.

    Args:
        model: the module to train (put in train mode for the duration, eval mode after).
        make_batch: draws one batch (a tuple of tensors) from a CPU ``torch.Generator``, so the data
            are reproducible on every device; each tensor is moved to the model's device.
        loss_fn: computes the scalar loss of ``model`` on a batch.
        steps: number of optimizer steps.
        lr: peak learning rate.
        warmup_steps: linear warm-up length (0 = constant learning rate).
        seed: seeds the batch generator.
        progress: show a tqdm progress bar.
        clip_grad_norm: clip the global gradient norm to this value (None = no clipping).

    Returns:
        The training loss at every step, as Python floats.
    """
    check_instance("model", model, nn.Module, "torch.nn.Module")
    steps = check_int("steps", steps, minimum=1)
    lr = check_positive_float("lr", lr)
    warmup_steps = check_int("warmup_steps", warmup_steps, minimum=0)
    generator = torch.Generator().manual_seed(check_int("seed", seed))  # batches are drawn on the CPU
    device = model_device(model)  # ... and moved to the model's device
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.98), eps=1e-9)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min(1.0, (step + 1) / warmup_steps) if warmup_steps else 1.0)
    losses = []
    model.train()
    with threads(1 if device.type == "cpu" else None):
        for _ in tqdm(range(steps), disable=not progress, desc="training", leave=False):
            batch = tuple(tensor.to(device) for tensor in make_batch(generator))
            loss = loss_fn(model, batch)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if clip_grad_norm is not None:
                nn.utils.clip_grad_norm_(model.parameters(), clip_grad_norm)
            optimizer.step()
            schedule.step()
            losses.append(float(loss.detach()))
    model.eval()
    return losses
