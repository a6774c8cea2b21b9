"""The part of the context a penalty looks at: real (non-padding) tokens, optionally the last n."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

if TYPE_CHECKING:
    from decodekit.context import DecodeContext

__all__ = ["context_window"]


def context_window(ctx: DecodeContext, last_n: int | None) -> tuple[Tensor, Tensor]:
    """`(tokens [B, T], lengths [B])`: the last T columns of the context and each row's real tokens among them.

    Prompts are left-padded, so row b's real tokens are its last `lengths[b]` columns.
    """
    tokens = ctx.tokens
    T = tokens.shape[1]
    if ctx.prompt_lengths is None:
        lengths = torch.full((tokens.shape[0],), T, dtype=torch.long, device=tokens.device)
    else:
        lengths = ctx.prompt_lengths.to(tokens.device, torch.long) + ctx.step
    if last_n is not None and last_n < T:
        tokens = tokens[:, T - last_n :]
        lengths = lengths.clamp(max=last_n)
    return tokens, lengths
