"""Allowed tokens: only the listed token ids may be generated; every other token is removed.

(vLLM `allowed_token_ids`.) A listed token that an earlier stage removed stays removed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from decodekit.stage import ProcessorBase
from decodekit_constraints.params import AllowedTokensParams
from decodekit_constraints.sequences import check_token_ids

if TYPE_CHECKING:
    from decodekit.context import DecodeContext

__all__ = ["AllowedTokens"]


class AllowedTokens(ProcessorBase[AllowedTokensParams]):
    """Set every logit to -inf except those of `tokens`."""

    def __init__(self, params: AllowedTokensParams | None = None, /, **kwargs: Any) -> None:
        super().__init__(params, **kwargs)
        self._ids = torch.tensor(sorted(set(self.params.tokens)), dtype=torch.long)

    def __call__(self, logits: Tensor, ctx: DecodeContext) -> Tensor:
        check_token_ids(self.name, "tokens", max(self.params.tokens), logits.shape[-1])  # no read of _ids
        ids = self._ids.to(logits.device)
        out = torch.full_like(logits, float("-inf"))
        out[:, ids] = logits[:, ids]
        return out
