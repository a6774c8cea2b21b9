"""Parameter models of the penalty samplers; bounds as the reference implementations use them.

Every penalty takes an optional window `last_n`: only the last n tokens of what it looks at count.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from decodekit.params import Params

__all__ = ["DRYParams", "FrequencyPenaltyParams", "NoRepeatNGramParams", "PresencePenaltyParams"]


# A torch.long; ids >= V fail when the vocabulary is known.
TokenId = Annotated[int, Field(ge=0, lt=2**63)]
_LAST_N = "only the last n tokens count (None: all of them)"
_INCLUDE_PROMPT = "True: the prompt's tokens count too (llama.cpp's penalties); False: the generated ones only (vLLM)"


class FrequencyPenaltyParams(Params):
    penalty: float = Field(
        ge=-2, le=2, allow_inf_nan=False, description="subtracted once per occurrence in the generated tokens"
    )
    last_n: int | None = Field(default=None, ge=1, description=_LAST_N)
    include_prompt: bool = Field(default=False, description=_INCLUDE_PROMPT)


class PresencePenaltyParams(Params):
    penalty: float = Field(
        ge=-2, le=2, allow_inf_nan=False, description="subtracted once from every token already generated"
    )
    last_n: int | None = Field(default=None, ge=1, description=_LAST_N)
    include_prompt: bool = Field(default=False, description=_INCLUDE_PROMPT)


class NoRepeatNGramParams(Params):
    ngram_size: int = Field(ge=1, description="no n-gram of this size may occur twice in the context")
    last_n: int | None = Field(default=None, ge=1, description=_LAST_N)


class DRYParams(Params):
    multiplier: float = Field(ge=0, allow_inf_nan=False, description="penalty scale (0: no-op)")
    base: float = Field(
        default=1.75,
        ge=1,
        allow_inf_nan=False,
        description="penalty = multiplier * base ** (repeat length - allowed_length)",
    )
    allowed_length: int = Field(default=2, ge=1, description="repeats up to this long are not penalised")
    last_n: int | None = Field(default=None, ge=1, description=_LAST_N + "; llama.cpp's penalty_last_n")
    sequence_breakers: tuple[Annotated[tuple[TokenId, ...], Field(min_length=1)], ...] = Field(
        default=(), description="token-id sequences that end a repeat (a repeat never spans one)"
    )
