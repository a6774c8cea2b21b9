"""`RepetitionPenalty`: damp the logits of the tokens already in the context.

For each distinct token of the context, `x / penalty` if `x > 0` else `x * penalty`
(Keskar et al. 2019, "CTRL"; the sign rule of Hugging Face's `RepetitionPenaltyLogitsProcessor`).
One gather and one scatter over the context's token ids, never a loop over tokens: a token
that occurs twice is written twice with the same value.

Ragged batches are left-padded, and the pad id is a real token id too. A padding position
(or an id outside the vocabulary) is pointed at a counting id of its row, so it rewrites a
value the row writes anyway; a row without any counting token is left as it is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from decodekit.stage import Candidates, ProcessorBase
from decodekit_repetition_penalty.params import RepetitionPenaltyParams

if TYPE_CHECKING:
    from decodekit.context import DecodeContext

__all__ = ["RepetitionPenalty"]


class RepetitionPenalty(ProcessorBase[RepetitionPenaltyParams]):
    """Positive logits of context tokens divided by `penalty`, negative ones multiplied; 1 is a no-op."""

    name = "repetition_penalty"
    params_model = RepetitionPenaltyParams

    def __call__(self, logits: Tensor, ctx: DecodeContext) -> Tensor:
        if self.params.penalty == 1.0:
            return logits
        ids, has_real = self._context_ids(ctx, logits.shape[-1])  # [B, T'], [B, 1] or None
        if ids.shape[1] == 0:
            return logits
        seen = logits.gather(1, ids)  # [B, T'] logits of the context tokens
        penalised = self._penalise(seen)
        if has_real is not None:
            penalised = torch.where(has_real, penalised, seen)
        return logits.scatter(1, ids, penalised)

    def on_candidates(self, c: Candidates, ctx: DecodeContext) -> Candidates:
        """Penalise the candidates found in the context, then sort them again."""
        if self.params.penalty == 1.0:
            return c
        ids, has_real = self._context_ids(ctx, None)
        if ids.shape[1] == 0:
            return c
        in_context = (c.indices[:, :, None] == ids[:, None, :]).any(-1)  # [B, K]
        if has_real is not None:
            in_context &= has_real
        values, order = torch.where(in_context, self._penalise(c.values), c.values).sort(-1, descending=True)
        return Candidates(values, c.indices.gather(1, order))

    def _penalise(self, x: Tensor) -> Tensor:
        penalty = self.params.penalty
        return torch.where(x > 0, x / penalty, x * penalty)  # -inf * penalty stays -inf

    def _context_ids(self, ctx: DecodeContext, vocab_size: int | None) -> tuple[Tensor, Tensor | None]:
        """The token ids that count `[B, T']`, and `[B, 1]` whether the row has any (None: all count).

        Padding does not count, nor (given `vocab_size`) an id outside the vocabulary, which the
        model cannot produce. Such a position is pointed at a counting id of its row, so it
        rewrites the value that id gets anyway.
        """
        if self.params.include_prompt:
            ids, valid = ctx.tokens, ctx.valid_mask()
        else:
            ids, valid = ctx.generated, None  # generated tokens are never padding
        if self.params.last_n is not None:
            ids = ids[:, -self.params.last_n :]
            valid = None if valid is None else valid[:, -self.params.last_n :]
        counts = valid
        if vocab_size is not None:
            in_range = (ids >= 0) & (ids < vocab_size)
            counts = in_range if counts is None else counts & in_range
        if counts is None or ids.shape[1] == 0:
            return ids, None
        stand_in = torch.where(counts, ids, -1).amax(-1, keepdim=True)  # [B, 1] a counting id, -1 if none
        return torch.where(counts, ids, stand_in.clamp(min=0)), stand_in >= 0
