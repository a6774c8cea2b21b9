"""Registers the penalty samplers; imports no torch (implementations load on first use)."""

from __future__ import annotations

from decodekit import hookimpl
from decodekit.hookspecs import SamplerRegistrar
from decodekit_penalties.params import (
    DRYParams,
    FrequencyPenaltyParams,
    NoRepeatNGramParams,
    PresencePenaltyParams,
)


@hookimpl
def register_samplers(register: SamplerRegistrar) -> None:
    register(
        "frequency_penalty",
        "decodekit_penalties.frequency_penalty:FrequencyPenalty",
        FrequencyPenaltyParams,
        "Subtract penalty * (times the token was generated) from its logit",
    )
    register(
        "presence_penalty",
        "decodekit_penalties.presence_penalty:PresencePenalty",
        PresencePenaltyParams,
        "Subtract penalty from the logit of every token generated so far",
    )
    register(
        "no_repeat_ngram",
        "decodekit_penalties.no_repeat_ngram:NoRepeatNGram",
        NoRepeatNGramParams,
        "Remove tokens that would repeat an n-gram of the context",
    )
    register(
        "dry",
        "decodekit_penalties.dry:DRY",
        DRYParams,
        "Don't repeat yourself: penalise tokens that extend a repeat, exponentially in its length",
    )
