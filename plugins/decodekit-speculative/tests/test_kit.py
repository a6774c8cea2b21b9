"""The strategy conformance kit on speculative decoding, with prompt lookup and with a model draft."""

from __future__ import annotations

from typing import Any

from decodekit.testing.strategies import StrategyConformance
from decodekit.testing.tiny_lm import TinyLM


class TestSpeculativeNgram(StrategyConformance):
    strategy = "speculative(draft=ngram, k=3)"


class TestSpeculativeModelDraft(StrategyConformance):
    strategy = "speculative(k=4)"

    def options(self) -> dict[str, Any]:
        return {"draft": TinyLM(26, dim=16, n_layers=1, n_heads=2, max_positions=64, seed=1)}


class TestSpeculativeGreedyWindow(StrategyConformance):
    strategy = "speculative(draft=ngram, k=2)"

    def options(self) -> dict[str, Any]:
        return {"chain": "greedy", "cache": "window(size=8, sinks=2)"}
