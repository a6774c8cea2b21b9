"""`RepetitionPenalty`: damp the logits of the tokens already in the context.

For each distinct token of the context, `x / penalty` if `x > 0` else `x * penalty`
(Keskar et al. 2019, "CTRL"; the sign rule of Hugging Face's `RepetitionPenaltyLogitsProcessor`).
One gather and one scatter over the context's token ids, never a loop over tokens: a token
that occurs twice is written twice with the same value.

Ragged batches are left-padded, and the pad id is a real token id too. A padding position
(or an id outside the vocabulary) is pointed at an extra column past the vocabulary, which
the result leaves out.
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


def _write(padded: Tensor, ids: Tensor, values: Tensor) -> Tensor:
    """`padded.scatter_(1, ids, values)`. Under compile an `index_put_`, which inductor writes into `padded`
    in place; its `scatter_` becomes a copy and a scatter, a second `[B, V + 1]` buffer (docs/benchmarks.md).
    Eager keeps `scatter_` (an `index_put_` costs ~15 us more a call)."""
    if torch.compiler.is_compiling():
        rows = torch.arange(padded.shape[0], device=padded.device).view(-1, 1).expand_as(ids)
        return padded.index_put_((rows, ids), values)
    return padded.scatter_(1, ids, values)


class RepetitionPenalty(ProcessorBase[RepetitionPenaltyParams]):
    """Positive logits of context tokens divided by `penalty`, negative ones multiplied; 1 is a no-op."""

    def __call__(self, logits: Tensor, ctx: DecodeContext) -> Tensor:
        V = logits.shape[-1]
        ids = self._context_ids(ctx, V)  # [B, T'], V where a position does not count
        if self.params.penalty == 1.0 or ids.shape[1] == 0 or V == 0:
            return logits
        # [B, V + 1]: column V, any value (here column 0's), takes the writes of what does not count
        padded = torch.cat([logits, logits[:, :1]], 1)
        penalised = self._penalise(padded.gather(1, ids))
        return _write(padded, ids, penalised)[:, :V]

    def on_candidates(self, c: Candidates, ctx: DecodeContext) -> Candidates:
        """Penalise the candidates found in the context, then sort them again."""
        ids = self._context_ids(ctx, None)
        if self.params.penalty == 1.0 or ids.shape[1] == 0:
            return c
        in_context = (c.indices[:, :, None] == ids[:, None, :]).any(-1)  # [B, K]
        values, order = torch.where(in_context, self._penalise(c.values), c.values).sort(-1, descending=True)
        return Candidates(values, c.indices.gather(1, order))

    def _penalise(self, x: Tensor) -> Tensor:
        penalty = self.params.penalty
        up = x / penalty
        if penalty < 1:  # a quotient above the dtype's range saturates, as `temperature`'s
            up = up.clamp_(max=torch.finfo(x.dtype).max)
        return torch.where(x > 0, up, x * penalty)  # -inf * penalty stays -inf

    def _context_ids(self, ctx: DecodeContext, vocab_size: int | None) -> Tensor:
        """The token ids that count `[B, T']`; a position that does not count holds `vocab_size`
        (-1 when None): padding, and (given `vocab_size`) an id the model cannot produce."""
        if self.params.include_prompt:
            ids, valid = ctx.tokens, ctx.valid_mask()
        else:
            ids, valid = ctx.generated, None  # generated tokens are never padding
        if self.params.last_n is not None:
            ids = ids[:, -self.params.last_n :]
            valid = None if valid is None else valid[:, -self.params.last_n :]
        sink = -1 if vocab_size is None else vocab_size
        if vocab_size is not None:
            ids = ids.clamp(max=vocab_size)  # token ids are >= 0 (DecodeContext checks)
        return ids if valid is None else torch.where(valid, ids, sink)
