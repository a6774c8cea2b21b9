"""What a row's rounds accepted: the counts a `SpeculativeGeneration` reports, and the heuristic schedule of `k`.

The counts follow vLLM's speculative-decoding metrics: a round counts when the row drafted at least one token in it
(`num_drafts`), and position `p` of a row counts the rounds that accepted its draft `p + 1`
(`num_accepted_tokens_per_pos`). The schedule is transformers' `num_assistant_tokens_schedule="heuristic"`, bounded
by the strategy's `k`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["COUNTS", "count_round", "next_k", "no_counts"]

COUNTS = ("drafted", "accepted", "draft_rounds", "accepted_by_position")
"""The per-row fields of a `SpeculativeGeneration`, in its order (`Decoding.extras`)."""


def no_counts(rows: int, k: int) -> dict[str, list[Any]]:
    """Every row's counts before its first round: positions 1 .. k, none accepted."""
    return {
        "drafted": [0] * rows,
        "accepted": [0] * rows,
        "draft_rounds": [0] * rows,
        "accepted_by_position": [[0] * k for _ in range(rows)],
    }


def count_round(counts: dict[str, list[Any]], row: int, drafted: int, accepted: int) -> None:
    """Row `row`'s round that drafted `drafted` tokens and accepted the first `accepted` of them."""
    if drafted == 0:  # a plain step: no draft to count (vLLM's num_drafts counts rounds with drafts)
        return
    counts["drafted"][row] += drafted
    counts["accepted"][row] += accepted
    counts["draft_rounds"][row] += 1
    by_position = counts["accepted_by_position"][row]
    for p in range(accepted):
        by_position[p] += 1


def next_k(k: int, drafted: int, accepted: int, largest: int) -> int:
    """The heuristic's next k after a round: 2 more when every draft was accepted, else 1 fewer; within 1 .. largest.
    A round that drafted nothing (no n-gram match) says nothing about the draft: k stays."""
    if drafted == 0:
        return k
    return min(largest, k + 2) if accepted == drafted else max(1, k - 1)
