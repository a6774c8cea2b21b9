"""`max_new_tokens` per prompt: a row never gets tokens past its own limit, and gets exactly its tokens alone."""

from __future__ import annotations

from typing import Any

import pytest
from decodekit_gpt.gpt import GPT

import decodekit as dk

PROMPTS = [[9, 44, 44, 44, 9, 44], [9, 44, 9], [5, 6, 7, 5, 6, 7, 5], [3, 3]]  # repeats: prompt lookup proposes
LIMITS = [3, 7, 0, 5]
SEEDS = [21, 22, 23, 24]


@pytest.mark.parametrize("which", ["ngram", "model"])
@pytest.mark.parametrize("chain", ["greedy", "top_k(6) | temperature(0.7)"])
def test_each_prompt_gets_what_it_gets_alone_with_its_own_limit(
    target: GPT, draft: GPT, which: str, chain: str
) -> None:
    options: dict[str, Any] = {"strategy": "speculative", "k": 4, "chain": chain}
    options["draft"] = draft if which == "model" else "ngram"
    out = dk.decode(target, PROMPTS, max_new_tokens=LIMITS, seed=SEEDS, stop_tokens=[], **options)
    assert [len(t) for t in out.tokens] == LIMITS  # no stop tokens: each row runs to its own limit, not past it
    for b, (prompt, limit, seed) in enumerate(zip(PROMPTS, LIMITS, SEEDS)):
        alone = dk.decode(target, [prompt], max_new_tokens=limit, seed=[seed], stop_tokens=[], **options)
        assert out.tokens[b] == alone.tokens[0]


def test_validate_checks_the_list(target: GPT) -> None:
    with pytest.raises(dk.ParameterError, match=r"max_new_tokens\[1\]=-2 is invalid"):
        dk.validate(target, PROMPTS, strategy="speculative", draft="ngram", max_new_tokens=[3, -2, 0, 5])
