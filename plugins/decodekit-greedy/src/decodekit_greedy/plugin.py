"""Registers `greedy`; imports no torch (the implementation loads on first use)."""

from __future__ import annotations

from decodekit import hookimpl
from decodekit.hookspecs import SamplerRegistrar
from decodekit.params import NoParams


@hookimpl
def register_samplers(register: SamplerRegistrar) -> None:
    register(
        "greedy",
        "decodekit_greedy.greedy:Greedy",
        NoParams,
        "Pick the largest logit (the lowest token id on ties)",
        kind="selector",
    )
