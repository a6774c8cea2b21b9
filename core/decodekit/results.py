"""What decoding returns: `Generation` (per row), `TokenEvent` (per token), `TokenLogprobs`, `PromptLogprobs`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import Tensor

from decodekit.stage import Candidates

__all__ = [
    "SCORED_BLOCK",
    "FinishReason",
    "Generation",
    "PromptLogprobs",
    "TokenEvent",
    "TokenLogprobs",
    "prompt_logprobs",
    "token_logprobs",
]

FinishReason = Literal["stop", "length"]

SCORED_BLOCK = 2**20
"""Logits a prompt's scores take at once on a CPU (rows x vocabulary, 4 MB in float32): a block's log_softmax stays in
the cache, where a whole prompt's (65 MB at 512 tokens x 32,000) took 2-3x as long. An accelerator takes the prompt
whole: there each block's kernel launches would cost, not the memory traffic."""


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
    """One generated token of one row: `step` is its index among the row's new tokens (0: the first); `text` is the
    new text it adds (None without a tokenizer)."""

    row: int
    step: int
    token: int
    text: str | None = None
    finish_reason: FinishReason | None = None
    logprobs: TokenLogprobs | None = None
    stopped_by: int | str | None = None  # what ended the row: a stop token, a stop string or a stage's name (`regex`)


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
    stopped_by: list[int | str | None] = field(default_factory=list)  # a stop token, a stop string or a stage's name
    # per prompt token (None for the first, which has no context), when asked for with `prompt_logprobs`
    prompt_logprobs: list[list[PromptLogprobs | None]] | None = None


def token_logprobs(raw: Tensor, processed: Tensor | Candidates, tokens: Tensor, n: int) -> list[TokenLogprobs]:
    """Chosen-token and top-`n` log-probabilities per row, before and after the chain."""
    raw_chosen, ranks, raw_v, raw_i = _raw_scores(raw, tokens, n)
    if isinstance(processed, Candidates):
        lse = torch.logsumexp(processed.values, -1, keepdim=True)
        hit = processed.indices == tokens[:, None]
        chosen = torch.where(hit, processed.values, float("-inf")).amax(-1) - lse[:, 0]
        top_v, top_i = (processed.values[:, :n] - lse), processed.indices[:, :n]
    else:
        lp = torch.log_softmax(processed, -1)
        chosen = lp.gather(1, tokens[:, None])[:, 0]
        top_v, top_i = _top(lp, n)
    rows = zip(raw_chosen.tolist(), chosen.tolist(), raw_i.tolist(), raw_v.tolist(), top_i.tolist(), top_v.tolist())
    return [
        TokenLogprobs(rc, c, list(zip(ri, rv)), [(i, v) for i, v in zip(ti, tv) if v != float("-inf")], r)
        for (rc, c, ri, rv, ti, tv), r in zip(rows, ranks.tolist())
    ]


def prompt_logprobs(logits: Tensor, tokens: Tensor, n: int) -> list[PromptLogprobs]:
    """Per position, the log-probability of the next prompt token `tokens` `[T]` under `logits` `[T, V]` (the raw
    log_softmax in float32), its rank and the top `n`; on a CPU in blocks of `SCORED_BLOCK` logits, read back once."""
    rows = max(1, SCORED_BLOCK // logits.shape[-1]) if logits.device.type == "cpu" else max(len(logits), 1)
    blocks = [_raw_scores(logits[i : i + rows], tokens[i : i + rows], n) for i in range(0, max(len(logits), 1), rows)]
    chosen, ranks, top_v, top_i = blocks[0] if len(blocks) == 1 else (torch.cat(parts) for parts in zip(*blocks))
    return [
        PromptLogprobs(c, r, list(zip(i, v)))
        for c, r, i, v in zip(chosen.tolist(), ranks.tolist(), top_i.tolist(), top_v.tolist())
    ]


def _raw_scores(logits: Tensor, tokens: Tensor, n: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Per row of `logits` `[B, V]`, under its log_softmax in float32: the log-probability of `tokens` `[B]`, its
    rank, and the top `n` log-probabilities and their ids `[B, n]`."""
    lp = torch.log_softmax(logits.float(), -1)
    chosen = lp.gather(1, tokens[:, None])
    top_v, top_i = _top(lp, n)
    return chosen[:, 0], _ranks(lp, chosen), top_v, top_i  # the ranks last: they overwrite `lp`


def _ranks(lp: Tensor, chosen: Tensor) -> Tensor:
    """Per row of `lp` `[B, V]` (overwritten), one plus the tokens strictly more likely than `chosen` `[B, 1]`:
    `lp > chosen` written over `lp` as 1.0 and 0.0 and summed in float, 2-4x faster on a CPU than a bool mask's sum
    (exact: below 2**24 a float32 holds every count)."""
    exact = torch.float32 if lp.shape[-1] < 2**24 else torch.float64
    return torch.gt(lp, chosen, out=lp).sum(-1, dtype=exact).long() + 1


def _top(lp: Tensor, n: int) -> tuple[Tensor, Tensor]:
    """The `n` largest log-probabilities of each row of `lp` `[B, V]` and their ids, `[B, n]` each."""
    if n:
        return lp.topk(n, -1)
    none = lp.new_empty(len(lp), 0)  # not a view: it would hold `lp`
    return none, none.long()
