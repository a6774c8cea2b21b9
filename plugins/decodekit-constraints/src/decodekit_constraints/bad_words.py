"""Bad words (HF `NoBadWordsLogitsProcessor`): never generate any of the given token sequences.

A one-token sequence is always removed; a longer one's last token is removed when the
context ends with the rest of it (with `include_prompt=False`, when the generated tokens do: vLLM's rule).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from decodekit.stage import ProcessorBase
from decodekit_constraints.params import BadWordsParams
from decodekit_constraints.sequences import SequenceTable, check_token_ids

if TYPE_CHECKING:
    from decodekit.context import DecodeContext

__all__ = ["BadWords"]


class BadWords(ProcessorBase[BadWordsParams]):
    """Remove the token that would complete any of `sequences`."""

    def __init__(self, params: BadWordsParams | None = None, /, **kwargs: Any) -> None:
        super().__init__(params, **kwargs)
        self._table = SequenceTable((seq, 0.0) for seq in self.params.sequences)

    def __call__(self, logits: Tensor, ctx: DecodeContext) -> Tensor:
        B, V = logits.shape
        check_token_ids(self.name, "sequences", self._table.max_id, V)
        out = logits.clone()
        out[:, self._table.single_ids.to(logits.device)] = float("-inf")
        for c in self._table.completions(ctx, generated_only=not self.params.include_prompt):
            # -inf where the row completes the sequence, +inf (no change under amin) where it does not;
            # amin, so that two sequences ending in the same token cannot undo each other.
            ban = torch.where(c.matched, float("-inf"), float("inf")).to(logits.device, logits.dtype)  # [B, S]
            out.scatter_reduce_(1, c.last.expand(B, -1).to(logits.device), ban, reduce="amin")
        return out
