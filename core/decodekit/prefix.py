"""A prefix common to a batch's prompts prefilled once (a few-shot block, a question before its choices): one
forward of the prefix written to every row, then the rows' own suffixes right-padded after it, each row moved to end
where left padding puts it (docs/concepts.md, "The decode engine")."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from decodekit.cache import KVCache, RowCroppable, evicts, observes
from decodekit.copies import CopiesView
from decodekit.model import Model, last_only

__all__ = ["MIN_SAVED", "prefill_prefix", "shared_prefix"]

MIN_SAVED = 96
"""Prefix tokens the shared prefill must save (those of every distinct prompt but one) to be worth its other forwards
(docs/benchmarks.md, "a prefix common to a batch's rows")."""


def shared_prefix(kv: KVCache | None, prompts: Sequence[Sequence[int]]) -> int:
    """The prefix length the distinct `prompts` share and can be prefilled once through `kv`; 0 where not: no cache,
    one that evicts (a prefill in blocks) or scores queries (it would see them in another order), or cannot move its
    rows (`crop_rows` over a storage with `take_slots`), or where it saves fewer than `MIN_SAVED` tokens. Each prompt
    keeps a token of its own: its logits are the row's next token's."""
    if kv is None or len(prompts) < 2 or evicts(kv) or observes(kv) or not isinstance(kv, RowCroppable):
        return 0
    if not callable(getattr(getattr(kv, "store", None), "take_slots", None)):
        return 0
    length = min(len(p) for p in prompts) - 1
    first = prompts[0]
    for prompt in prompts[1:]:
        if prompt[:length] != first[:length]:  # compared in C; token by token only to find where
            length = next((i for i in range(length) if prompt[i] != first[i]), length)  # (a tuple beside a list)
    return length if length * (len(prompts) - 1) >= MIN_SAVED else 0


def prefill_prefix(
    model: Model,
    kv: KVCache,
    prompts: Sequence[Sequence[int]],
    alike: tuple[Tensor, Tensor] | None,
    length: int,
    *,
    scored: bool,
) -> tuple[Tensor, Tensor]:
    """Prefill the distinct `prompts` (`alike`: `distinct_rows` of the cache's rows, None where each is its own) that
    share their first `length` tokens: the model's logits of the prefix `[1, length or 1, V]` and of the suffixes,
    every column where `scored` (`[len(prompts), S, V]`, right-padded to the longest `S`), else the last
    (`[len(prompts), 1, V]`, each row's own). The cache then holds each row left-padded to end at slot `length + S`,
    as a prefill of the whole prompts leaves it."""
    device = kv.spec.device
    zero = torch.zeros(1, dtype=torch.long, device=device)
    every_row = CopiesView(kv, zero, zero.expand(kv.spec.batch_size))  # one row computed, written to every row
    last = {} if scored else last_only(model)
    at = torch.arange(length, device=device)[None]
    prefix_logits = model(torch.tensor([prompts[0][:length]], device=device), at, every_row, **last)
    view = kv if alike is None else CopiesView(kv, *alike)
    suffixes = [p[length:] for p in prompts]
    if scored:
        every_column = _feed_right_padded(model, kv, view, suffixes, length, alike)
        assert every_column is not None  # each prompt keeps a token of its own
        return prefix_logits, every_column
    # Each row ends in a column of its own, and a model returns every column's logits or the last one's: feed all
    # but each row's last token, move the rows to end together, then the last tokens in one column.
    _feed_right_padded(model, kv, view, [s[:-1] for s in suffixes], length, alike, **last)
    tokens = torch.tensor([[s[-1]] for s in suffixes], device=device)
    positions = torch.tensor([[length + len(s) - 1] for s in suffixes], device=device)
    return prefix_logits, model(tokens, positions, view, **last)


def _feed_right_padded(
    model: Model,
    kv: KVCache,
    view: KVCache,
    suffixes: Sequence[Sequence[int]],
    length: int,
    alike: tuple[Tensor, Tensor] | None,
    **options: bool,
) -> Tensor | None:
    """The model's logits of `suffixes` fed right-padded after the `length` slots every row holds, at positions
    `length ..` (None where each is empty); then each cache row moved to end with the longest suffix."""
    width = max(map(len, suffixes))
    if width == 0:
        return None
    device = kv.spec.device
    tokens = torch.zeros(len(suffixes), width, dtype=torch.long)  # built here, moved once
    for r, suffix in enumerate(suffixes):
        tokens[r, : len(suffix)] = torch.tensor(suffix, dtype=torch.long)
    positions = (length + torch.arange(width, device=device))[None].expand(len(suffixes), -1)
    logits: Tensor = model(tokens.to(device), positions, view, **options)
    ends = [len(s) for s in suffixes] if alike is None else [len(suffixes[i]) for i in alike[1].tolist()]
    kv.crop_rows([length + e for e in ends], length + width)  # type: ignore[attr-defined]
    return logits
