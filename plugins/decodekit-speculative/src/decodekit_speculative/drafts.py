"""Drafts: what proposes the tokens the target verifies. A draft model, or prompt lookup ("ngram").

Both write their proposals into the history buffer right after each row's history, where the
target's block and the chain's contexts read them.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch
from torch import Tensor

from decodekit.cache import KVCache, evicts
from decodekit.engine import block_starts
from decodekit.model import last_only
from decodekit_speculative.row_cache import RowCache

__all__ = ["Drafter", "ModelDrafter", "NgramDrafter", "Pick", "Seen", "fed_block", "feed"]

Pick = Callable[[int, int, Tensor], "tuple[int, Tensor | None]"]
"""`pick(row, j, draft_logits [V]) -> (token, q [V] or None for one-hot)`: the chain's choice at drafted position j."""

Seen = Callable[[Tensor, int], None]
"""`seen(logits [B, T, V], first)`: a forward's logits, their first column `first` of the block `feed` was given."""


def fed_block(buf: Tensor, lengths: Tensor, ends: Tensor, first: int, width: int) -> tuple[Tensor, Tensor]:
    """`(ids, positions)` `[B, width]`: history columns from `lengths - first` on; negative indices are padding
    (id 0, negative position). Columns from a row's `ends` on (past its drafts) are junk that the next crop
    removes; they repeat the row's last position, so they never present one the model has not seen."""
    index = (lengths - first)[:, None] + torch.arange(width, device=buf.device)  # [B, width]
    ids = buf.gather(1, index.clamp(0, buf.shape[1] - 1))
    return ids, torch.minimum(index, (ends - 1)[:, None])


def feed(
    call: Any,
    ids: Tensor,
    positions: Tensor,
    cache: KVCache | None,
    keep: int,
    *,
    seen: Seen | None = None,
    **extra: Any,
) -> Tensor:
    """The logits of the last `keep` columns of `ids` fed through `call(ids, positions, cache)`; `seen`, when given,
    gets every forward's logits with the column of `ids` they start at (the prompt's scores need them all).

    A cache that evicts gets the prompt alone as its first forward, as the engine's prefill feeds it (a
    `prefill_only` cache compresses its first forward), then the drafts; and at most the model's context
    per forward, cut as the engine's prefill cuts them (`block_starts`: blocks ending at the last block), the last
    block holding the drafts.
    """
    block = cache.spec.max_positions if cache is not None and evicts(cache) else None
    width = ids.shape[1]
    if block is not None and cache is not None and cache.length == 0 and keep > 1:
        head = width - keep + 1  # the history; the drafts after it
        first = feed(call, ids[:, :head], positions[:, :head], cache, 1, seen=seen, **extra)
        rest: Tensor = call(ids[:, head:], positions[:, head:], cache, **extra)
        if seen is not None:
            seen(rest, head)
        return torch.cat([first, rest], 1)
    head = 0  # columns fed before the last block
    if block is not None and width > max(block, keep):
        # Blocks as the engine's prefill cuts them, ending at the last column: a cache that attends a block whole
        # (streaming, h2o) gives a column other logits in another block. The last block must hold the kept columns.
        head = width - max(block, keep)
        starts = block_starts(head, block)
        for start, end in zip(starts, [*starts[1:], head]):
            logits: Tensor = call(ids[:, start:end], positions[:, start:end], cache, **extra)
            if seen is not None:
                seen(logits, start)
    logits = call(ids[:, head:], positions[:, head:], cache, **extra)
    if seen is not None:
        seen(logits, head)
    return logits[:, -keep:]


class Drafter(Protocol):
    def propose(self, buf: Tensor, lengths: list[int], budgets: list[int], pick: Pick) -> list[list[Tensor | None]]:
        """Write up to `budgets[b]` drafts of row b into `buf[b, lengths[b]:]`; return their q's (one list per
        row, its length the number of drafts; None for a one-hot q)."""
        ...

    def rollback(self, row: int, kept: int) -> None:
        """Row `row` kept `kept` of its drafts (the draft then learns what the target accepted)."""
        ...


