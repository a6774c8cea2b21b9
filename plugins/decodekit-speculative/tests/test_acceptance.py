"""Acceptance figures (`draft_rounds`, `accepted_by_position`, `mean_acceptance_length`) and the heuristic schedule
of k, on a scripted draft whose counts are worked by hand, and on real drafts against `dk.generate`."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import torch
from decodekit_gpt.gpt import GPT
from decodekit_speculative import strategy
from decodekit_speculative.acceptance import next_k
from decodekit_speculative.strategy import SpeculativeGeneration, speculative
from draws import two_sample_p

import decodekit as dk

PROMPT = [5, 17, 3, 9, 44, 2]


class Scripted:
    """A drafter that proposes the target's own next `agree` tokens (known from `dk.generate`), then wrong ones: a
    greedy target accepts exactly `agree` drafts of every round that drafts more."""

    def __init__(self, reference: list[list[int]], agree: int, vocab_size: int) -> None:
        self.reference, self.agree, self.vocab_size = reference, agree, vocab_size
        self.proposed: list[int] = []  # how many each round drafted (row 0)

    def __call__(self, prompts: Any, n: int) -> Scripted:  # stands in for NgramDrafter(prompts, n)
        self.starts = [len(p) for p in prompts]
        return self

    def propose(self, buf: torch.Tensor, lengths: list[int], budgets: list[int], pick: Any) -> list[list[None]]:
        qs: list[list[None]] = []
        for b, (n, budget) in enumerate(zip(lengths, budgets)):
            ahead = self.reference[b][n - self.starts[b] :]
            drafts = [t if j < self.agree else (t + 1) % self.vocab_size for j, t in enumerate(ahead[:budget])]
            buf[b, n : n + len(drafts)] = torch.tensor(drafts, dtype=torch.long)
            qs.append([None] * len(drafts))
        self.proposed.append(len(qs[0]))
        return qs

    def rollback(self, row: int, kept: int) -> None:
        pass


def scripted(
    monkeypatch: pytest.MonkeyPatch, target: GPT, agree: int, max_new_tokens: int, **options: Any
) -> tuple[SpeculativeGeneration, Scripted]:
    ref = dk.generate(target, [PROMPT], chain="greedy", max_new_tokens=max_new_tokens, stop_tokens=[])
    drafter = Scripted(ref.tokens, agree, target.spec.vocab_size)
    monkeypatch.setattr(strategy, "NgramDrafter", drafter)
    out = speculative(target, [PROMPT], chain="greedy", max_new_tokens=max_new_tokens, stop_tokens=[], **options)
    assert out.tokens == ref.tokens
    return out, drafter


def test_a_draft_that_agrees_for_two_tokens_each_round(monkeypatch: pytest.MonkeyPatch, target: GPT) -> None:
    """k = 3, 12 tokens: rounds at 0, 3, 6 tokens draft 3 and accept 2 (3 tokens each); the round at 9 may draft
    min(3, 12 - 9 - 1) = 2, both right: 2 accepted and the target's own, 12. So 11 drafted, 8 accepted, 4 rounds;
    position 1 and 2 accepted in all 4, position 3 in none; 1 + 8 / 4 = 3 tokens per round."""
    out, drafter = scripted(monkeypatch, target, agree=2, max_new_tokens=12, k=3)
    assert drafter.proposed == [3, 3, 3, 2]
    assert (out.drafted, out.accepted, out.draft_rounds) == ([11], [8], [4])
    assert out.accepted_by_position == [[4, 4, 0]]
    assert out.acceptance_rate == 8 / 11 and out.mean_acceptance_length == 3.0


def test_a_round_with_no_draft_is_not_counted(monkeypatch: pytest.MonkeyPatch, target: GPT) -> None:
    """max_new_tokens 1: the only round may draft min(k, 1 - 0 - 1) = 0 tokens: a plain step. Nothing was
    drafted, so there is no rate (None, not 0: 0 would say the draft was always wrong)."""
    out, drafter = scripted(monkeypatch, target, agree=2, max_new_tokens=1, k=3)
    assert drafter.proposed == [0]
    assert (out.drafted, out.draft_rounds, out.accepted_by_position) == ([0], [0], [[0, 0, 0]])
    assert out.acceptance_rate is None and out.mean_acceptance_length is None


def test_the_heuristic_schedule(monkeypatch: pytest.MonkeyPatch, target: GPT) -> None:
    """k = 4, a draft right for 2 tokens a round, 16 tokens. Round by round (tokens done: drafted, accepted, next
    k): 0: 4, 2, 3 | 3: 3, 2, 2 | 6: 2, 2 (all), 4 | 9: 4, 2, 3 | 12: 3 (16 - 12 - 1), 2, 2 | 15: 0 (one token
    left), k stays. 16 drafted, 10 accepted, 5 rounds; position 3 accepted in none, 4 in none."""
    out, drafter = scripted(monkeypatch, target, agree=2, max_new_tokens=16, k=4, schedule="heuristic")
    assert drafter.proposed == [4, 3, 2, 4, 3, 0]
    assert (out.drafted, out.accepted, out.draft_rounds) == ([16], [10], [5])
    assert out.accepted_by_position == [[5, 5, 0, 0]]


def test_next_k() -> None:
    assert [next_k(4, 4, 4, 8), next_k(7, 7, 7, 8), next_k(4, 4, 3, 8), next_k(1, 1, 0, 8)] == [6, 8, 3, 1]
    assert next_k(3, 0, 0, 8) == 3  # nothing drafted: nothing learned


@pytest.mark.parametrize("which", ["model", "ngram"])
def test_the_heuristic_schedule_gives_generates_greedy_tokens(target: GPT, draft: GPT, which: str) -> None:
    """A batch of ragged prompts, each row moving its own k."""
    prompts = [PROMPT, [7], [90, 1, 33, 4, 90, 1, 33, 4, 90, 1]]
    d: Any = draft if which == "model" else "ngram"
    ref = dk.generate(target, prompts, chain="greedy", max_new_tokens=30)
    out = speculative(target, prompts, draft=d, k=6, schedule="heuristic", chain="greedy", max_new_tokens=30)
    assert out.tokens == ref.tokens
    assert all(sum(p) == a for p, a in zip(out.accepted_by_position, out.accepted))  # each accepted draft once


@pytest.mark.slow
def test_the_heuristic_schedule_keeps_the_distribution(target: GPT, draft: GPT) -> None:
    """test_sampling's chi-square check, on the joint of tokens 6 to 8, where the schedule has moved k: at most 2,
    1 after a rejection, back to 2 after a round that accepted every draft."""
    chain, prompt, rows = "repetition_penalty(1.5) | top_k(6) | temperature(0.7)", [9, 44, 44, 44, 9, 44], 2000

    def joint(tokens: list[list[int]]) -> Counter[tuple[int, ...]]:
        return Counter(tuple(t[5:8]) for t in tokens)

    plain = joint(dk.generate(target, [prompt] * rows, chain=chain, max_new_tokens=8, seed=1).tokens)
    out = speculative(
        target, [prompt] * rows, draft=draft, k=2, schedule="heuristic", chain=chain, max_new_tokens=8, seed=2
    )
    assert 0 < sum(out.accepted) < sum(out.drafted)
    assert sum(out.drafted) < 2 * sum(out.draft_rounds)  # the premise: some rounds drafted one token
    assert two_sample_p(joint(out.tokens), plain) > 1e-3
