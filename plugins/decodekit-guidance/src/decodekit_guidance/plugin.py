"""The decodekit entry point: registers the `cfg` strategy by import path (imports no torch)."""

from __future__ import annotations

from decodekit import hookimpl
from decodekit.hookspecs import StrategyRegistrar
from decodekit_guidance.params import GuidanceParams

__all__ = ["register_strategies"]


@hookimpl
def register_strategies(register: StrategyRegistrar) -> None:
    register(
        "cfg",
        "decodekit_guidance.strategy:guidance_policy",
        GuidanceParams,
        description="Classifier-free guidance (Hugging Face's guidance_scale; decodekit_guidance.strategy.cfg)",
    )
