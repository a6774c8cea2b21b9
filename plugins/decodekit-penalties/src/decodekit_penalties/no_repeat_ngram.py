"""No repeated n-grams (HF `NoRepeatNGramLogitsProcessor`; fairseq's `no_repeat_ngram_size`).

Ban every token that would complete an n-gram already present in the context (prompt
included, as in HF). The next token completes an n-gram whose first n-1 tokens are the
last n-1 tokens of the context, so one suffix is matched against every earlier window;
a matching window bans its own last token. Windows that reach into left padding do not count.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from decodekit.stage import ProcessorBase
from decodekit_penalties.context_window import context_window
from decodekit_penalties.params import NoRepeatNGramParams

if TYPE_CHECKING:
    from decodekit.context import DecodeContext

__all__ = ["NoRepeatNGram"]


class NoRepeatNGram(ProcessorBase[NoRepeatNGramParams]):
    """Remove every token that would repeat an n-gram of size `ngram_size`."""

    def __call__(self, logits: Tensor, ctx: DecodeContext) -> Tensor:
        n = self.params.ngram_size
        tokens, lengths = context_window(ctx, self.params.last_n)
        T = tokens.shape[1]
        if n > T:
            return logits
        V = logits.shape[-1]
        suffix = tokens[:, T - n + 1 :]  # [B, n-1]: the start of the n-gram the next token completes
        windows = tokens.unfold(1, n, 1)  # [B, W, n], W = T - n + 1: every n-gram of the context
        starts = torch.arange(T - n + 1, device=tokens.device)
        real = starts[None, :] >= (T - lengths)[:, None]  # [B, W]: the window holds no padding
        matches = (windows[..., :-1] == suffix[:, None, :]).all(-1) & real
        # -inf at each matching window's last token, +inf (no change under amin) elsewhere; ids >= V
        # (an embedding larger than the output layer) cannot be generated, so they ban nothing.
        last = windows[..., -1]
        ban = torch.where(matches & (last < V), float("-inf"), float("inf")).to(logits.device, logits.dtype)
        out = logits.clone()
        return out.scatter_reduce_(1, last.clamp(max=V - 1).to(logits.device), ban, reduce="amin")
