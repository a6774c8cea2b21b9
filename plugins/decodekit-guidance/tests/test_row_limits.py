"""`max_new_tokens` per prompt under cfg: each prompt gets exactly what it gets alone with its own int."""

from __future__ import annotations

from typing import Any

import pytest

import decodekit as dk
from decodekit.testing.tiny_lm import TinyLM

PROMPTS = [[1, 2, 3], [4, 5], [6, 7, 8, 9], [10]]
LIMITS = [3, 7, 0, 5]
SEEDS = [31, 32, 33, 34]


@pytest.mark.parametrize("scale", [1.0, 1.5])  # 1: cfg decodes as sample does; else the guided pairs
@pytest.mark.parametrize("chain", ["greedy", "top_k(6) | temperature(0.7)"])
def test_each_prompt_gets_what_it_gets_alone_with_its_own_limit(model: TinyLM, scale: float, chain: str) -> None:
    options: dict[str, Any] = {"strategy": "cfg", "scale": scale, "negative": [2, 2], "chain": chain, "stop_tokens": []}
    out = dk.decode(model, PROMPTS, max_new_tokens=LIMITS, seed=SEEDS, **options)
    assert [len(t) for t in out.tokens] == LIMITS
    for b, (prompt, limit, seed) in enumerate(zip(PROMPTS, LIMITS, SEEDS)):
        assert out.tokens[b] == dk.decode(model, [prompt], max_new_tokens=limit, seed=[seed], **options).tokens[0]


def test_validate_checks_the_list(model: TinyLM) -> None:
    with pytest.raises(dk.ParameterError, match=r"max_new_tokens: 2 limits given for 4 prompts"):
        dk.validate(model, PROMPTS, strategy="cfg", scale=1.5, negative=[2, 2], max_new_tokens=[3, 7])
