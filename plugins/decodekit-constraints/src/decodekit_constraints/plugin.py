"""Registers the constraint samplers; imports no torch (implementations load on first use)."""

from __future__ import annotations

from decodekit import hookimpl
from decodekit.hookspecs import SamplerRegistrar
from decodekit_constraints.params import (
    AllowedTokensParams,
    BadWordsParams,
    ExponentialDecayParams,
    LogitBiasParams,
    MinNewTokensParams,
    ReasoningBudgetParams,
    SequenceBiasParams,
)


@hookimpl
def register_samplers(register: SamplerRegistrar) -> None:
    register(
        "logit_bias",
        "decodekit_constraints.logit_bias:LogitBias",
        LogitBiasParams,
        "Add a fixed bias to the logits of given token ids",
    )
    register(
        "sequence_bias",
        "decodekit_constraints.sequence_bias:SequenceBias",
        SequenceBiasParams,
        "Add a bias to the token that would complete a given token sequence",
    )
    register(
        "bad_words",
        "decodekit_constraints.bad_words:BadWords",
        BadWordsParams,
        "Remove the token that would complete any of the given token sequences",
    )
    register(
        "allowed_tokens",
        "decodekit_constraints.allowed_tokens:AllowedTokens",
        AllowedTokensParams,
        "Remove every token but the given ones",
    )
    register(
        "min_new_tokens",
        "decodekit_constraints.min_new_tokens:MinNewTokens",
        MinNewTokensParams,
        "Remove the stop tokens until n tokens have been generated",
    )
    register(
        "exponential_decay",
        "decodekit_constraints.exponential_decay:ExponentialDecay",
        ExponentialDecayParams,
        "Raise the stop tokens' logits exponentially once `start` tokens have been generated",
    )
    register(
        "reasoning_budget",
        "decodekit_constraints.reasoning_budget:ReasoningBudget",
        ReasoningBudgetParams,
        "Force the end of a reasoning block (<think> ... </think>) once it holds `budget` tokens (llama.cpp)",
    )
