"""The chapters' experiments: ``data`` (toy tasks), ``training`` (``fit``, ``seeded``), ``seq2seq``,
``head_specialization``, ``gradient_flow``, ``gradient_reach`` (DL0032), ``kv_cache_cost`` (DL0036),
``window_reach`` and ``rolling_cache`` (DL0028), ``claims`` (checked conclusions over seeds).
Imports ``nn`` and ``measure``, never a layer above.
"""
