"""Toy sequence-to-sequence tasks generated in code, and the shifted-right decoder inputs.

The vocabulary is tiny and fixed: three special tokens followed by the ten digits.

    id  0     1     2     3 ... 12
        <pad> <bos> <eos> "0" ... "9"

A task maps a source digit sequence to a target digit sequence (copy it, reverse it, sort it).
Every example is split deterministically into a training and a held-out set by a checksum of its
digits, so "held-out" really means "never drawn during training".

Shape legend: B batch, L number of digits, T = L + 1 decoder length (one extra for <bos>/<eos>).
"""

from __future__ import annotations

import torch

from transformer_course._validation import check_choice, check_instance, check_int, check_tensor

PAD_ID = 0
BOS_ID = 1
EOS_ID = 2
NUM_SPECIAL = 3
NUM_DIGITS = 10
VOCAB_SIZE = NUM_SPECIAL + NUM_DIGITS
SPECIAL_TOKENS = {PAD_ID: "<pad>", BOS_ID: "<bos>", EOS_ID: "<eos>"}

TASKS = ("copy", "reverse", "sort")
SPLITS = ("train", "heldout")
HELDOUT_MODULUS = 7  # one example in seven (by checksum) is held out


def digits_to_tokens(digits: torch.Tensor) -> torch.Tensor:
    """Token id = digit + NUM_SPECIAL: digits 0..9 become ids 3..12."""
    return digits + NUM_SPECIAL


def tokens_to_text(tokens: torch.Tensor | list[int]) -> list[str]:
    """Readable names of token ids: "<bos>", "7", ... (for tables)."""
    ids = tokens.tolist() if isinstance(tokens, torch.Tensor) else list(tokens)
    return [SPECIAL_TOKENS.get(i, str(i - NUM_SPECIAL)) for i in ids]


def apply_task(task: str, digits: torch.Tensor) -> torch.Tensor:
    """The target digits of ``task`` for source digits (B, L): a copy, the reverse, or the sorted row.

    Raises:
        ValueError: if ``task`` is not one of ``TASKS``.
    """
    check_choice("task", task, TASKS)
    if task == "copy":
        return digits.clone()
    if task == "reverse":
        return digits.flip(-1)  # (B, L)
    return digits.sort(dim=-1).values  # (B, L)


def is_heldout(digits: torch.Tensor) -> torch.Tensor:
    """(B, L) digits -> (B,) bool: True for the held-out split, sum_i (i + 1) d_i = 0 (mod 7)."""
    weights = torch.arange(1, digits.shape[-1] + 1, device=digits.device)  # (L,)
    return (digits * weights).sum(-1) % HELDOUT_MODULUS == 0  # (B,)


def sample_digits(batch_size: int, length: int, generator: torch.Generator, split: str = "train") -> torch.Tensor:
    """Draw ``batch_size`` uniform digit rows of one split, by rejection; reproducible from ``generator``.

    Args:
        batch_size: number of rows B.
        length: digits per row L.
        generator: the source of randomness (a ``torch.Generator``).
        split: "train" (checksum != 0 mod 7) or "heldout" (checksum = 0 mod 7).

    Returns:
        (B, L) int64 digits in 0..9.

    Raises:
        TypeError, ValueError: on a non-positive size, a missing generator or an unknown split.
    """
    batch_size = check_int("batch_size", batch_size, minimum=1)
    length = check_int("length", length, minimum=1)
    check_instance("generator", generator, torch.Generator, "torch.Generator")
    check_choice("split", split, SPLITS)
    wanted = split == "heldout"
    rows: list[torch.Tensor] = []
    found = 0
    while found < batch_size:  # about 1 in 7 candidates is held out, 6 in 7 are for training
        candidates = torch.randint(0, NUM_DIGITS, (8 * batch_size, length), generator=generator)  # (8B, L)
        candidates = candidates[is_heldout(candidates) == wanted]
        rows.append(candidates)
        found += len(candidates)
    return torch.cat(rows)[:batch_size]  # (B, L)


def shift_right(target: torch.Tensor, bos_id: int = BOS_ID, eos_id: int = EOS_ID) -> tuple[torch.Tensor, torch.Tensor]:
    """Teacher forcing: decoder input = [<bos>, y_1, ..., y_L], labels = [y_1, ..., y_L, <eos>].

    The label at position t is the token the input reveals only at position t + 1, so with a
    causal mask the prediction at t never sees its own answer.

    Args:
        target: (B, L) or (L,) target token ids (without <bos>/<eos>).
        bos_id: start token prepended to the decoder input.
        eos_id: end token appended to the labels.

    Returns:
        decoder_input, labels: each (B, L + 1) (or (L + 1,) for a 1-D target).

    Raises:
        TypeError, ValueError: if ``target`` is not a 1-D/2-D integer tensor or an id is negative.

    Vaswani et al., 2017, section 3.1 ("output embeddings are offset by one position").
    """
    check_tensor("target", target, ndim=(1, 2))
    if target.is_floating_point() or target.dtype == torch.bool:
        raise TypeError(f"target must hold integer token ids, got dtype {target.dtype}")
    bos_id = check_int("bos_id", bos_id, minimum=0)
    eos_id = check_int("eos_id", eos_id, minimum=0)
    bos = torch.full_like(target[..., :1], bos_id)  # (B, 1)
    eos = torch.full_like(target[..., :1], eos_id)  # (B, 1)
    return torch.cat((bos, target), dim=-1), torch.cat((target, eos), dim=-1)  # (B, L + 1) each


def make_batch(task: str, batch_size: int, length: int, generator: torch.Generator,
               split: str = "train") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One teacher-forcing batch of ``task``: (src, decoder_input, labels).

    Returns:
        src (B, L) source ids, decoder_input (B, L + 1) starting with <bos>, labels (B, L + 1)
        ending with <eos>.

    Raises:
        ValueError: for an unknown task or split (and see ``sample_digits``).
    """
    check_choice("task", task, TASKS)
    digits = sample_digits(batch_size, length, generator, split)  # (B, L)
    src = digits_to_tokens(digits)  # (B, L)
    decoder_input, labels = shift_right(digits_to_tokens(apply_task(task, digits)))  # (B, L + 1) each
    return src, decoder_input, labels
