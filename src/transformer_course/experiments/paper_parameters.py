"""The parameter counts of Vaswani et al. (2017), Table 3, solved for the vocabulary they imply.

The paper gives each model's size in millions, rounded (65 for the base model), and its shared
byte-pair vocabulary as "about 37000 tokens" (section 5.1). Our count of the base model with a
37,000-token tied vocabulary is 63.1M, 3% short. Is the gap a miscount of the layers, or a
larger vocabulary? The rows of Table 3 tell them apart: a missing constant would be the same in
every row, missing vocabulary rows cost V x d_model and so scale with the width. Solving every
row's count for V (the only unknown, with one tied V x d_model matrix, as in the paper) gives an
interval per row, because the printed count is rounded to the million:

    V in [(P - 0.5M - layers) / d_model, (P + 0.5M - layers) / d_model].

* :func:`transformer_parameters`: the count of an encoder-decoder with a shared, tied vocabulary,
  for any (N, d_model, d_ff, h, d_k, d_v) (Table 3 varies d_k, d_v apart from d_model / h).
* :data:`TABLE3`: the rows of Table 3 that report a parameter count.
* :func:`implied_vocabulary_table`: per row, the count with V = 37,000 and the interval of V
  that reproduces the printed count.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from transformer_course._exhibit import exhibit
from transformer_course._validation import check_int

PAPER_VOCABULARY = 37000  # "a shared source-target vocabulary of about 37000 tokens" (section 5.1)


@dataclass(frozen=True)
class Table3Row:
    """One row of Table 3 with a parameter count: its sizes and the count in millions."""

    name: str
    num_layers: int
    d_model: int
    d_ff: int
    num_heads: int
    d_k: int
    d_v: int
    millions: int


TABLE3 = (
    Table3Row("base", 6, 512, 2048, 8, 64, 64, 65),
    Table3Row("(B) d_k = 16", 6, 512, 2048, 8, 16, 64, 58),
    Table3Row("(B) d_k = 32", 6, 512, 2048, 8, 32, 64, 60),
    Table3Row("(C) N = 2", 2, 512, 2048, 8, 64, 64, 36),
    Table3Row("(C) N = 4", 4, 512, 2048, 8, 64, 64, 50),
    Table3Row("(C) N = 8", 8, 512, 2048, 8, 64, 64, 80),
    Table3Row("(C) d_model = 256", 6, 256, 2048, 8, 32, 32, 28),
    Table3Row("(C) d_model = 1024", 6, 1024, 2048, 8, 128, 128, 168),
    Table3Row("(C) d_ff = 1024", 6, 512, 1024, 8, 64, 64, 53),
    Table3Row("(C) d_ff = 4096", 6, 512, 4096, 8, 64, 64, 90),
    Table3Row("big", 6, 1024, 4096, 16, 64, 64, 213),
)


def attention_parameters(d_model: int, num_heads: int, d_k: int, d_v: int) -> int:
    """W^Q, W^K (d_model x h d_k), W^V (d_model x h d_v), W^O (h d_v x d_model), with biases."""
    d_model, h, d_k, d_v = (check_int(name, value, minimum=1) for name, value in
                            (("d_model", d_model), ("num_heads", num_heads), ("d_k", d_k), ("d_v", d_v)))
    return 2 * (d_model * h * d_k + h * d_k) + (d_model * h * d_v + h * d_v) + (h * d_v * d_model + d_model)


def transformer_parameters(num_layers: int, d_model: int, d_ff: int, num_heads: int, d_k: int, d_v: int,
                           vocabulary: int) -> int:
    """Parameters of an N + N layer Post-LN encoder-decoder with one shared, tied V x d_model matrix.

    Per encoder layer: one attention, the FFN (2 d_model d_ff + d_ff + d_model) and two LayerNorms
    (2 d_model each); per decoder layer: two attentions, the FFN and three LayerNorms.
    """
    n = check_int("num_layers", num_layers, minimum=1)
    d, f = check_int("d_model", d_model, minimum=1), check_int("d_ff", d_ff, minimum=1)
    v = check_int("vocabulary", vocabulary, minimum=1)
    attention = attention_parameters(d, num_heads, d_k, d_v)
    ffn = 2 * d * f + f + d
    encoder_layer = attention + ffn + 2 * 2 * d
    decoder_layer = 2 * attention + ffn + 3 * 2 * d
    return n * (encoder_layer + decoder_layer) + v * d


def implied_vocabulary(row: Table3Row) -> tuple[float, float, float]:
    """(low, central, high) shared vocabulary V that gives ``row``'s count, rounded to the million."""
    layers = transformer_parameters(row.num_layers, row.d_model, row.d_ff, row.num_heads, row.d_k, row.d_v, 1) \
        - row.d_model  # the count without the embedding matrix
    return tuple((1e6 * (row.millions + offset) - layers) / row.d_model for offset in (-0.5, 0.0, 0.5))


@exhibit
def implied_vocabulary_table(rows: tuple[Table3Row, ...] = TABLE3, vocabulary: int = PAPER_VOCABULARY) -> pd.DataFrame:
    """Per row of Table 3: the paper's count, ours with ``vocabulary`` tokens, and the V the paper's implies.

    Returns:
        DataFrame indexed by "Table 3 row" with columns "paper (M)", "ours, V = 37,000 (M)",
        "ours / paper", "implied V, low", "implied V", "implied V, high" (floats).
    """
    vocabulary = check_int("vocabulary", vocabulary, minimum=1)
    records = []
    for row in rows:
        ours = transformer_parameters(row.num_layers, row.d_model, row.d_ff, row.num_heads, row.d_k, row.d_v,
                                      vocabulary)
        low, central, high = implied_vocabulary(row)
        records.append({"Table 3 row": row.name, "paper (M)": row.millions,
                        f"ours, V = {vocabulary:,} (M)": ours / 1e6, "ours / paper": ours / (1e6 * row.millions),
                        "implied V, low": low, "implied V": central, "implied V, high": high})
    return pd.DataFrame(records).set_index("Table 3 row")
