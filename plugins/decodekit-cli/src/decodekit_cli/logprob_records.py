"""Logprobs as JSON, alike in `generate --json` and in a batch job's records: per token its id, its log-probability
under the model (`logprob`), its rank under the model (`rank`: 1, the most likely) and the model's N most likely
tokens (`top`, as [id, logprob] pairs)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from decodekit.results import PromptLogprobs, TokenLogprobs

__all__ = ["prompt_records", "token_records"]


def token_records(tokens: Sequence[int], scores: Sequence[TokenLogprobs]) -> list[dict[str, Any]]:
    """Per generated token: the model's `logprob`, `rank` and `top`, and its `logprob` and `top` after the chain
    (`processed_*`)."""
    return [
        {
            "token": t,
            "logprob": s.raw,
            "rank": s.rank,
            "top": [list(p) for p in s.raw_top],
            "processed_logprob": s.processed,
            "processed_top": [list(p) for p in s.processed_top],
        }
        for t, s in zip(tokens, scores)
    ]


def prompt_records(tokens: Sequence[int], scores: Sequence[PromptLogprobs | None]) -> list[dict[str, Any] | None]:
    """Per prompt token: None for the first (no context), else its `logprob`, `rank` and `top`."""
    return [
        None if s is None else {"token": t, "logprob": s.logprob, "rank": s.rank, "top": [list(p) for p in s.top]}
        for t, s in zip(tokens, scores)
    ]
