"""The chapters' experiments: ``data`` (toy tasks), ``training`` (``fit``, ``seeded``), ``seq2seq``,
``head_specialization`` and ``gradient_flow``. Imports ``nn`` and ``measure``, never a layer above.
"""
