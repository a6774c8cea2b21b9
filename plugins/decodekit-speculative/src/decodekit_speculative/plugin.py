"""The decodekit entry point: registers the `speculative` strategy by import path (imports no torch)."""

from __future__ import annotations

from decodekit import hookimpl
from decodekit.hookspecs import StrategyRegistrar
from decodekit_speculative.params import SpeculativeParams

__all__ = ["register_strategies"]


@hookimpl
def register_strategies(register: StrategyRegistrar) -> None:
    register(
        "speculative",
        "decodekit_speculative.strategy:speculative_policy",
        SpeculativeParams,
        description="Speculative decoding: a draft model or prompt lookup proposes, the target verifies (exact)",
    )
