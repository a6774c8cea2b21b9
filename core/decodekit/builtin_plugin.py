"""The core's own registrations, made through the same hooks as any plugin."""

from __future__ import annotations

from decodekit.hookspecs import SamplerRegistrar, StrategyRegistrar, hookimpl


@hookimpl
def register_samplers(register: SamplerRegistrar) -> None:
    register(
        "sample",
        "decodekit.sample:Sample",
        description="Draw a token from softmax(logits) with the row's own generator",
        kind="selector",
    )


@hookimpl
def register_strategies(register: StrategyRegistrar) -> None:
    register(
        "sample",
        "decodekit.loop:sample_policy",
        description="One token per step from the chain's selector (dk.generate)",
    )
