"""What decoding returns: `Generation` (per row), `TokenEvent` (per token), `TokenLogprobs`, `PromptLogprobs`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import Tensor

from decodekit.stage import Candidates

__all__ = [
    "FinishReason",
    "Generation",
    "PromptLogprobs",
    "TokenEvent",
    "TokenLogprobs",
    "prompt_logprobs",
    "token_logprobs",
]

FinishReason = Literal["stop", "length"]


@dataclass(frozen=True, slots=True)
class TokenLogprobs:
    """Log-probabilities of one sampled token, from the model (raw) and after the chain (processed), and its rank
    under the model (as `PromptLogprobs.rank`: 1, the most likely; vLLM's and OpenAI's `rank`)."""

    raw: float
    processed: float
    raw_top: list[tuple[int, float]]  # the model's n most likely tokens
    processed_top: list[tuple[int, float]]  # the n most likely after the chain
    rank: int


@dataclass(frozen=True, slots=True)
class PromptLogprobs:
    """One prompt token's log-probability under the model given the tokens before it (no chain: nothing was
    sampled), its rank among the vocabulary (1: the most likely; ties share the best rank, as vLLM's V0 counted:
    V1 counts the tokens at least as likely, which differs only on exact ties)."""

    logprob: float
    rank: int
    top: list[tuple[int, float]]  # the model's n most likely tokens at this position


@dataclass(frozen=True, slots=True)
class TokenEvent:
    """One generated token of one row. `text` is the new text it adds (None without a tokenizer)."""

    row: int
    step: int
    token: int
    text: str | None = None
    finish_reason: FinishReason | None = None
    logprobs: TokenLogprobs | None = None
    stopped_by: int | str | None = None  # the stop token or stop string that ended the row


@dataclass
class Generation:
    """Per row: the generated suffix (a stop token that ended the row is its last token),
    why the row stopped, and the text (stop token or stop string excluded, unless include_stop_str_in_output) when there
    is a tokenizer."""

    tokens: list[list[int]]
    finish_reasons: list[FinishReason]
    prompt_tokens: list[list[int]]
    text: list[str] | None = None
    logprobs: list[list[TokenLogprobs]] | None = None
    stopped_by: list[int | str | None] = field(default_factory=list)  # the stop token or string
    # per prompt token (None for the first, which has no context), when asked for with `prompt_logprobs`
    prompt_logprobs: list[list[PromptLogprobs | None]] | None = None


def token_logprobs(raw: Tensor, processed: Tensor | Candidates, tokens: Tensor, n: int) -> list[TokenLogprobs]:
    """Chosen-token and top-`n` log-probabilities per row, before and after the chain."""
    raw_lp = torch.log_softmax(raw.float(), -1)
    raw_v, raw_i = _top(raw_lp, n)
    if isinstance(processed, Candidates):
        lse = torch.logsumexp(processed.values, -1, keepdim=True)
        hit = processed.indices == tokens[:, None]
        chosen = torch.where(hit, processed.values, float("-inf")).amax(-1) - lse[:, 0]
        top_v, top_i = (processed.values[:, :n] - lse), processed.indices[:, :n]
    else:
        lp = torch.log_softmax(processed, -1)
        chosen = lp.gather(1, tokens[:, None])[:, 0]
        top_v, top_i = _top(lp, n)
    raw_chosen = raw_lp.gather(1, tokens[:, None])
    ranks = _ranks(raw_lp, raw_chosen).tolist()
    rows = zip(
        raw_chosen[:, 0].tolist(), chosen.tolist(), raw_i.tolist(), raw_v.tolist(), top_i.tolist(), top_v.tolist()
    )
    return [
        TokenLogprobs(rc, c, list(zip(ri, rv)), [(i, v) for i, v in zip(ti, tv) if v != float("-inf")], r)
        for (rc, c, ri, rv, ti, tv), r in zip(rows, ranks)
    ]


def prompt_logprobs(logits: Tensor, tokens: Tensor, n: int) -> list[PromptLogprobs]:
    """Per position, the log-probability of the next prompt token `tokens` `[T]` under `logits` `[T, V]` (the raw
    log_softmax in float32), its rank and the top `n`."""
    lp = torch.log_softmax(logits.float(), -1)
    chosen = lp.gather(1, tokens[:, None])
    ranks = _ranks(lp, chosen)
    top_v, top_i = _top(lp, n)
    return [
        PromptLogprobs(c, r, list(zip(i, v)))
        for c, r, i, v in zip(chosen[:, 0].tolist(), ranks.tolist(), top_i.tolist(), top_v.tolist())
    ]


def _ranks(lp: Tensor, chosen: Tensor) -> Tensor:
    """Per row of `lp` `[B, V]`, one plus the tokens strictly more likely than `chosen` `[B, 1]`."""
    return (lp > chosen).sum(-1) + 1


def _top(lp: Tensor, n: int) -> tuple[Tensor, Tensor]:
    """The `n` largest log-probabilities of each row of `lp` `[B, V]` and their ids, `[B, n]` each."""
    return lp.topk(n, -1) if n else (lp[:, :0], lp[:, :0].long())
