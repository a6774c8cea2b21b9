"""Speculative decoding samples from `dk.generate`'s distribution, for every kind of stochastic chain the safety
table calls safe (docs/speculative.md): random (`xtc`), truncating, history-dependent, `gumbel`, a grammar.

Per chain, one batched call of each: ROWS seeded rows of speculative decoding with a draft that differs from the
target (it both accepts and rejects), PLAIN_ROWS of `dk.generate`; a two-sample chi-square test of the joint
distribution of the first two tokens, and of the first three, each at ALPHA. A correct implementation fails a
chain's test with probability at most 2 * ALPHA (Bonferroni, to the chi-square's approximation), so any of them at
most 2 * ALPHA * len(CHAINS) = 1.6%; the seeds are fixed, so the outcome is too. The last tests break the rule
on purpose and see it fail."""

from __future__ import annotations

import functools
from collections import Counter
from typing import Any

import pytest
import torch
from decodekit_gpt.gpt import GPT
from decodekit_speculative import strategy
from decodekit_speculative.rejection import draw
from decodekit_speculative.strategy import speculative
from draws import two_sample_p

import decodekit as dk

PROMPT = [9, 4, 4, 4, 9, 4]
ROWS, PLAIN_ROWS = 1500, 4000  # rows decode independently, each with its own generator
ALPHA = 1e-3
CHAINS = [
    "xtc(0.5, 0.1) | sample",
    "xtc(0.5, 0.05) | sample",  # applies at most steps here: a draw that went wrong would show (below)
    "top_k(8) | top_p(0.9) | temperature(0.8) | sample",
    "min_p(0.05) | sample",
    "typical(0.9) | sample",
    "repetition_penalty(1.5) | frequency_penalty(0.5) | temperature(0.7) | sample",  # reads the drafted history
    "temperature(0.8) | gumbel",
    "regex(pattern='(ab|c)[a-f]+') | sample",  # a row's mask follows its (drafted) text
]


def smallest_p(tokens: list[list[int]], plain: list[list[int]]) -> float:
    """The smaller p-value of the joint of the first two tokens and of the first three (outcomes seen fewer than 15
    times over both samples pooled: about 5 expected in the smaller)."""
    return min(
        two_sample_p(Counter(tuple(t[:n]) for t in tokens), Counter(tuple(t[:n]) for t in plain), min_count=15)
        for n in (2, 3)
    )


@functools.lru_cache(maxsize=2)
def plain_tokens(target: GPT, chain: str) -> list[list[int]]:
    """`dk.generate`'s sample, kept for the test that breaks the rule with the same chain."""
    return dk.generate(target, [PROMPT] * PLAIN_ROWS, chain=chain, max_new_tokens=3, seed=1).tokens


def speculated(target: GPT, draft: GPT, chain: str) -> Any:
    return speculative(target, [PROMPT] * ROWS, draft=draft, k=2, chain=chain, max_new_tokens=3, seed=2)


@pytest.mark.slow
@pytest.mark.parametrize("chain", CHAINS)
def test_speculative_samples_as_generate(small_pair: tuple[GPT, GPT], chain: str) -> None:
    target, draft = small_pair
    out = speculated(target, draft, chain)
    assert 0.2 < out.acceptance_rate < 0.9  # the rule both accepts and rejects
    assert smallest_p(out.tokens, plain_tokens(target, chain)) > ALPHA


@pytest.mark.slow
def test_accepting_every_draft_is_seen(small_pair: tuple[GPT, GPT], monkeypatch: pytest.MonkeyPatch) -> None:
    """Emitting the drafts unchecked gives the draft's distribution: the test above would fail."""
    target, draft = small_pair
    chain = CHAINS[2]

    def accept_all(drafts: Any, draft_probs: Any, p_at: Any, uniform: Any) -> tuple[int, int]:
        return len(drafts), draw(p_at(len(drafts)), uniform())

    monkeypatch.setattr(strategy, "verify_softmax", accept_all)
    assert smallest_p(speculated(target, draft, chain).tokens, plain_tokens(target, chain)) < 1e-6


@pytest.mark.slow
def test_xtc_drawing_once_per_round_is_seen(small_pair: tuple[GPT, GPT], monkeypatch: pytest.MonkeyPatch) -> None:
    """The target's xtc must draw afresh at each drafted position, as it would at each step: one draw per round
    (what a chain run once on the round's block of positions would do) ties a round's tokens together."""
    target, draft = small_pair
    chain = CHAINS[1]
    processed = strategy._Rounds._processed
    first: dict[int, torch.Tensor] = {}

    def once_per_round(self: Any, logits: torch.Tensor, i: int, j: int, who: str) -> torch.Tensor:
        if who != "target":
            return processed(self, logits, i, j, who)
        ctx = self.ctxs[i]
        if j == 0:  # the round's first position: its draw serves every later one
            first[i] = ctx.uniform()
        ctx.uniform = lambda keepdim=False: first[i]
        try:
            return processed(self, logits, i, j, who)
        finally:
            del ctx.uniform

    monkeypatch.setattr(strategy._Rounds, "_processed", once_per_round)
    assert smallest_p(speculated(target, draft, chain).tokens, plain_tokens(target, chain)) < 1e-6