class ModelDrafter:
    """A draft model with its own KV cache: one forward per drafted position, every row at once."""

    def __init__(self, model: Any, cache: KVCache, batch_size: int, call: Any) -> None:
        self.model = model
        self.call = call  # the model as the decode calls it (compiled or not)
        # A row that accepted every draft re-feeds 2 tokens (the last draft never went through the draft), the others
        # 1; padded to one count, a row would feed other blocks than alone, which a cache that evicts may keep
        # otherwise (a scored one compresses before each forward): through one, every row re-feeds 2 (`propose`
        # feeds a prompt's last token apart, so that it can be taken back).
        self.rows = RowCache(cache, batch_size, refeed=2 if evicts(cache) else 1)
        # The positions its forwards may reach: a cache that keeps every token stops at the draft's context, as the
        # engine stops the target (`Decoding.room`); past it the draft proposes nothing and the target goes on.
        self.reach = cache.spec.capacity if evicts(cache) else model.spec.max_positions
        self.capacity = sys.maxsize if evicts(cache) else cache.spec.capacity  # its slots (one that evicts: no end)
        self._lengths: list[int] = [0] * batch_size
        self._forwards = 0

    def propose(self, buf: Tensor, lengths: list[int], budgets: list[int], pick: Pick) -> list[list[Tensor | None]]:
        # K - 1 forwards after the first, which leaves the longest drafting row's history in the cache.
        # Each row's drafts within the draft's context by its own length, as alone; a row past it (one that ended
        # may be) drafts nothing, never again (a budget only shrinks): it keeps nothing in the cache and is fed
        # junk at its last position (at most the context's), so the rows that draft alone bound the slots.
        budgets = [max(0, min(budget, self.reach + 1 - n)) for budget, n in zip(budgets, lengths)]
        drafting = [budget > 0 for budget in budgets]
        K = min(max(budgets), self.capacity - max((n for n, d in zip(lengths, drafting) if d), default=0))
        qs: list[list[Tensor | None]] = [[] for _ in lengths]
        self._lengths, self._forwards = list(lengths), K
        if K <= 0:
            return qs
        F = self.rows.prepare(lengths, drafting)
        lengths_t = torch.tensor(lengths, device=buf.device)
        ids, positions = fed_block(buf, lengths_t, lengths_t, F, F)
        positions = positions.clamp(max=self.reach - 1)
        cache = self.rows.cache
        columns: dict[str, Any] = last_only(self.model)  # keywords the model takes (feed's own are not among them)
        if self.rows.refeed > 1 and cache.length == 0:  # the prompt's last token apart: the next round re-feeds it
            feed(self.model, ids[:, :-1], positions[:, :-1], cache, 1, **columns)
            ids, positions = ids[:, -1:], positions[:, -1:]
        logits = feed(self.model, ids, positions, cache, 1, **columns)[:, -1]  # [B, V]
        picked = [0] * len(lengths)  # each row's draft just picked (0 for a row that drafts no more)
        for j in range(K):
            if j > 0:  # feed the drafts just picked (history index lengths + j - 1), built on the host
                ids = torch.tensor([[t] for t in picked], device=buf.device)
                # A row that drafts no more feeds a junk token at its last position (cropped later).
                at = torch.tensor(
                    [[min(n + j - 1 if j <= b else n - 1, self.reach - 1)] for n, b in zip(lengths, budgets)],
                    device=buf.device,
                )
                logits = self.call(ids, at, self.rows.cache)[:, -1]
            for b, budget in enumerate(budgets):
                picked[b] = 0
                if j < budget:
                    picked[b], q = pick(b, j, logits[b])
                    buf[b, lengths[b] + j] = picked[b]
                    qs[b].append(q)
        return qs

    def rollback(self, row: int, kept: int) -> None:
        if self._forwards > 0:  # drafts x_0 .. x_{K-2} went through the draft model
            self.rows.commit(row, self._lengths[row] + min(kept, self._forwards - 1))


class NgramIndex:
    """Prompt lookup for one row: the latest earlier occurrence of every n-gram that has a continuation."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.tokens: list[int] = []
        self.latest: dict[tuple[int, ...], int] = {}  # n-gram -> index of the token after its latest occurrence

    def extend(self, tokens: Sequence[int]) -> None:
        for t in tokens:
            i = len(self.tokens)  # t's index: the n-gram ending just before it now has a continuation
            if i >= self.n:
                self.latest[tuple(self.tokens[i - self.n : i])] = i
            self.tokens.append(t)

    def propose(self, k: int) -> list[int]:
        """Up to `k` tokens that followed the latest earlier occurrence of the last n tokens."""
        if len(self.tokens) < self.n:
            return []
        start = self.latest.get(tuple(self.tokens[-self.n :]))
        return [] if start is None else self.tokens[start : start + k]


class NgramDrafter:
    """Prompt lookup (Saxena 2023; transformers' `prompt_lookup_num_tokens`): no model, a one-hot q."""

    def __init__(self, prompts: Sequence[Sequence[int]], n: int) -> None:
        self.index = [NgramIndex(n) for _ in prompts]
        for idx, prompt in zip(self.index, prompts):
            idx.extend(prompt)

    def propose(self, buf: Tensor, lengths: list[int], budgets: list[int], pick: Pick) -> list[list[Tensor | None]]:
        qs: list[list[Tensor | None]] = []
        for b, (idx, n, budget) in enumerate(zip(self.index, lengths, budgets)):
            idx.extend(buf[b, len(idx.tokens) : n].tolist())  # the tokens emitted since the last call
            drafts = idx.propose(budget) if budget > 0 else []
            if drafts:
                buf[b, n : n + len(drafts)] = torch.tensor(drafts, device=buf.device)
            qs.append([None] * len(drafts))
        return qs

    def rollback(self, row: int, kept: int) -> None:
        pass
