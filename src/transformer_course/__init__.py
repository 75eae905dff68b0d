"""transformer_course: a small, readable PyTorch Transformer library.

It is the code behind the course *Transformers, Executed*: every figure, table and number in the
chapters is produced by a function in this package, and every module is tested against PyTorch's
own implementation.

Conventions used throughout (the shape legend):

    B  batch size            H   number of heads
    T  query (target) length S   key (source) length
    D  model width d_model   Dh  head width d_model / H

Tensors are batch first. Masks are ``torch.bool`` and broadcastable to (B, H, T, S), with
**True = may attend** (the convention of ``torch.nn.functional.scaled_dot_product_attention``;
``nn.MultiheadAttention`` uses the opposite polarity).

Modules, one idea each:
    masks, attention, efficient_attention, receptive_field, positional, feedforward,
    normalization, layers, model, kv_cache, rnn, dependency, cost, timing, gradient_flow,
    head_specialization, data, seq2seq, training, checks, coursework, provenance, notebook,
    plotting (one module per figure concern).
"""

__version__ = "0.1.0"
