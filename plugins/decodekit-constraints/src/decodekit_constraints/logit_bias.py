"""Logit bias (OpenAI, vLLM `logit_bias`): a fixed bias per token id, added to its logit.

For biases that depend on the preceding tokens (HF `SequenceBiasLogitsProcessor`) use `sequence_bias`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torch import Tensor

from decodekit.stage import ProcessorBase
from decodekit_constraints.params import LogitBiasParams
from decodekit_constraints.sequence_bias import add_sequence_bias
from decodekit_constraints.sequences import SequenceTable

if TYPE_CHECKING:
    from decodekit.context import DecodeContext

__all__ = ["LogitBias"]


class LogitBias(ProcessorBase[LogitBiasParams]):
    """Add `bias[token]` to each listed token's logit."""

    def __init__(self, params: LogitBiasParams | None = None, /, **kwargs: Any) -> None:
        super().__init__(params, **kwargs)
        self._table = SequenceTable(((token,), b) for token, b in self.params.bias.items())

    def __call__(self, logits: Tensor, ctx: DecodeContext) -> Tensor:
        if not self.params.bias:
            return logits
        return add_sequence_bias(self.name, "bias", self._table, logits, ctx)
