"""Label-smoothed cross-entropy, written out (Szegedy et al., 2016; used by Vaswani et al., 2017, §5.4).

With smoothing epsilon, the target distribution of a position whose label is y puts 1 - epsilon
on y and spreads epsilon uniformly over all V classes (y included), so

    loss = (1 - epsilon) * (-log p_y) + epsilon * mean_v(-log p_v),

the definition of ``torch.nn.functional.cross_entropy(..., label_smoothing=epsilon)``.

Shape legend: N positions, V classes.
"""

from __future__ import annotations

import torch

from transformer_course._validation import check_probability, check_tensor


def label_smoothed_cross_entropy(logits: torch.Tensor, target: torch.Tensor, epsilon: float = 0.1,
                                 ignore_index: int = -100) -> torch.Tensor:
    """Mean label-smoothed cross-entropy over the positions whose target is not ``ignore_index``.

    Args:
        logits: (N, V) unnormalized scores.
        target: (N,) class ids in [0, V), or ``ignore_index``.
        epsilon: the smoothing, in [0, 1); 0 is the plain cross-entropy.
        ignore_index: target id whose positions are left out of the mean.

    Returns:
        The scalar loss (NaN when every position is ignored, as PyTorch's).

    Raises:
        TypeError, ValueError: for non-tensors, wrong shapes or an epsilon outside [0, 1).
    """
    check_tensor("logits", logits, ndim=2)
    check_tensor("target", target, ndim=1)
    epsilon = check_probability("epsilon", epsilon)
    if target.shape[0] != logits.shape[0]:
        raise ValueError(f"target must hold one id per row of logits ({logits.shape[0]}), got {target.shape[0]}")
    keep = target != ignore_index  # (N,)
    log_p = logits[keep].log_softmax(dim=-1)  # (N_kept, V)
    nll = -log_p.gather(1, target[keep].unsqueeze(1)).squeeze(1)  # (N_kept,): -log p_y
    uniform = -log_p.mean(dim=-1)  # (N_kept,): cross-entropy against the uniform distribution
    return ((1 - epsilon) * nll + epsilon * uniform).mean()  # ()
