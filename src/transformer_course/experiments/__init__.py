"""The chapters' experiments: ``data`` (toy tasks), ``training`` (``fit``, ``seeded``), ``seq2seq``,
``head_specialization``, ``gradient_flow``, ``gradient_reach`` (DL0032), ``kv_cache_cost`` (DL0036) and ``window_reach`` (DL0028).
Imports ``nn`` and ``measure``, never a layer above.
"""
