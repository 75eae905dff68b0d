"""Measuring a Transformer: what it costs, how long it takes, what it holds, what it can see.

    cost              analytic and counted FLOPs, parameter counts and breakdowns
    timing            wall-clock timing on ``torch.utils.benchmark``, rounds interleaved
    memory            peak memory of a call, from the tensors its operations create
    dependency        autograd-graph paths, gradient reach and matrix-product counts
    receptive_field   what stacked sparse-attention layers can reach

Imports ``transformer_course.nn`` (never the layers above it) and pandas for tables.
"""
