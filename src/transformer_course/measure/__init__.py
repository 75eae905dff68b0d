"""Measuring a Transformer: ``cost`` (FLOPs, parameters), ``timing`` (``torch.utils.benchmark``, rounds
interleaved), ``memory`` (peak of a call), ``dependency`` (autograd-graph paths, gradient reach),
``receptive_field`` (what stacked sparse layers reach). Imports ``nn``, never a layer above.
"""
