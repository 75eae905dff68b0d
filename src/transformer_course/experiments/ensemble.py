"""Train an ensemble of same-shaped models as one: ``training.fit`` for E members in fewer operations than E runs.

The course's toy models are so small that a training step costs mostly per-operation overhead:
E runs one after another cost about E times one run. :func:`fit_ensemble` stacks the members'
weights along a leading axis (``torch.func.stack_module_state``) and evaluates every member's
loss in one call of the model vectorized over that axis (``torch.func.vmap`` of
``torch.func.functional_call``), so each operation runs once for all E members. On one CPU thread
8 members of DL0030's two-block model (D = 32) trained in about 0.55 of the time of 8 separate
runs (measured 2026-12-02). It pays only while overhead dominates: for DL0035's encoder-decoder
(D = 64, batch 64), whose steps are mostly matrix products, 4 stacked members took as long as 4
runs, and for DL0027's one-layer lookup model the gain was within the machine's noise but at h = 1.

Member e is the run ``training.fit(models[e], make_batch, loss_fn, steps, lr, warmup_steps,
seed=seeds[e], clip_grad_norm=clip_grad_norm)``: its own batches (a generator seeded with its own
seed), its own gradient (the gradient of the summed loss with respect to member e's slice is the
gradient of member e's loss), its own gradient-norm clipping, and its own Adam state
(``torch.optim.Adam`` is elementwise, so one Adam over the stacked weights is E Adams). The
batched products sum in another order than the unbatched ones, so a member's numbers equal the
separate run's to rounding, not bit for bit (``tests/experiments/test_ensemble.py`` measures it).
A member's numbers do not depend on the other members, on their number or on its place among
them (a one-member ensemble trains beside a twin whose result is dropped, since a vmap over one
member takes other kernels), so an ensemble may be split across worker processes at will.

Shape legend: E members.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence

import torch
from torch import nn
from torch.func import functional_call, stack_module_state, vmap

from transformer_course._validation import check_instance, check_int, check_positive_float
from transformer_course.measure.timing import threads
from .training import Batch, adam_with_warmup, model_device

CLIP_EPS = 1e-6  # the epsilon of ``nn.utils.clip_grad_norm_``, which ``training.fit`` clips with


class _MemberLoss(nn.Module):
    """``loss_fn(model, batch)`` as a module, so that ``functional_call`` can hand ``loss_fn`` the real model.

    ``functional_call`` swaps the parameters of ``self.model`` for one member's slice while the
    call runs; ``loss_fn`` sees an ordinary instance of the member's class (``isinstance`` checks
    and attributes work), running on that member's weights.
    """

    def __init__(self, model: nn.Module, loss_fn: Callable[[nn.Module, Batch], torch.Tensor]) -> None:
        super().__init__()
        self.model = model
        self.loss_fn = loss_fn

    def forward(self, *batch: torch.Tensor) -> torch.Tensor:
        return self.loss_fn(self.model, batch)


def _check_models(models: object) -> list[nn.Module]:
    check_instance("models", models, Sequence, "a sequence of torch.nn.Module")
    models = list(models)
    if not models:
        raise ValueError("models must hold at least one model, got none")
    for model in models:
        check_instance("models", model, nn.Module, "torch.nn.Module")
    first = models[0]
    signature = [(name, tuple(p.shape), p.dtype) for name, p in first.named_parameters()]
    for model in models[1:]:
        if type(model) is not type(first) or [(n, tuple(p.shape), p.dtype)
                                              for n, p in model.named_parameters()] != signature:
            raise ValueError("models must be instances of one class with the same parameter names, shapes "
                             "and dtypes")
    if len({model_device(model) for model in models}) != 1:
        raise ValueError("models must all be on one device")
    if len({id(model) for model in models}) != len(models):
        raise ValueError("models must be distinct instances (the same model twice would be trained twice)")
    return models


def fit_ensemble(
    models: Sequence[nn.Module],
    make_batch: Callable[[torch.Generator], Batch],
    loss_fn: Callable[[nn.Module, Batch], torch.Tensor],
    steps: int,
    seeds: Sequence[int],
    lr: float = 1e-3,
    warmup_steps: int = 0,
    clip_grad_norm: float | None = 1.0,
    observe: Callable[[int, list[nn.Module]], None] | None = None,
    observe_every: int = 1,
) -> list[list[float]]:
    """Train E models of one architecture together; member e follows ``fit(models[e], ..., seed=seeds[e])``.

    Args:
        models: the E members (same class, parameter names and shapes, one device, no dropout or
            other randomness in the forward pass); their weights are updated in place and they
            are left in eval mode.
        make_batch: draws one batch (a tuple of tensors) from a CPU ``torch.Generator``; member e
            draws from its own generator, seeded with ``seeds[e]``.
        loss_fn: the scalar loss of a model on one batch (called with the member's class, on
            unbatched tensors, as ``fit`` calls it).
        steps: Adam steps.
        seeds: E distinct ints >= 0, one per member: each seeds that member's batches.
        lr: peak learning rate (the same for every member).
        warmup_steps: linear warm-up length (0 = constant learning rate).
        clip_grad_norm: clip each member's global gradient norm to this value (None = no clipping).
        observe: called as ``observe(step, models)`` before step 0, every ``observe_every`` steps
            and after the last step (``step = steps``), with every member holding its weights at
            that point (measurements during training: it must not change them).
        observe_every: steps between two calls of ``observe``.

    Returns:
        One list per member: its training loss at every step, as Python floats.

    Raises:
        TypeError, ValueError: for models that differ in class or shapes, seeds of the wrong number
            or repeated, or settings out of range.
    """
    models = _check_models(models)
    if not callable(make_batch) or not callable(loss_fn):
        raise TypeError("make_batch and loss_fn must be callable")
    steps = check_int("steps", steps, minimum=1)
    seeds = [check_int("seeds", seed, minimum=0) for seed in seeds]
    if len(seeds) != len(models) or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must hold {len(models)} distinct ints (one per member), got {seeds}")
    lr = check_positive_float("lr", lr)
    warmup_steps = check_int("warmup_steps", warmup_steps, minimum=0)
    if clip_grad_norm is not None:
        clip_grad_norm = check_positive_float("clip_grad_norm", clip_grad_norm)
    if observe is not None and not callable(observe):
        raise TypeError(f"observe must be callable or None, got {type(observe).__name__}")
    observe_every = check_int("observe_every", observe_every, minimum=1)
    device = model_device(models[0])
    if len(models) == 1:  # vmap over one member takes other kernels than over several: train it beside a twin
        alone = None if observe is None else (lambda step, pair: observe(step, pair[:1]))
        return fit_ensemble([models[0], copy.deepcopy(models[0])], make_batch, loss_fn, steps, [seeds[0], seeds[0] + 1],
                            lr, warmup_steps, clip_grad_norm, alone, observe_every)[:1]
    params, buffers = stack_module_state(models)  # name -> (E, ...) each; params are leaves that require grad
    member_loss = _MemberLoss(copy.deepcopy(models[0]).to("meta"), loss_fn)

    def one_member(member_params: dict, member_buffers: dict, batch: Batch) -> torch.Tensor:
        state = {f"model.{name}": tensor for name, tensor in {**member_params, **member_buffers}.items()}
        return functional_call(member_loss, state, batch)  # ()

    losses_of = vmap(one_member)  # (params, buffers, batch), each stacked over E -> (E,)
    weights = list(params.values())
    optimizer, schedule = adam_with_warmup(weights, lr, warmup_steps)  # fit's, over the stacked weights
    generators = [torch.Generator().manual_seed(seed) for seed in seeds]  # batches are drawn on the CPU
    history = []

    def copy_back() -> None:  # each member's slice of the stacked weights -> the member
        with torch.no_grad():
            for name, stacked in params.items():
                for e, model in enumerate(models):
                    model.get_parameter(name).copy_(stacked[e])

    with threads(1 if device.type == "cpu" else None):
        for step in range(steps):
            if observe is not None and step % observe_every == 0:
                copy_back()
                observe(step, models)
            batches = [make_batch(generator) for generator in generators]
            batch = tuple(torch.stack(parts).to(device) for parts in zip(*batches))  # each (E, ...)
            losses = losses_of(params, buffers, batch)  # (E,)
            optimizer.zero_grad(set_to_none=True)
            losses.sum().backward()  # member e's slice gets the gradient of member e's loss
            if clip_grad_norm is not None:
                with torch.no_grad():
                    norms = torch.linalg.vector_norm(torch.stack(
                        [torch.linalg.vector_norm(w.grad.flatten(1), dim=1) for w in weights]), dim=0)  # (E,)
                    scale = (clip_grad_norm / (norms + CLIP_EPS)).clamp(max=1.0)  # (E,)
                    for w in weights:
                        w.grad.mul_(scale.view(-1, *[1] * (w.dim() - 1)))
            optimizer.step()
            schedule.step()
            history.append(losses.detach().tolist())
        copy_back()
        if observe is not None:
            observe(steps, models)
    for model in models:
        model.eval()
    return [list(member) for member in zip(*history)]
