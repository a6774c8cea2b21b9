"""Token counts over the generated tokens, shared by the frequency and presence penalties."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

if TYPE_CHECKING:
    from decodekit.context import DecodeContext

__all__ = ["generated_window", "token_counts"]


def generated_window(ctx: DecodeContext, last_n: int | None) -> Tensor:
    """The generated tokens `[B, n]` the penalty looks at: all of them, or the last `last_n`."""
    gen = ctx.generated
    return gen if last_n is None else gen[:, max(0, gen.shape[1] - last_n) :]


def token_counts(tokens: Tensor, vocab_size: int, dtype: torch.dtype) -> Tensor:
    """How often each token id occurs in each row: `[B, n]` ids -> `[B, V]` counts.

    An id outside [0, V) (an embedding larger than the output layer) counts nowhere.
    """
    in_range = (tokens >= 0) & (tokens < vocab_size)
    counts = torch.zeros(tokens.shape[0], vocab_size, dtype=dtype, device=tokens.device)
    return counts.scatter_add_(1, tokens.clamp(0, vocab_size - 1), in_range.to(dtype))
