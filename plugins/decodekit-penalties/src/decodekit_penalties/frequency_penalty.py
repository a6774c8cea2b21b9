"""Frequency penalty (OpenAI, vLLM `frequency_penalty`): logit -= count * penalty.

`count` is how often the token occurs among the generated tokens (with `include_prompt`, the
whole context, as llama.cpp's penalties), optionally only the last `last_n` of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from decodekit.stage import ProcessorBase
from decodekit_penalties.counts import counted_tokens, token_counts
from decodekit_penalties.params import FrequencyPenaltyParams

if TYPE_CHECKING:
    from decodekit.context import DecodeContext

__all__ = ["FrequencyPenalty"]


class FrequencyPenalty(ProcessorBase[FrequencyPenaltyParams]):
    """Subtract `penalty` from a token's logit once per time it was generated."""

    def __call__(self, logits: Tensor, ctx: DecodeContext) -> Tensor:
        tokens = counted_tokens(ctx, self.params.last_n, self.params.include_prompt)
        if tokens.shape[1] == 0 or self.params.penalty == 0:
            return logits
        counts = token_counts(tokens.to(logits.device), logits.shape[-1], logits.dtype)
        return torch.add(logits, counts, alpha=-self.params.penalty)
