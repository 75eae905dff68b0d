"""Several ``SortingEncoder`` runs trained side by side as one stacked model, to make sweeps affordable.

The course's toy models are so small that a training step costs mostly per-operation overhead,
not arithmetic: training E copies one after another costs about E times one run. Stacking the E
copies' weights along a leading axis and running every matrix product as a batched product
(``torch.bmm``) costs about as much per step as one copy. ``StackedSortingEncoders`` copies the
weights of E ``SortingEncoder`` instances (so their initialization is exactly the package's), and
``fit_stacked`` trains all E at once with one Adam per copy, each with its own learning rate and
warm-up, written out as ``torch.optim.Adam`` computes it. Member e's loss depends only on member
e's weights, so the gradient of the summed loss is, for each member, the gradient of its own loss:
the result is E independent runs (the tests compare them with ``training.fit``, run by run).

Shape legend: E members, B batch, T length, D = d_model, H heads, Dh = D / H, F = d_ff, V vocabulary.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from transformer_course._validation import check_bool, check_int, check_positive_float
from transformer_course.measure.timing import threads
from transformer_course.nn.positional import sinusoidal_encoding
from .gradient_flow import SortingEncoder
from .training import ADAM_BETAS, ADAM_EPS


def _stack(tensors: Sequence[torch.Tensor]) -> nn.Parameter:
    return nn.Parameter(torch.stack([t.detach().clone() for t in tensors]))


class StackedSortingEncoders(nn.Module):
    """E ``SortingEncoder`` copies with stacked weights: tokens (E, B, T) -> logits (E, B, T, V).

    Args:
        models: E ``SortingEncoder`` instances of the same sizes and placement (ReLU FFN, no
            dropout); their current weights are copied. Post-LN members may mix plain layers and
            DeepNorm layers (each member keeps its own residual weight alpha); QK-norm must be off
            in all of them or "layernorm" in all.

    Attributes:
        track_logits: when True, every forward pass computes the attention scores explicitly and
            stores in ``max_logit`` (E,) each member's largest attention logit q.k / sqrt(Dh)
            over its layers, heads, batch and positions.

    Raises:
        TypeError: if ``models`` holds something other than ``SortingEncoder`` instances.
        ValueError: if it is empty or the models differ in size, placement or QK-norm.
    """

    def __init__(self, models: Sequence[SortingEncoder]) -> None:
        super().__init__()
        models = list(models)
        if not models:
            raise ValueError("models must hold at least one SortingEncoder, got none")
        for model in models:
            if not isinstance(model, SortingEncoder):
                raise TypeError(f"models must hold SortingEncoder instances, got {type(model).__name__}")
        first = models[0]
        layers = first.encoder.layers
        self.num_members = len(models)
        self.d_model = first.d_model
        self.num_heads = layers[0].self_attn.num_heads
        self.norm_first = layers[0].norm_first
        self.eps = layers[0].norm1.eps
        shapes = [[tuple(p.shape) for p in m.parameters()] for m in models]
        if any(s != shapes[0] for s in shapes) or any(m.encoder.layers[0].norm_first != self.norm_first
                                                      for m in models):
            raise ValueError("models must all have the same sizes and the same placement (norm_first)")
        if any(layer.feed_forward.activation != "relu" for layer in layers):
            raise ValueError("models must use the ReLU feed-forward of SortingEncoder")
        qk_norms = {layer.self_attn.qk_norm for m in models for layer in m.encoder.layers}
        if len(qk_norms) != 1 or not qk_norms <= {None, "layernorm"}:
            raise ValueError(f"models must all have qk_norm None or all 'layernorm', got {sorted(map(str, qk_norms))}")
        self.qk_norm = qk_norms.pop()
        self.register_buffer("alpha", torch.tensor([float(getattr(m.encoder.layers[0], "alpha", 1.0))
                                                    for m in models])[:, None, None], persistent=False)  # (E, 1, 1)
        self.track_logits, self.max_logit = False, None
        self.register_buffer("pe", sinusoidal_encoding(first.positional.max_len, self.d_model), persistent=False)

        def stacked(get: Callable[[SortingEncoder], torch.Tensor]) -> nn.Parameter:
            return _stack([get(m) for m in models])

        self.embed = stacked(lambda m: m.embed.weight)  # (E, V, D)
        self.head_weight = stacked(lambda m: m.head.weight)  # (E, V, D)
        self.head_bias = stacked(lambda m: m.head.bias)  # (E, V)
        self.layers = nn.ModuleList()
        for i in range(len(layers)):
            layer = nn.ParameterDict()
            for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
                layer[f"{name}_weight"] = stacked(lambda m, n=name: getattr(m.encoder.layers[i].self_attn, n).weight)
                layer[f"{name}_bias"] = stacked(lambda m, n=name: getattr(m.encoder.layers[i].self_attn, n).bias)
            for name in ("linear1", "linear2"):
                layer[f"{name}_weight"] = stacked(lambda m, n=name: getattr(m.encoder.layers[i].feed_forward, n).weight)
                layer[f"{name}_bias"] = stacked(lambda m, n=name: getattr(m.encoder.layers[i].feed_forward, n).bias)
            for name in ("norm1", "norm2"):
                layer[f"{name}_weight"] = stacked(lambda m, n=name: getattr(m.encoder.layers[i], n).weight)
                layer[f"{name}_bias"] = stacked(lambda m, n=name: getattr(m.encoder.layers[i], n).bias)
            if self.qk_norm is not None:  # (E, Dh) each: the query and key norms of QK-norm
                for name in ("q_proj", "k_proj"):
                    norm = lambda m, n=name: getattr(m.encoder.layers[i].self_attn, n).norm  # noqa: E731
                    layer[f"{name}_norm_weight"] = stacked(lambda m, get=norm: get(m).weight)
                    layer[f"{name}_norm_bias"] = stacked(lambda m, get=norm: get(m).bias)
            self.layers.append(layer)
        if self.norm_first:
            self.final_norm_weight = stacked(lambda m: m.encoder.norm.weight)  # (E, D)
            self.final_norm_bias = stacked(lambda m: m.encoder.norm.bias)  # (E, D)

    @staticmethod
    def _linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """x (E, N, In) @ weight (E, Out, In)^T + bias (E, Out) -> (E, N, Out)."""
        return torch.baddbmm(bias.unsqueeze(1), x, weight.transpose(1, 2))  # (E, N, Out)

    def _norm(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """``nn.normalization.LayerNorm``'s formula, with one (gamma, beta) per member: (E, N, D)."""
        mean = x.mean(dim=-1, keepdim=True)  # (E, N, 1)
        variance = (x - mean).pow(2).mean(dim=-1, keepdim=True)  # (E, N, 1) biased
        return (x - mean) / torch.sqrt(variance + self.eps) * weight.unsqueeze(1) + bias.unsqueeze(1)  # (E, N, D)

    def _attention(self, x: torch.Tensor, layer: nn.ParameterDict, b: int, t: int) -> torch.Tensor:
        e, h, dh = self.num_members, self.num_heads, self.d_model // self.num_heads

        def heads(name: str) -> torch.Tensor:
            y = self._linear(x, layer[f"{name}_weight"], layer[f"{name}_bias"])  # (E, B*T, D)
            if self.qk_norm is not None and name != "v_proj":  # each head's Dh features normalized
                y = self._norm(y.view(e, b * t * h, dh), layer[f"{name}_norm_weight"], layer[f"{name}_norm_bias"])
            return y.reshape(e * b, t, h, dh).transpose(1, 2)  # (E*B, H, T, Dh)

        q, k, v = heads("q_proj"), heads("k_proj"), heads("v_proj")  # (E*B, H, T, Dh) each
        if self.track_logits:  # the scores written out, to record the largest
            scores = q @ k.transpose(-2, -1) / math.sqrt(dh)  # (E*B, H, T, T)
            largest = scores.detach().reshape(e, -1).amax(dim=1)  # (E,)
            self.max_logit = largest if self.max_logit is None else torch.maximum(self.max_logit, largest)
            out = scores.softmax(dim=-1) @ v  # (E*B, H, T, Dh)
        else:
            out = F.scaled_dot_product_attention(q, k, v)  # (E*B, H, T, Dh)
        out = out.transpose(1, 2).reshape(e, b * t, self.d_model)  # (E, B*T, D)
        return self._linear(out, layer["out_proj_weight"], layer["out_proj_bias"])  # (E, B*T, D)

    def _feed_forward(self, x: torch.Tensor, layer: nn.ParameterDict) -> torch.Tensor:
        hidden = F.relu(self._linear(x, layer["linear1_weight"], layer["linear1_bias"]))  # (E, B*T, F)
        return self._linear(hidden, layer["linear2_weight"], layer["linear2_bias"])  # (E, B*T, D)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        e, b, t = tokens.shape
        members = torch.arange(e, device=tokens.device)[:, None, None]  # (E, 1, 1)
        x = self.embed[members, tokens] * math.sqrt(self.d_model) + self.pe[:t]  # (E, B, T, D)
        x = x.reshape(e, b * t, self.d_model)  # (E, B*T, D)
        self.max_logit = None
        alpha = self.alpha  # (E, 1, 1): DeepNorm's residual weight, 1 for plain Post-LN
        for layer in self.layers:
            if self.norm_first:
                x = x + self._attention(self._norm(x, layer["norm1_weight"], layer["norm1_bias"]), layer, b, t)
                x = x + self._feed_forward(self._norm(x, layer["norm2_weight"], layer["norm2_bias"]), layer)
            else:
                x = self._norm(alpha * x + self._attention(x, layer, b, t), layer["norm1_weight"], layer["norm1_bias"])
                x = self._norm(alpha * x + self._feed_forward(x, layer), layer["norm2_weight"], layer["norm2_bias"])
        if self.norm_first:
            x = self._norm(x, self.final_norm_weight, self.final_norm_bias)  # (E, B*T, D)
        logits = self._linear(x, self.head_weight, self.head_bias)  # (E, B*T, V)
        return logits.view(e, b, t, -1)  # (E, B, T, V)


