"""Minimum new tokens (HF `MinNewTokensLengthLogitsProcessor`, vLLM `min_tokens`).

The stop tokens are removed while fewer than `n` tokens have been generated (`ctx.step < n`),
so no row can end before its n-th new token. The prompt does not count.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from decodekit.stage import ProcessorBase
from decodekit_constraints.params import MinNewTokensParams
from decodekit_constraints.sequences import check_token_ids

if TYPE_CHECKING:
    from decodekit.context import DecodeContext

__all__ = ["MinNewTokens"]


class MinNewTokens(ProcessorBase[MinNewTokensParams]):
    """Remove the stop tokens until `n` tokens have been generated."""

    def __init__(self, params: MinNewTokensParams | None = None, /, **kwargs: Any) -> None:
        super().__init__(params, **kwargs)
        self._ids = torch.tensor(sorted(set(self.params.stop_tokens)), dtype=torch.long)

    def __call__(self, logits: Tensor, ctx: DecodeContext) -> Tensor:
        # Checked before the early return: with n = 0 (or a first call past n) a bad id would never be reported.
        check_token_ids(self.name, "stop_tokens", max(self.params.stop_tokens), logits.shape[-1])  # no read of _ids
        if ctx.step >= self.params.n:
            return logits
        out = logits.clone()
        out[:, self._ids.to(logits.device)] = float("-inf")
        return out
