"""Text from a language model: greedy decoding and temperature sampling, one token at a time.

Any model that maps token ids (1, T) to logits (1, T, V) will do; the capstone (DL0037) samples
its GPT with it at several points of training. No KV cache (DL0036 builds one): each new token
re-reads the window, which at a few dozen characters costs nothing that matters.
"""

from __future__ import annotations

import torch
from torch import nn

from transformer_course._validation import check_instance, check_int, check_tensor


@torch.no_grad()
def generate(model: nn.Module, prompt: torch.Tensor, new_tokens: int, temperature: float = 0.0,
             generator: torch.Generator | None = None, context: int | None = None) -> torch.Tensor:
    """Extend ``prompt`` (1-D ids) by ``new_tokens`` tokens, one at a time.

    temperature 0 takes the argmax (greedy decoding); temperature tau > 0 samples from
    softmax(logits / tau) with ``generator``. With ``context`` the model reads only the last
    ``context`` tokens (the window it was trained on).

    Returns:
        (len(prompt) + new_tokens,) ids.
    """
    check_instance("model", model, nn.Module, "a language model, tokens (1, T) -> logits (1, T, V)")
    check_tensor("prompt", prompt, ndim=1)
    new_tokens = check_int("new_tokens", new_tokens, minimum=1)
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or temperature < 0:
        raise ValueError(f"temperature must be a number >= 0, got {temperature!r}")
    if temperature > 0 and not isinstance(generator, torch.Generator):
        raise TypeError("sampling (temperature > 0) needs a torch.Generator")
    if len(prompt) == 0:
        raise ValueError("prompt must hold at least one token")
    tokens = prompt.clone()
    for _ in range(new_tokens):
        window = tokens if context is None else tokens[-check_int("context", context, minimum=1):]
        logits = model(window.unsqueeze(0))[0, -1]  # (V,)
        if temperature == 0:
            following = logits.argmax()
        else:
            following = torch.multinomial((logits / temperature).softmax(-1), 1, generator=generator)[0]
        tokens = torch.cat((tokens, following.view(1)))
    return tokens
