"""Parameter models of the constraint samplers; bounds as the reference implementations use them."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from decodekit.params import Params

__all__ = [
    "AllowedTokensParams",
    "BadWordsParams",
    "LogitBiasParams",
    "MinNewTokensParams",
    "SequenceBiasParams",
]

TokenId = Annotated[int, Field(ge=0, lt=2**63)]  # a torch.long; ids >= V fail when the vocabulary is known
TokenSequence = Annotated[tuple[TokenId, ...], Field(min_length=1)]


class LogitBiasParams(Params):
    bias: dict[TokenId, Annotated[float, Field(ge=-100, le=100, allow_inf_nan=False)]] = Field(
        description="token id -> added to its logit, -100 <= bias <= 100 (OpenAI, vLLM)"
    )


class SequenceBiasParams(Params):
    biases: tuple[tuple[TokenSequence, Annotated[float, Field(ge=-1e4, le=1e4, allow_inf_nan=False)]], ...] = Field(
        min_length=1,
        description="[[token ids], bias] pairs (HF sequence_bias): the bias is added to the last token "
        "when the context ends with the others",
    )


class BadWordsParams(Params):
    sequences: tuple[TokenSequence, ...] = Field(
        min_length=1,
        description="token-id sequences never to generate (HF bad_words_ids): the last token is removed "
        "when the context ends with the others",
    )


class AllowedTokensParams(Params):
    tokens: tuple[TokenId, ...] = Field(min_length=1, description="the only token ids that may be generated")


class MinNewTokensParams(Params):
    n: int = Field(ge=0, description="the stop tokens are removed until n tokens have been generated")
    stop_tokens: tuple[TokenId, ...] = Field(min_length=1, description="the token ids that end a generation")
