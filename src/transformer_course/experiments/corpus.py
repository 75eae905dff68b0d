"""The course's own prose as a character-level corpus, shipped with the package (no download).

``_data/course_prose.txt`` is the Markdown prose of chapters DL0027-DL0036 with the code cells
stripped, built by ``tools/build_course_prose.py``. It ships as package data, so
``load_course_prose()`` works from a repository checkout and from an installed wheel (Colab).
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources

import torch

from transformer_course._validation import check_int, check_tensor

PROSE_FILE = "course_prose.txt"
HELD_OUT_FRACTION = 0.1  # the last tenth of the text is held out


def load_course_prose() -> str:
    """The text of ``transformer_course/_data/course_prose.txt`` (UTF-8)."""
    return resources.files("transformer_course").joinpath("_data", PROSE_FILE).read_text(encoding="utf-8")


@dataclass(frozen=True)
class CharVocabulary:
    """Characters <-> ids: id i is the i-th character of ``chars`` (sorted, distinct)."""

    chars: str

    def __post_init__(self) -> None:
        if not isinstance(self.chars, str) or not self.chars:
            raise ValueError(f"chars must be a non-empty string, got {self.chars!r}")
        if sorted(set(self.chars)) != list(self.chars):
            raise ValueError("chars must be sorted and distinct")

    @classmethod
    def of(cls, text: str) -> CharVocabulary:
        """The vocabulary of every character that occurs in ``text``."""
        if not isinstance(text, str) or not text:
            raise ValueError("text must be a non-empty string")
        return cls("".join(sorted(set(text))))

    @property
    def size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> torch.Tensor:
        """(len(text),) int64 ids; raises ValueError on a character outside the vocabulary."""
        index = {c: i for i, c in enumerate(self.chars)}
        missing = sorted(set(text) - set(index))
        if missing:
            raise ValueError(f"text holds characters outside the vocabulary: {''.join(missing)!r}")
        return torch.tensor([index[c] for c in text], dtype=torch.long)

    def decode(self, ids: torch.Tensor | list[int]) -> str:
        """The characters of 1-D ``ids``."""
        ids = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
        if any(not 0 <= i < self.size for i in ids):
            raise ValueError(f"ids must lie in [0, {self.size})")
        return "".join(self.chars[i] for i in ids)


def split_corpus(ids: torch.Tensor, held_out_fraction: float = HELD_OUT_FRACTION) -> tuple[torch.Tensor, torch.Tensor]:
    """(train, held_out): the text cut in two, the last ``held_out_fraction`` held out (no shuffling,
    so no training window overlaps a held-out one)."""
    check_tensor("ids", ids, ndim=1)
    if not 0.0 < held_out_fraction < 1.0:
        raise ValueError(f"held_out_fraction must lie in (0, 1), got {held_out_fraction}")
    cut = int(round(len(ids) * (1.0 - held_out_fraction)))
    if not 0 < cut < len(ids):
        raise ValueError(f"ids of length {len(ids)} are too short to split")
    return ids[:cut], ids[cut:]


def text_windows(ids: torch.Tensor, batch_size: int, length: int, generator: torch.Generator) -> torch.Tensor:
    """(B, length) windows of ``ids`` at uniform random starts drawn from ``generator``."""
    check_tensor("ids", ids, ndim=1)
    batch_size = check_int("batch_size", batch_size, minimum=0)
    length = check_int("length", length, minimum=1)
    if length > len(ids):
        raise ValueError(f"length must not exceed the {len(ids)} ids, got {length}")
    starts = torch.randint(0, len(ids) - length + 1, (batch_size,), generator=generator)  # (B,)
    return ids[starts.unsqueeze(1) + torch.arange(length)]  # (B, length)
