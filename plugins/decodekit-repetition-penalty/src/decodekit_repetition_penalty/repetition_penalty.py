"""`RepetitionPenalty`: damp the logits of the tokens already in the context.

For each distinct token of the context, `x / penalty` if `x > 0` else `x * penalty`
(Keskar et al. 2019, "CTRL"; the sign rule of Hugging Face's `RepetitionPenaltyLogitsProcessor`).
One gather and one scatter over the context's token ids, never a loop over tokens: a token
that occurs twice is written twice with the same value.

Ragged batches are left-padded, and the pad id is a real token id too. A padding position
is pointed at its row's last token (real whenever the row has any real token), so it
rewrites a value the row writes anyway; a row without any real token is left as it is.
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from decodekit.stage import Candidates, Constants, ProcessorBase
from decodekit_repetition_penalty.params import RepetitionPenaltyParams

if TYPE_CHECKING:
    from decodekit.context import DecodeContext

__all__ = ["RepetitionPenalty"]


class RepetitionPenalty(ProcessorBase[RepetitionPenaltyParams]):
    """Positive logits of context tokens divided by `penalty`, negative ones multiplied; 1 is a no-op."""

    name = "repetition_penalty"
    params_model = RepetitionPenaltyParams

    def __call__(self, logits: Tensor, ctx: DecodeContext) -> Tensor:
        return self._apply(logits, ctx, in_place=False)

    def process_(self, logits: Tensor, ctx: DecodeContext) -> Tensor:
        """The call's result written into `logits` (see `decodekit.stage`)."""
        return self._apply(logits, ctx, in_place=True)

    def _apply(self, logits: Tensor, ctx: DecodeContext, *, in_place: bool) -> Tensor:
        if self.params.penalty == 1.0:
            return logits
        ids, has_real = self._context_ids(ctx)  # [B, T'], [B, 1] or None
        if ids.shape[1] == 0:
            return logits
        seen = logits.gather(1, ids)  # [B, T'] logits of the context tokens
        penalised = self._penalise(seen)
        if has_real is not None:
            penalised = torch.where(has_real, penalised, seen)
        return logits.scatter_(1, ids, penalised) if in_place else logits.scatter(1, ids, penalised)

    def on_candidates(self, c: Candidates, ctx: DecodeContext) -> Candidates:
        """Penalise the candidates found in the context, then sort them again."""
        if self.params.penalty == 1.0:
            return c
        ids, has_real = self._context_ids(ctx)
        if ids.shape[1] == 0:
            return c
        in_context = (c.indices[:, :, None] == ids[:, None, :]).any(-1)  # [B, K]
        if has_real is not None:
            in_context &= has_real
        values, order = torch.where(in_context, self._penalise(c.values), c.values).sort(-1, descending=True)
        return Candidates(values, c.indices.gather(1, order))

    @cached_property
    def _constants(self) -> Constants:
        return Constants(0.0, self.params.penalty)

    def _penalise(self, x: Tensor) -> Tensor:
        zero, penalty = self._constants.like(x)
        return torch.where(x > zero, x / penalty, x * penalty)  # -inf * penalty stays -inf

    def _context_ids(self, ctx: DecodeContext) -> tuple[Tensor, Tensor | None]:
        """The token ids that count `[B, T']`, padding redirected, and `[B, 1]` "row has a real token".

        The second is None when no row is padded.
        """
        if self.params.include_prompt:
            ids, valid = ctx.tokens, ctx.valid_mask()
        else:
            ids, valid = ctx.generated, None  # generated tokens are never padding
        if self.params.last_n is not None:
            ids = ids[:, -self.params.last_n :]
            valid = None if valid is None else valid[:, -self.params.last_n :]
        if valid is None or ids.shape[1] == 0:
            return ids, None
        # valid is a suffix of each row, so the last column is real iff the row has a real token
        return torch.where(valid, ids, ids[:, -1:]), valid[:, -1:]
