"""Logprobs as JSON, alike in `generate --json` and in a batch job's records: per token its id and its text, its
log-probability under the model (`logprob`), its rank under the model (`rank`: 1, the most likely) and the model's N
most likely tokens (`top`, as [id, logprob] pairs, and `top_texts`, their texts in the same order: vLLM's
`decoded_token`). A token's text is `tokenizer.decode([id])`, as `explain`'s `texts` are (a special token's included);
null without a tokenizer, as a record's `text` is."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from decodekit.prompts import Tokenizer
from decodekit.results import PromptLogprobs, TokenLogprobs

__all__ = ["TokenTexts", "prompt_records", "token_records"]


class TokenTexts:
    """Each token id's own text, decoded once per id (a `top` of N asks for N texts a step, mostly the same ones)."""

    def __init__(self, tokenizer: Tokenizer | None) -> None:
        self._tokenizer = tokenizer
        self._known: dict[int, str] = {}

    def of(self, token: int) -> str | None:
        if self._tokenizer is None:
            return None
        if (text := self._known.get(token)) is None:
            text = self._known[token] = self._tokenizer.decode([token])
        return text

    def of_top(self, top: Sequence[tuple[int, float]]) -> list[str | None] | None:
        """The texts of a `top` list's ids, in its order; None without a tokenizer."""
        return None if self._tokenizer is None else [self.of(token) for token, _ in top]


def token_records(tokens: Sequence[int], scores: Sequence[TokenLogprobs], texts: TokenTexts) -> list[dict[str, Any]]:
    """Per generated token: its text, the model's `logprob`, `rank` and `top`, and its `logprob` and `top` after the
    chain (`processed_*`), each top with its texts."""
    return [
        {
            "token": t,
            "text": texts.of(t),
            "logprob": s.raw,
            "rank": s.rank,
            "top": [list(p) for p in s.raw_top],
            "top_texts": texts.of_top(s.raw_top),
            "processed_logprob": s.processed,
            "processed_top": [list(p) for p in s.processed_top],
            "processed_top_texts": texts.of_top(s.processed_top),
        }
        for t, s in zip(tokens, scores)
    ]


def prompt_records(
    tokens: Sequence[int], scores: Sequence[PromptLogprobs | None], texts: TokenTexts
) -> list[dict[str, Any] | None]:
    """Per prompt token: None for the first (no context), else its text, `logprob`, `rank`, `top` and `top_texts`."""
    return [
        None
        if s is None
        else {
            "token": t,
            "text": texts.of(t),
            "logprob": s.logprob,
            "rank": s.rank,
            "top": [list(p) for p in s.top],
            "top_texts": texts.of_top(s.top),
        }
        for t, s in zip(tokens, scores)
    ]
