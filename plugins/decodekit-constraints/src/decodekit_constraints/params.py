"""Parameter models of the constraint samplers; bounds as the reference implementations use them."""

from __future__ import annotations

from typing import Annotated

from pydantic import BeforeValidator, Field

from decodekit.params import Params

__all__ = [
    "AllowedTokensParams",
    "BadWordsParams",
    "ExponentialDecayParams",
    "LogitBiasParams",
    "MinNewTokensParams",
    "ReasoningBudgetParams",
    "SequenceBiasParams",
]


def _not_a_bool(value: object) -> object:
    """A token id that is a dict key: JSON writes keys as strings, so a string of digits is one; a bool is not."""
    if isinstance(value, bool):
        raise ValueError("should be a number, not a bool")
    return value


# A torch.long; ids >= V fail when the vocabulary is known.
TokenId = Annotated[int, Field(ge=0, lt=2**63)]
KeyTokenId = Annotated[TokenId, BeforeValidator(_not_a_bool)]  # JSON keys are strings
TokenSequence = Annotated[tuple[TokenId, ...], Field(min_length=1)]
LogitBiasValue = Annotated[float, Field(ge=-100, le=100, allow_inf_nan=False)]
SequenceBiasValue = Annotated[float, Field(ge=-1e4, le=1e4, allow_inf_nan=False)]


class LogitBiasParams(Params):
    bias: dict[KeyTokenId, LogitBiasValue] = Field(
        description="token id -> added to its logit, -100 <= bias <= 100 (OpenAI, vLLM)"
    )


class SequenceBiasParams(Params):
    biases: tuple[tuple[TokenSequence, SequenceBiasValue], ...] = Field(
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
    include_prompt: bool = Field(
        default=True,
        description="False: a longer sequence's other tokens must all be generated ones (vLLM bad_words)",
    )


class AllowedTokensParams(Params):
    tokens: tuple[TokenId, ...] = Field(min_length=1, description="the only token ids that may be generated")


class MinNewTokensParams(Params):
    n: int = Field(ge=0, description="the stop tokens are removed until n tokens have been generated")
    stop_tokens: tuple[TokenId, ...] = Field(min_length=1, description="the token ids that end a generation")


class ExponentialDecayParams(Params):
    start: int = Field(
        ge=0, description="generated tokens before the stop tokens' logits start to grow (HF start_index)"
    )
    factor: float = Field(
        gt=0, allow_inf_nan=False, description="growth per token past start (HF decay_factor; > 1 favours stopping)"
    )
    stop_tokens: tuple[TokenId, ...] = Field(min_length=1, description="the token ids that end a generation")


class ReasoningBudgetParams(Params):
    budget: int = Field(ge=0, lt=2**63, description="tokens a reasoning block may hold before its end is forced")
    start: TokenSequence = Field(description="the token ids that open a reasoning block (e.g. <think>'s)")
    end: TokenSequence = Field(description="the token ids that close it (e.g. </think>'s)")
    forced: TokenSequence | None = Field(
        default=None, description="the token ids forced when the budget runs out (llama.cpp: a message, then end)"
    )
    open: bool = Field(
        default=False, description="the prompt ends inside a block (a template that opens <think>): count at once"
    )
