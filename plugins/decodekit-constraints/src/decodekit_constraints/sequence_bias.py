"""Sequence bias (HF `SequenceBiasLogitsProcessor`): add a bias to the token that would complete a sequence.

A one-token sequence's bias always applies; a longer one's applies to its last token when
the context ends with the rest. Biases of several sequences completed by one token add up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torch import Tensor

from decodekit.stage import ProcessorBase
from decodekit_constraints.params import SequenceBiasParams
from decodekit_constraints.sequences import SequenceTable, check_token_ids

if TYPE_CHECKING:
    from decodekit.context import DecodeContext

__all__ = ["SequenceBias", "add_sequence_bias"]


def add_sequence_bias(owner: str, param: str, table: SequenceTable, logits: Tensor, ctx: DecodeContext) -> Tensor:
    """`logits` plus the bias of every sequence in `table` the next token would complete."""
    B, V = logits.shape
    check_token_ids(owner, param, table.max_id, V)
    out = logits.clone()
    if table.single_ids.numel():
        ids = table.single_ids.to(logits.device)
        out.index_add_(1, ids, table.single_values.to(logits.device, logits.dtype).expand(B, -1))
    for c in table.completions(ctx):
        bias = c.values.to(logits.dtype)[None, :].where(c.matched.to(logits.device), 0.0)  # [B, S]
        out.scatter_add_(1, c.last.expand(B, -1).to(logits.device), bias)
    return out


class SequenceBias(ProcessorBase[SequenceBiasParams]):
    """Add each sequence's bias to the token that would complete it."""

    def __init__(self, params: SequenceBiasParams | None = None, /, **kwargs: Any) -> None:
        super().__init__(params, **kwargs)
        self._table = SequenceTable(self.params.biases)

    def __call__(self, logits: Tensor, ctx: DecodeContext) -> Tensor:
        return add_sequence_bias(self.name, "biases", self._table, logits, ctx)
