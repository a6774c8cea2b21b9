"""A prefix common to a batch's prompts prefilled once (a few-shot block, a question before its choices): one
forward of the prefix written to every row, one of the rows' own suffixes after it, then each row moved to end
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
"""Prefix tokens the shared prefill must save (those of every distinct prompt but one) to be worth a second forward
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
    share their first `length` tokens: the model's logits of the prefix `[1, length or 1, V]` (every column where
    `scored`, else the last) and of the suffixes `[len(prompts), S, V]`, right-padded to the longest `S`. The cache
    then holds each row left-padded to end at slot `length + S`, as a prefill of the whole prompts leaves it."""
    device = kv.spec.device
    rows = kv.spec.batch_size
    prefix = torch.tensor([prompts[0][:length]], device=device)
    zero = torch.zeros(1, dtype=torch.long, device=device)
    every_row = CopiesView(kv, zero, zero.expand(rows))  # one row computed, written to every row
    at = torch.arange(length, device=device)[None]
    prefix_logits = model(prefix, at, every_row, **({} if scored else last_only(model)))
    lengths = [len(p) - length for p in prompts]
    suffixes = torch.zeros(len(prompts), max(lengths), dtype=torch.long)  # built here, moved once
    for r, prompt in enumerate(prompts):  # right-padded: each row's own tokens from slot `length` on
        suffixes[r, : lengths[r]] = torch.tensor(prompt[length:], dtype=torch.long)
    suffixes = suffixes.to(device)
    positions = (length + torch.arange(suffixes.shape[1], device=device))[None].expand(len(prompts), -1)
    view = kv if alike is None else CopiesView(kv, *alike)
    suffix_logits = model(suffixes, positions, view)
    ends = lengths if alike is None else [lengths[i] for i in alike[1].tolist()]
    kv.crop_rows([length + e for e in ends], length + suffixes.shape[1])  # type: ignore[attr-defined]
    return prefix_logits, suffix_logits
