"""Each row of a speculative batch with a model draft is its prompt decoded alone with its own seed (docs/concepts.md,
"Seeds"), a sampled chain included: where the target's cache evicts (the rows run one at a time) and the draft cannot
share it, and where the draft's context is shorter than the target's (one row stops drafting while the others draft).
A batch-wide draft count (each row limited by the longest row's room in the draft's context) fails the second."""

from __future__ import annotations

from typing import Any

import pytest
from decodekit_gpt.gpt import GPT

import decodekit as dk
from decodekit.context import mix_seed

SAMPLED, GREEDY = "top_k(8) | temperature(0.9)", "greedy"
SEEDS = [5, 6, 7]
PROMPTS = [list(range(3, 15)), [7, 8], [9, 10, 11, 9, 10]]  # ragged: 12, 2 and 5 tokens


def _each_as_alone(target: GPT, limits: list[int], seed: int | list[int] = SEEDS, **options: Any) -> None:
    """The batch with per-prompt limits; each row's tokens equal its prompt's alone with that row's seed."""
    options = {"strategy": "speculative", "k": 3, "stop_tokens": [], **options}
    out = dk.decode(target, PROMPTS, max_new_tokens=limits, seed=seed, **options)
    for b, (prompt, limit) in enumerate(zip(PROMPTS, limits)):
        own = seed[b] if isinstance(seed, list) else mix_seed(seed, b)
        alone = dk.decode(target, [prompt], max_new_tokens=limit, seed=[own], **options)
        assert out.tokens[b] == alone.tokens[0], f"row {b}"
        assert len(out.tokens[b]) == limit


@pytest.mark.parametrize("chain", [SAMPLED, GREEDY])
@pytest.mark.parametrize("cache", ["window(size=8, sinks=2)", "h2o(budget=14)", "snapkv(budget=14, window=4)"])
@pytest.mark.parametrize("position", ["learned", "rope"])
def test_an_evicting_target_cache_and_a_draft_of_its_own(make_tiny: Any, cache: str, chain: str, position: str) -> None:
    """A rotary target of context 16 taken to 26 positions by a cache that evicts. A learned-position draft cannot
    share that cache (it keeps every token in one of its own, and stops drafting at its context); a rotary one can."""
    target, draft = (
        make_tiny(40, block_size=16, position="rope"),
        make_tiny(40, block_size=16, position=position, seed=1),
    )
    _each_as_alone(target, [14, 20, 6], draft=draft, cache=cache, chain=chain)


@pytest.mark.parametrize("chain", [SAMPLED, GREEDY])
@pytest.mark.parametrize("cache", ["dense", "int8", "none"])
def test_a_draft_whose_context_is_shorter_than_the_targets(make_tiny: Any, cache: str, chain: str) -> None:
    """A target of context 64, a draft of 16: the long row passes the draft's context while the short ones draft."""
    target, draft = make_tiny(40), make_tiny(40, block_size=16, seed=1)
    _each_as_alone(target, [20, 12, 16], draft=draft, cache=cache, chain=chain)


def test_one_seed_for_the_batch_seeds_each_row_as_alone(make_tiny: Any) -> None:
    """`seed=0` gives row b the seed mix_seed(0, b): the same tokens as that seed given to its prompt alone."""
    target, draft = make_tiny(40), make_tiny(40, block_size=16, seed=1)
    _each_as_alone(target, [20, 12, 16], seed=0, draft=draft, cache="dense", chain=SAMPLED)
