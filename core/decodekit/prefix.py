"""Prefixes a batch's prompts share, each prefilled once (a few-shot block before every line, a question's context
before each of its choices): the distinct prompts split into groups whose members share a prefix, every group's
prefix computed in one forward (left-padded, written to each member's rows), then each prompt's own suffix
right-padded after it, each row moved to end where left padding puts it (docs/concepts.md, "The decode engine")."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from itertools import pairwise

import torch
from torch import Tensor

from decodekit.cache import KVCache, RowCroppable, evicts, observes
from decodekit.copies import CopiesView
from decodekit.model import Model, last_only
from decodekit.prompts import left_pad

__all__ = ["MIN_SAVED", "Groups", "prefill_prefixes", "shared_prefixes"]

MIN_SAVED = 96
"""Tokens the shared prefill must save (the prefix forward's width times the rows it spares: each group's members but
one) to be worth its other forwards (docs/benchmarks.md, "a prefix common to a batch's rows")."""


@dataclasses.dataclass(frozen=True)
class Groups:
    """Distinct prompts split by the prefix each group's members share (a prompt alone: a group of one, its prefix
    all its tokens but the last). Groups are numbered in the order of their first prompts."""

    of: list[int]
    """Each prompt's group."""
    firsts: list[int]
    """Each group's first prompt (the one its prefix's tokens are read from)."""
    prefixes: list[int]
    """Each group's prefix length: the tokens prefilled once for all its members."""

    @property
    def width(self) -> int:
        """The longest prefix: every group's ends in its column `width - 1` (left-padded)."""
        return max(self.prefixes)

    def prefix(self, prompt: int) -> int:
        """The prefix length `prompt` shares with its group."""
        return self.prefixes[self.of[prompt]]


def shared_prefixes(kv: KVCache | None, prompts: Sequence[Sequence[int]]) -> Groups | None:
    """The groups of the distinct `prompts` whose prefixes are prefilled once through `kv`, the grouping that saves
    the most tokens; None where none saves `MIN_SAVED` or `kv` cannot: no cache, one that evicts (a prefill in
    blocks) or scores queries (it would see them in another order), or cannot move its rows (`crop_rows` over a
    storage with `take_slots`). Each prompt keeps a token of its own: its logits are the row's next token's."""
    if kv is None or len(prompts) < 2 or evicts(kv) or observes(kv) or not isinstance(kv, RowCroppable):
        return None
    if not callable(getattr(getattr(kv, "store", None), "take_slots", None)):
        return None
    keys = [tuple(p) for p in prompts]  # compared in C (a tuple beside a list is never equal)
    order = sorted(range(len(keys)), key=keys.__getitem__)  # a group's members sit side by side
    common = [_common(keys[a], keys[b]) for a, b in pairwise(order)]
    lengths = [len(keys[i]) for i in order]
    longest, saved, best = max(lengths), 0, None
    # The rows' prefixes end together and their suffixes start together, so with a longest suffix `s` the prefix
    # forward is `longest - s` wide and spares each group's members but one: try each `s` that groups otherwise,
    # shortest first, while a longer one could still do better.
    suffix: int | None = 1
    while suffix is not None and (len(keys) - 1) * (longest - suffix) > saved:
        runs, suffix = _runs(common, lengths, suffix)
        width = longest - max(end - prefix for _, _, prefix, end in runs)  # the suffixes found, perhaps shorter
        if (len(keys) - len(runs)) * width > saved:
            saved, best = (len(keys) - len(runs)) * width, (runs, width)
    if best is None or saved < MIN_SAVED:
        return None
    return _groups(order, *best)


