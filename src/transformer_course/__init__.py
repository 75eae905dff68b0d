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

Subpackages, lowest layer first; a layer imports only the layers below it (a contract test,
``tests/test_layers_contract.py``, enforces it with import-linter):

    nn           the Transformer itself, torch and the standard library only: masks, attention,
                 sparse_attention, positional, feedforward, normalization, layers, model,
                 kv_cache, rnn (the baseline), interop (our weights in PyTorch's modules)
    measure      FLOPs and parameters, timing, memory, autograd-graph paths, receptive fields
    experiments  toy data, the training loop, the chapters' experiments
    plotting     figures: one module per concern, diagrams drawn from modules
    course       notebook setup, exercise checks, coursework tables, grading, provenance

``_validation`` holds the argument checks every layer shares.
"""

# The edition, YYYY.MM (CHANGELOG.md); pyproject.toml reads it, tests/test_release.py checks that
# CHANGELOG.md and CITATION.cff agree.
__version__ = "2026.12"
