"""A small, explicit training loop for the toy tasks of the chapters (Adam, optional warm-up, tqdm).

The seeding convention of the package: data come from a local ``torch.Generator``; initial
weights are drawn inside ``seeded(seed)``, which forks the global RNG, so building a model never
changes the caller's random state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
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


ADAM_BETAS, ADAM_EPS = (0.9, 0.98), 1e-9  # Adam's settings in the paper (Vaswani et al., 2017, §5.3)


def adam_with_warmup(parameters: Iterable[torch.Tensor], lr: float, warmup_steps: int
                     ) -> tuple[torch.optim.Adam, torch.optim.lr_scheduler.LambdaLR]:
    """The optimizer of ``fit``: Adam (``ADAM_BETAS``, ``ADAM_EPS``) and a linear warm-up to ``lr``.

    The learning rate of step k (counting from 0) is lr * min(1, (k + 1) / warmup_steps), or lr
    throughout when ``warmup_steps`` is 0; call ``schedule.step()`` after each ``optimizer.step()``.
    """
    optimizer = torch.optim.Adam(parameters, lr=lr, betas=ADAM_BETAS, eps=ADAM_EPS)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min(1.0, (step + 1) / warmup_steps) if warmup_steps else 1.0)
    return optimizer, schedule


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
    sums in a fixed order, so the same arguments give the same losses on a given machine and
    PyTorch build (another CPU kernel set, ``default``/``avx2``/``avx512``, may round differently).

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
    optimizer, schedule = adam_with_warmup(model.parameters(), lr, warmup_steps)
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


# --- The learning-rate schedule of the original Transformer ------------------------------------


def transformer_learning_rate(step: int, d_model: int = 512, warmup_steps: int = 4000) -> float:
    """The paper's learning rate at ``step`` (counting from 1), in closed form (Vaswani et al., 2017, §5.3).

    lrate = d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5): a linear rise for the first
    ``warmup_steps`` steps, then a decay proportional to the inverse square root of the step; the
    two branches meet at ``step = warmup_steps``, the peak, where lrate = (d_model * warmup_steps)^-0.5.
    """
    step = check_int("step", step, minimum=1)
    d_model = check_int("d_model", d_model, minimum=1)
    warmup_steps = check_int("warmup_steps", warmup_steps, minimum=1)
    return d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)


def transformer_schedule(optimizer: torch.optim.Optimizer, d_model: int = 512,
                         warmup_steps: int = 4000) -> torch.optim.lr_scheduler.LambdaLR:
    """The paper's schedule as a ``LambdaLR``: the optimizer's learning rate becomes base_lr * lrate(step).

    Build the optimizer with ``lr=1.0`` to get the paper's values. ``LambdaLR`` counts its
    ``scheduler.step()`` calls from 0 (the rate of the first optimizer step is the factor at 0);
    the paper counts training steps from 1, hence ``step + 1``.
    """
    check_instance("optimizer", optimizer, torch.optim.Optimizer, "torch.optim.Optimizer")
    d_model = check_int("d_model", d_model, minimum=1)
    warmup_steps = check_int("warmup_steps", warmup_steps, minimum=1)
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: transformer_learning_rate(step + 1, d_model, warmup_steps))