def stacked_sorting_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Each member's mean cross-entropy over its (B, T) targets: logits (E, B, T, V), targets (E, B, T) -> (E,)."""
    e = logits.shape[0]
    losses = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="none")
    return losses.view(e, -1).mean(dim=1)  # (E,)


def fit_stacked(model: StackedSortingEncoders, make_batch: Callable[[], tuple[torch.Tensor, torch.Tensor]],
                steps: int, lrs: Sequence[float], warmup_steps: Sequence[int],
                record_max_logit: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Train every member with its own Adam, learning rate and linear warm-up; return the (steps, E) losses.

    Each member follows ``training.fit`` with ``clip_grad_norm=None``: Adam with betas (0.9, 0.98)
    and eps 1e-9, learning rate lr * min(1, (step + 1) / warmup) at step 0, 1, ... (lr from the
    first step when warmup is 0), the same update formula as ``torch.optim.Adam``.

    Args:
        model: the stacked members (changed in place; eval mode afterwards).
        make_batch: returns the next (tokens, targets), each (E, B, T), on the model's device.
        steps: optimizer steps.
        lrs: peak learning rate of each member (E values > 0).
        warmup_steps: warm-up length of each member (E values >= 0).
        record_max_logit: also record every member's largest attention logit at every step (on
            that step's batch, before the update); the attention is then computed explicitly.

    Returns:
        (steps, E) float64 tensor of every member's training loss at every step; with
        ``record_max_logit``, the pair (losses, max logits), both (steps, E).

    Raises:
        TypeError, ValueError: if ``steps`` < 1 or ``lrs`` / ``warmup_steps`` do not hold E valid values.
    """
    steps = check_int("steps", steps, minimum=1)
    e = model.num_members
    lrs = [check_positive_float("lrs", lr) for lr in lrs]
    warmup_steps = [check_int("warmup_steps", w, minimum=0) for w in warmup_steps]
    if len(lrs) != e or len(warmup_steps) != e:
        raise ValueError(f"lrs and warmup_steps must hold one value per member ({e}), got {len(lrs)} and "
                         f"{len(warmup_steps)}")
    params = list(model.parameters())
    device = params[0].device
    peak = torch.tensor(lrs, dtype=torch.float64)
    warm = torch.tensor(warmup_steps, dtype=torch.float64)
    exp_avg = [torch.zeros_like(p) for p in params]
    exp_avg_sq = [torch.zeros_like(p) for p in params]
    (beta1, beta2), losses, max_logits = ADAM_BETAS, [], []  # Adam's settings of training.fit
    model.train()
    model.track_logits = check_bool("record_max_logit", record_max_logit)
    with threads(1 if device.type == "cpu" else None):
        for step in range(steps):
            factor = torch.where(warm > 0, torch.clamp((step + 1) / warm.clamp(min=1), max=1.0), 1.0)
            lr = peak * factor  # (E,) this step's learning rates
            tokens, targets = make_batch()
            member_losses = stacked_sorting_loss(model(tokens), targets)  # (E,)
            for p in params:
                p.grad = None
            member_losses.sum().backward()  # member e's weights get the gradient of member e's loss
            n = step + 1
            bias_correction1, bias_correction2 = 1 - beta1 ** n, 1 - beta2 ** n
            step_size = (lr / bias_correction1).to(device=device, dtype=params[0].dtype)  # (E,)
            with torch.no_grad():
                for p, m, v in zip(params, exp_avg, exp_avg_sq):
                    m.lerp_(p.grad, 1 - beta1)
                    v.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
                    denom = (v.sqrt() / math.sqrt(bias_correction2)).add_(ADAM_EPS)
                    p.sub_(step_size.view(-1, *[1] * (p.dim() - 1)) * (m / denom))
            losses.append(member_losses.detach().double().cpu())
            if record_max_logit:
                max_logits.append(model.max_logit.double().cpu())
    model.eval()
    model.track_logits = False
    if record_max_logit:
        return torch.stack(losses), torch.stack(max_logits)  # (steps, E) each
    return torch.stack(losses)  # (steps, E)
