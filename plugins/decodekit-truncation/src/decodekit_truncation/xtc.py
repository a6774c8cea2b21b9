"""XTC, "exclude top choices" (text-generation-webui; llama.cpp `llama_sampler_xtc_apply`).

With chance `probability` per row and step, remove every token with p >= `threshold`
except the least probable of them, so a less obvious token is sampled while a coherent
one (the last top choice) stays available. Nothing happens when fewer than two tokens
reach the threshold, or when fewer than `min_keep` tokens would remain.

At most 1/threshold tokens can have p >= threshold, so the top choices lie among the
floor(1/threshold) + 1 largest logits: XTC looks only there (the grid search of
`decodekit.candidates.top_candidates`, no sort), plus one logsumexp for the probabilities.
With m the least probable top choice it removes the tokens above m (at least one, or
nothing happens).

Randomness: one uniform draw per row per call, from the row's own generator
(`ctx.uniform()`), drawn whether or not the row then applies XTC, so a row's stream
never depends on the other rows. Ties: llama.cpp keeps one of several tokens tied at the
least probable top choice (whichever its sort puts last); this keeps all of them.

`special_tokens` (mlx-lm's `xtc_special_tokens`) are never removed; they still count as top choices,
so one of them may be the least probable top choice that decides what goes.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from decodekit.candidates import top_candidates
from decodekit.errors import ParameterError
from decodekit.stage import ProcessorBase
from decodekit_truncation._keep import NEG_INF, as_float32
from decodekit_truncation.params import XTCParams

if TYPE_CHECKING:
    from decodekit.context import DecodeContext

__all__ = ["XTC"]


class XTC(ProcessorBase[XTCParams]):
    """With chance `probability`, remove all tokens with p >= threshold except the least probable of them."""

    def __call__(self, logits: Tensor, ctx: DecodeContext) -> Tensor:
        prm = self.params
        self._check_special_tokens(logits.shape[-1])
        if prm.probability == 0 or prm.threshold > 0.5:
            return logits  # llama.cpp: never applies
        applies = ctx.uniform().to(logits.device)[:, None] < prm.probability  # [B, 1], one draw per row
        x = as_float32(logits)
        V = x.shape[-1]
        # At most 1/threshold tokens reach the threshold: they are among the K largest (all, for a tiny threshold).
        K = V if prm.threshold * V <= 1 else int(1 / prm.threshold) + 1
        c, _ = top_candidates(x, K)  # [B, K] descending
        values, ids = c.values, c.indices
        if prm.threshold == 0:  # every candidate (not a removed token) is a top choice
            top = values > NEG_INF
        else:
            top = values >= math.log(prm.threshold) + torch.logsumexp(x, -1, keepdim=True)  # p >= threshold
        least_top = torch.where(top, values, torch.inf).amin(-1, keepdim=True)  # the top choice that survives
        remove = values > least_top  # [B, K]: top choices (and only those) above it
        if prm.special_tokens:
            remove &= ~torch.isin(ids, torch.tensor(prm.special_tokens, device=ids.device))
        applies &= remove.any(-1, keepdim=True)  # at least two top choices, one of them removable
        if prm.min_keep > 1:
            left = (x > NEG_INF).sum(-1, keepdim=True) - remove.sum(-1, keepdim=True)
            applies &= left >= min(prm.min_keep, V + 1)  # a Python int past int64 cannot meet a tensor
        out = logits.clone()
        removed = torch.full_like(values, NEG_INF, dtype=logits.dtype)
        return out.scatter_(1, ids, torch.where(remove & applies, removed, logits.gather(1, ids)))

    def _check_special_tokens(self, vocab_size: int) -> None:
        """Refuse a special token outside the vocabulary (known only when logits arrive)."""
        if self.params.special_tokens and max(self.params.special_tokens) >= vocab_size:
            raise ParameterError(
                f"{self.name}: special_tokens holds token id {max(self.params.special_tokens)}, outside the "
                f"vocabulary of {vocab_size} tokens; allowed: 0 <= token id < {vocab_size}"
            )