def _common(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    """The tokens `a` and `b` share at their start, each keeping one of its own; a binary search of slices."""
    low, high = 0, min(len(a), len(b)) - 1
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if a[:middle] == b[:middle] else (low, middle - 1)
    return low


def _runs(common: list[int], lengths: list[int], suffix: int) -> tuple[list[tuple[int, int, int, int]], int | None]:
    """The sorted prompts (`lengths`; `common[i]`: what prompts i and i + 1 share) split into runs that share a
    prefix leaving each at most `suffix` tokens of its own, each as long as it can be: (start, stop, prefix, longest
    length) each, a run of one keeping all its tokens but its last as its prefix; and the shortest longer `suffix`
    that would join two of them (None: they are one)."""
    runs, refused = [], []
    start, prefix, end = 0, lengths[0] - 1, lengths[0]
    for i, shared in enumerate(common):
        joined, joined_end = min(prefix, shared), max(end, lengths[i + 1])
        if joined_end - joined <= suffix:
            prefix, end = joined, joined_end
        else:
            runs.append((start, i + 1, prefix, end))
            refused.append(joined_end - joined)
            start, prefix, end = i + 1, lengths[i + 1] - 1, lengths[i + 1]
    runs.append((start, len(lengths), prefix, end))
    return runs, min(refused, default=None)


def _groups(order: list[int], runs: list[tuple[int, int, int, int]], width: int) -> Groups:
    """`runs` of the sorted `order` as groups numbered by their first prompts, each prefix at most `width` (the
    suffixes then fit after it: every row ends by the longest prompt's column)."""
    members = sorted(((order[start:stop], prefix) for start, stop, prefix, _ in runs), key=lambda m: min(m[0]))
    of = [0] * len(order)
    for g, (prompts, _) in enumerate(members):
        for p in prompts:
            of[p] = g
    return Groups(of, [min(p) for p, _ in members], [min(prefix, width) for _, prefix in members])


def prefill_prefixes(
    model: Model,
    kv: KVCache,
    prompts: Sequence[Sequence[int]],
    alike: tuple[Tensor, Tensor] | None,
    groups: Groups,
    *,
    scored: bool,
) -> tuple[Tensor, Tensor]:
    """Prefill the distinct `prompts` (`alike`: `distinct_rows` of the cache's rows, None where each is its own) by
    `groups`: the model's logits of the prefixes `[G, W or 1, V]` (left-padded to the `groups.width` W) and of the
    suffixes, every column where `scored` (`[len(prompts), S, V]`, right-padded to the longest `S`), else the last
    (`[len(prompts), 1, V]`, each row's own). The cache then holds each row left-padded to end at slot `W + S`,
    the longest prompt's length, as a prefill of the whole prompts leaves it."""
    device, width = kv.spec.device, groups.width
    of = torch.tensor(groups.of, device=device)
    rows = torch.tensor(groups.firsts, device=device)  # a cache row of each group, and each row's group:
    if alike is not None:  # through the distinct prompts' rows
        rows, of = alike[0][rows], of[alike[1]]
    heads = [prompts[i][:c] for i, c in zip(groups.firsts, groups.prefixes)]
    tokens, positions = left_pad(heads, width, device)
    last = {} if scored else last_only(model)
    prefix_logits = model(tokens, positions, CopiesView(kv, rows, of), **last)  # each group's rows written
    view = kv if alike is None else CopiesView(kv, *alike)
    starts = [groups.prefix(i) for i in range(len(prompts))]
    suffixes = [p[c:] for p, c in zip(prompts, starts)]
    if scored:
        every_column = _feed_right_padded(model, kv, view, suffixes, starts, width, alike)
        assert every_column is not None  # each prompt keeps a token of its own
        return prefix_logits, every_column
    # Each row ends in a column of its own, and a model returns every column's logits or the last one's: feed all
    # but each row's last token, move the rows to end together, then the last tokens in one column.
    _feed_right_padded(model, kv, view, [s[:-1] for s in suffixes], starts, width, alike, **last)
    tokens = torch.tensor([[s[-1]] for s in suffixes], device=device)
    positions = torch.tensor([[len(p) - 1] for p in prompts], device=device)
    return prefix_logits, model(tokens, positions, view, **last)


def _feed_right_padded(
    model: Model,
    kv: KVCache,
    view: KVCache,
    suffixes: Sequence[Sequence[int]],
    starts: Sequence[int],
    width: int,
    alike: tuple[Tensor, Tensor] | None,
    **options: bool,
) -> Tensor | None:
    """The model's logits of `suffixes` fed right-padded after the `width` slots every row holds, each at its own
    positions `starts[i] ..` (None where each is empty); then each cache row moved to end with the longest suffix."""
    longest = max(map(len, suffixes))
    if longest == 0:
        return None
    device = kv.spec.device
    tokens = torch.zeros(len(suffixes), longest, dtype=torch.long)  # built here, moved once
    for r, suffix in enumerate(suffixes):
        tokens[r, : len(suffix)] = torch.tensor(suffix, dtype=torch.long)
    positions = torch.tensor(starts, device=device)[:, None] + torch.arange(longest, device=device)
    logits: Tensor = model(tokens.to(device), positions, view, **options)
    ends = [len(s) for s in suffixes] if alike is None else [len(suffixes[i]) for i in alike[1].tolist()]
    kv.crop_rows([width + e for e in ends], width + longest)  # type: ignore[attr-defined]
    return logits
