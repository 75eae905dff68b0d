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
    masks, attention, positional, feedforward, normalization, layers, model, rnn,
    cost, training, checks, notebook, plotting.
"""

__version__ = "0.1.0"
