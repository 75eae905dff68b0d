"""The chapters' experiments: toy data, a training loop, and what the models learn.

    data                  toy sequence-to-sequence tasks and the shifted-right decoder inputs
    training              ``fit``: a small explicit Adam loop with optional warm-up
    seq2seq               a toy encoder-decoder, trained and scored by exact match
    head_specialization   a task on which attention heads specialize, and head ablation
    gradient_flow         Post-LN vs Pre-LN gradients at initialization, and a training race

Imports ``nn`` and ``measure``, never ``plotting`` or ``course``.
"""
