"""The strategy conformance kit on `cfg`: without a negative prompt, with one for all, through a chain that samples."""

from __future__ import annotations

from typing import Any

from decodekit.testing.strategies import StrategyConformance


class TestGuidanceLastToken(StrategyConformance):
    strategy = "cfg(scale=2.0)"


class TestGuidanceNegativeText(StrategyConformance):
    strategy = 'cfg(scale=1.5, negative="zzz")'

    def options(self) -> dict[str, Any]:
        return {"chain": "repetition_penalty(1.2) | temperature(0.8) | top_p(0.9)"}


class TestGuidanceTowardsTheNegative(StrategyConformance):
    strategy = "cfg(scale=-0.5, negative=[3, 4, 5])"

    def options(self) -> dict[str, Any]:
        return {"chain": "greedy", "cache": "none"}
