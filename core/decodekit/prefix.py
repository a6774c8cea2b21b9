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

__all__ = ["MIN_SAVED", "SUFFIX_LOGITS", "prefill_prefix", "shared_prefix"]

MIN_SAVED = 96
"""Prefix tokens the shared prefill must save (those of every distinct prompt but one) to be worth a second forward
(docs/benchmarks.md, "a prefix common to a batch's rows")."""

SUFFIX_LOGITS = 2**26
"""Logits the suffixes' forward may return at once without `prompt_logprobs` (256 MB in float32): its rows end in
different columns, so it cannot ask for the last column's only, as the unshared prefill does; longer goes in blocks."""


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
    `scored`, else the last) and of the suffixes, right-padded to the longest `S`: `[len(prompts), S, V]` where
    `scored`, else each row's last column `[len(prompts), 1, V]`. The cache then holds each row left-padded to end at
    slot `length + S`, as a prefill of the whole prompts leaves it."""
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
    if scored:
        suffix_logits = model(suffixes, positions, view)
    else:
        suffix_logits = _last_columns(model, suffixes, positions, view, torch.tensor(lengths, device=device) - 1)
    ends = lengths if alike is None else [lengths[i] for i in alike[1].tolist()]
    kv.crop_rows([length + e for e in ends], length + suffixes.shape[1])  # type: ignore[attr-defined]
    return prefix_logits, suffix_logits


def _last_columns(model: Model, tokens: Tensor, positions: Tensor, kv: KVCache, last: Tensor) -> Tensor:
    """The logits `[R, 1, V]` of each row's column `last[r]`, the forward fed in blocks of columns whose logits
    number at most `SUFFIX_LOGITS`."""
    R, S = tokens.shape
    width = max(1, SUFFIX_LOGITS // (R * model.spec.vocab_size))
    rows = torch.arange(R, device=tokens.device)
    kept: Tensor | None = None
    for start in range(0, S, width):
        logits = model(tokens[:, start : start + width], positions[:, start : start + width], kv)
        if not isinstance(logits, Tensor) or logits.dim() != 3:  # the engine's check names what is allowed
            return logits
        here = logits[rows, (last - start).clamp(0, logits.shape[1] - 1)][:, None]  # [R, 1, V]
        inside = ((last >= start) & (last < start + width))[:, None, None]
        kept = here if kept is None else torch.where(inside, here, kept)
    assert kept is not None  # every row has a suffix token
    return kept
