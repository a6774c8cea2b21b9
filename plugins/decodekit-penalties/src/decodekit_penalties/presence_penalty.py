"""Presence penalty (OpenAI, vLLM `presence_penalty`): logit -= penalty if the token was generated.

Only the generated tokens count (with `include_prompt`, the whole context, as llama.cpp's
penalties), optionally only the last `last_n`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from decodekit.stage import ProcessorBase
from decodekit_penalties.counts import counted_tokens, token_counts
from decodekit_penalties.params import PresencePenaltyParams

if TYPE_CHECKING:
    from decodekit.context import DecodeContext

__all__ = ["PresencePenalty"]


class PresencePenalty(ProcessorBase[PresencePenaltyParams]):
    """Subtract `penalty` once from the logit of every token generated so far."""

    def __call__(self, logits: Tensor, ctx: DecodeContext) -> Tensor:
        tokens = counted_tokens(ctx, self.params.last_n, self.params.include_prompt).to(logits.device)
        if tokens.shape[1] == 0 or self.params.penalty == 0:
            return logits
        present = token_counts(tokens, logits.shape[-1], logits.dtype) > 0  # [B, V]; a repeated token once
        return torch.where(present, logits - self.params.penalty, logits)
