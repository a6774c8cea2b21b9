"""`TopP`: nucleus truncation (Holtzman et al. 2020).

Rule, on the tokens sorted by logit: token i is dropped when the probability of the tokens
before it already reaches p (`cum[i-1] >= p`). So the token that crosses p stays, the most
probable token always stays, and the kept tokens are a prefix: every logit >= the last
kept one (its ties included). At least `min_keep` tokens (and their ties) are kept.

The nucleus is searched among the `ROOM` most probable tokens (`top_candidates`, no sort); a
row whose nucleus does not fit there is sorted whole: on the dense call after one host read,
on the candidate path by the chain's dense redo.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from decodekit.candidates import keep_at_least, top_candidates
from decodekit.sample import sorted_position
from decodekit.stage import Candidates, ProcessorBase
from decodekit_top_p.params import TopPParams

if TYPE_CHECKING:
    from decodekit.context import DecodeContext

__all__ = ["ROOM", "TopP"]

ROOM = 256
"""Tokens searched for the nucleus before sorting the whole row."""


def _as_float(x: Tensor) -> Tensor:
    return x if x.dtype in (torch.float32, torch.float64) else x.float()


def _last_kept(values: Tensor, total: Tensor | None, p: float, min_keep: int, top: Tensor | None = None) -> Tensor:
    """Position `[B, 1]` in sorted `values` `[B, K]` of the last token kept (K when the cut lies past
    them), given each row's `total` unnormalised mass `exp(x - max)` (None: the values' own) and
    `top`, the float values' first column if the caller has it."""
    x = _as_float(values)
    cum = (x - (x[:, :1] if top is None else top)).exp().cumsum(-1)  # [B, K]
    target = cum[:, -1:] * p if total is None else total * p
    pos = sorted_position(cum, target)  # the first token whose own cum reaches the target
    return pos.clamp(min=min_keep - 1) if min_keep > 1 else pos


class TopP(ProcessorBase[TopPParams]):
    """Keep the smallest most-probable prefix whose probability reaches p; `p = 1` is a no-op."""

    def __call__(self, logits: Tensor, ctx: DecodeContext) -> Tensor:
        if self.params.p >= 1.0:
            return logits
        _, floor, held = self._nucleus(logits, ROOM)
        if not bool(held.all()):  # the dense call's one host read: sort the whole row
            _, floor, _ = self._nucleus(logits, logits.shape[-1])
        return logits.masked_fill(logits < floor, float("-inf"))  # NaN is never < floor: it stays visible

    def to_candidates(self, logits: Tensor, ctx: DecodeContext) -> Candidates | None:
        """The nucleus among the `ROOM` most probable tokens; None when p = 1 (nothing is removed)."""
        if self.params.p >= 1.0:
            return None
        c, floor, held = self._nucleus(logits, ROOM)
        return keep_at_least(c, floor, held)

    def on_candidates(self, c: Candidates, ctx: DecodeContext) -> Candidates:
        if self.params.p >= 1.0:
            return c
        K = c.values.shape[1]
        last = _last_kept(c.values, None, self.params.p, min(self.params.min_keep, K)).clamp_(max=K - 1)
        floor = c.values.gather(1, last)  # (a NaN row lands past the end: hence the clamp)
        return Candidates(c.values.masked_fill(c.values < floor, float("-inf")), c.indices)

    def _nucleus(self, logits: Tensor, room: int) -> tuple[Candidates, Tensor, Tensor]:
        """The `room` (at least `min_keep`) most probable tokens, the last kept logit `[B, 1]`, and
        whether the nucleus is known from them `[B, 1]` (the cut among them, no tie past them)."""
        V = logits.shape[-1]
        min_keep = min(self.params.min_keep, V)
        n = max(room, min_keep)
        c, bound = top_candidates(logits, n)
        K = c.values.shape[1]
        x = _as_float(logits)
        top = _as_float(c.values[:, :1])  # the row's max, shared by the total and the prefix sums
        total = (x - top).exp_().sum(-1, keepdim=True)
        pos = _last_kept(c.values, total, self.params.p, min_keep, top)
        # A row with fewer finite logits than min_keep keeps just those; NaN stays NaN.
        floor = c.values.gather(1, pos.clamp(max=K - 1)).clamp(min=torch.finfo(logits.dtype).min)
        if n >= V:  # the whole row is listed (bound -inf): known but in a NaN row, whose floor is NaN
            return c, floor, floor > bound
        return c, floor, ((pos < K) | torch.isneginf(bound)) & (floor > bound)
