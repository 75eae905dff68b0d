"""The position-wise feed-forward network: FFN(x) = act(x W1 + b1) W2 + b2, the same for every token.

Shape legend: B batch, T length, D = d_model, F = d_ff.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from transformer_course._validation import check_choice, check_features, check_int, check_probability

ACTIVATIONS = ("relu", "gelu", "swiglu")


class FeedForward(nn.Module):
    """FFN(x) = max(0, x W1 + b1) W2 + b2 (ReLU), with GELU and SwiGLU variants.

    SwiGLU replaces the activation by a gate: (SiLU(x W1) * (x W3)) W2, with ``gate`` holding W3;
    it has three matrices, so a parameter-matched SwiGLU uses d_ff about 2/3 of the ReLU one.

    Args:
        d_model: width D.
        d_ff: hidden width F (the paper: 2048 = 4 * 512).
        activation: "relu" (paper), "gelu" (BERT, GPT) or "swiglu" (PaLM, LLaMA).
        dropout: dropout on the hidden activations.

    Shape:
        x (..., D) -> (..., D); it acts on the last dimension only, token by token.

    Vaswani et al., 2017, equation (2); Shazeer, 2020, "GLU Variants Improve Transformer".
    """

    def __init__(self, d_model: int, d_ff: int, activation: str = "relu", dropout: float = 0.0) -> None:
        super().__init__()
        self.d_model = check_int("d_model", d_model, minimum=1)
        self.d_ff = check_int("d_ff", d_ff, minimum=1)
        self.activation = check_choice("activation", activation, ACTIVATIONS)
        self.linear1 = nn.Linear(d_model, d_ff)
        self.gate = nn.Linear(d_model, d_ff) if activation == "swiglu" else None
        self.dropout = nn.Dropout(check_probability("dropout", dropout))
        self.linear2 = nn.Linear(d_ff, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_features("x", x, self.d_model)
        hidden = self.linear1(x)  # (..., F)
        if self.activation == "relu":
            hidden = F.relu(hidden)
        elif self.activation == "gelu":
            hidden = F.gelu(hidden)
        else:
            hidden = F.silu(hidden) * self.gate(x)  # (..., F)
        return self.linear2(self.dropout(hidden))  # (..., D)


def swiglu_matched_d_ff(d_model: int, d_ff: int) -> int:
    """The SwiGLU hidden width whose FeedForward has (nearly) the parameters of a ReLU one of width ``d_ff``.

    A two-matrix FFN has 2 D F + F + D parameters, SwiGLU's three matrices 3 D f + 2 f + D; equal
    counts need f = F (2D + 1) / (3D + 2), about 2F/3 (Shazeer, 2020, who uses 2/3 of 4D).
    The result is that f rounded to the nearest int.

    Args:
        d_model: width D.
        d_ff: hidden width F of the two-matrix (ReLU or GELU) FFN to match.

    Returns:
        The int hidden width f for ``FeedForward(d_model, f, activation="swiglu")``.

    Raises:
        TypeError, ValueError: if ``d_model`` or ``d_ff`` is not a positive int.

    Shazeer, 2020, "GLU Variants Improve Transformer", section 2.
    """
    d_model = check_int("d_model", d_model, minimum=1)
    d_ff = check_int("d_ff", d_ff, minimum=1)
    return max(1, round(d_ff * (2 * d_model + 1) / (3 * d_model + 2)))


class MoEFeedForward(nn.Module):
    """A mixture-of-experts FFN: each token goes through the ``top_k`` of ``num_experts`` FFNs its router picks.

    router logits s = x W_r (one per expert); the token's output is sum over its top-k experts e of
    g_e FFN_e(x), with the gates g = softmax of the top-k logits (Mixtral; with top_k = 1 the gate is
    1, where Switch uses the full softmax probability). Every expert is a :class:`FeedForward`, so a
    token costs ``top_k`` FFNs however many experts the layer holds.

    Args:
        d_model: width D.
        d_ff: hidden width F of every expert.
        num_experts: E (>= 1).
        top_k: experts per token k (1 <= k <= E).
        activation: the experts' activation (see ``FeedForward``).

    Shape:
        x (..., D) -> (..., D). After a forward pass, ``router_probs`` (N, E) and ``expert_index``
        (N, k) hold the softmax over all experts and the chosen experts of the N tokens, for
        :meth:`load_balancing_loss`.

    Shazeer et al., 2017 (sparsely-gated MoE); Fedus, Zoph and Shazeer, 2022 (Switch Transformer);
    Jiang et al., 2024 (Mixtral: 8 experts, top-2).
    """

    def __init__(self, d_model: int, d_ff: int, num_experts: int, top_k: int = 2, activation: str = "relu") -> None:
        super().__init__()
        self.d_model = check_int("d_model", d_model, minimum=1)
        self.num_experts = check_int("num_experts", num_experts, minimum=1)
        self.top_k = check_int("top_k", top_k, minimum=1)
        if top_k > num_experts:
            raise ValueError(f"top_k must be <= num_experts={num_experts}, got {top_k}")
        self.router = nn.Linear(d_model, num_experts, bias=False)
        self.experts = nn.ModuleList(FeedForward(d_model, d_ff, activation) for _ in range(num_experts))
        self.router_probs: torch.Tensor | None = None
        self.expert_index: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_features("x", x, self.d_model)
        tokens = x.reshape(-1, self.d_model)  # (N, D)
        logits = self.router(tokens)  # (N, E)
        top_logits, index = logits.topk(self.top_k, dim=-1)  # (N, k) each
        gates = F.softmax(top_logits, dim=-1)  # (N, k)
        self.router_probs, self.expert_index = F.softmax(logits, dim=-1), index
        out = torch.zeros_like(tokens)  # (N, D)
        for e, expert in enumerate(self.experts):
            rows, slot = (index == e).nonzero(as_tuple=True)  # the tokens that chose expert e, and in which slot
            if rows.numel():
                out = out.index_add(0, rows, gates[rows, slot].unsqueeze(-1) * expert(tokens[rows]))
        return out.reshape(x.shape)  # (..., D)

    def load_balancing_loss(self) -> torch.Tensor:
        """Switch's auxiliary loss E * sum_e f_e P_e of the last forward pass (1 when the load is uniform).

        f_e: the fraction of the token-slots routed to expert e; P_e: the mean router probability of
        e. Minimal (1) when both are uniform; E when every token goes to one expert with probability 1.

        Raises:
            RuntimeError: before the first forward pass.

        Fedus, Zoph and Shazeer, 2022, equation (4) (there with top-1 routing).
        """
        if self.router_probs is None:
            raise RuntimeError("load_balancing_loss needs a forward pass first")
        fraction = F.one_hot(self.expert_index, self.num_experts).float().mean(dim=(0, 1))  # (E,)
        return self.num_experts * (fraction * self.router_probs.mean(dim=0)).sum()


def moe_parameters(d_model: int, d_ff: int, num_experts: int, top_k: int, activation: str = "relu",
                   bias: bool = True) -> dict[str, int]:
    """Parameters of one MoE FFN layer: all of them, and those one token uses (router + its top-k experts).

    Args:
        d_model, d_ff, num_experts, top_k, activation: as in :class:`MoEFeedForward`.
        bias: count the experts' biases (``FeedForward`` has them; Mixtral's experts have none).

    Returns:
        ``{"total": ..., "active": ...}``.

    Raises:
        TypeError, ValueError: for sizes out of range or ``top_k`` > ``num_experts``.
    """
    d_model = check_int("d_model", d_model, minimum=1)
    d_ff = check_int("d_ff", d_ff, minimum=1)
    num_experts = check_int("num_experts", num_experts, minimum=1)
    top_k = check_int("top_k", top_k, minimum=1)
    if top_k > num_experts:
        raise ValueError(f"top_k must be <= num_experts={num_experts}, got {top_k}")
    check_choice("activation", activation, ACTIVATIONS)
    matrices = 3 if activation == "swiglu" else 2
    expert = matrices * d_model * d_ff + (((matrices - 1) * d_ff + d_model) if bias else 0)
    router = d_model * num_experts
    return {"total": router + num_experts * expert, "active": router + top_k * expert}
