"""The decodekit entry point: registers the `beam` strategy by import path (imports no torch)."""

from __future__ import annotations

from decodekit import hookimpl
from decodekit.hookspecs import StrategyRegistrar
from decodekit_beam.params import BeamParams

__all__ = ["register_strategies"]


@hookimpl
def register_strategies(register: StrategyRegistrar) -> None:
    register(
        "beam",
        "decodekit_beam.search:beam_policy",
        BeamParams,
        description="Beam search (Hugging Face semantics; decodekit_beam.search.beam_search)",
    )
