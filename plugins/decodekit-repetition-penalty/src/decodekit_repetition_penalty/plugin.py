"""Registers `repetition_penalty`; imports no torch (the implementation loads on first use)."""

from __future__ import annotations

from decodekit import hookimpl
from decodekit.hookspecs import SamplerRegistrar
from decodekit_repetition_penalty.params import RepetitionPenaltyParams


@hookimpl
def register_samplers(register: SamplerRegistrar) -> None:
    register(
        "repetition_penalty",
        "decodekit_repetition_penalty.repetition_penalty:RepetitionPenalty",
        RepetitionPenaltyParams,
        "Damp tokens already in the context: positive logits / penalty, negative ones * penalty",
    )
