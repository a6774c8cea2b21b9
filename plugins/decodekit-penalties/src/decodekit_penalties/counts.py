"""Token counts over the generated tokens (or the whole context), shared by the frequency and presence penalties."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from decodekit_penalties.context_window import context_window

if TYPE_CHECKING:
    from decodekit.context import DecodeContext

__all__ = ["counted_tokens", "token_counts"]


def counted_tokens(ctx: DecodeContext, last_n: int | None, include_prompt: bool) -> Tensor:
    """The tokens `[B, n]` a penalty counts: the generated ones, or with `include_prompt` the whole context
    (llama.cpp's penalties window reaches into the prompt); the last `last_n` of them. Padding is -1."""
    if not include_prompt:
        gen = ctx.generated
        return gen if last_n is None else gen[:, max(0, gen.shape[1] - last_n) :]
    tokens, lengths = context_window(ctx, last_n)
    padding = torch.arange(tokens.shape[1], device=tokens.device) < (tokens.shape[1] - lengths)[:, None]
    return tokens.masked_fill(padding, -1)  # -1 counts nowhere (token_counts)


def token_counts(tokens: Tensor, vocab_size: int, dtype: torch.dtype) -> Tensor:
    """How often each token id occurs in each row: `[B, n]` ids -> `[B, V]` counts.

    An id outside [0, V) (an embedding larger than the output layer) counts nowhere.
    """
    in_range = (tokens >= 0) & (tokens < vocab_size)
    counts = torch.zeros(tokens.shape[0], vocab_size, dtype=dtype, device=tokens.device)
    return counts.scatter_add_(1, tokens.clamp(0, vocab_size - 1), in_range.to(dtype))
