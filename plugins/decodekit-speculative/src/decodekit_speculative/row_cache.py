"""A KV cache whose rows hold different numbers of tokens, kept right-aligned.

The model masks by positions alone (`decodekit_gpt.gpt.attention_mask`): a row's real tokens
must be contiguous and end at the cache's last slot, anything before them is padding. After a
verification each row keeps its own number of tokens, so before the next forward every row is
cut back to a correct prefix of its history and moved to end at the same slot
(`KVCache.crop_rows`); then each row feeds the same number `F` of its last history tokens.
A moved key or value is unchanged: it depends on the token's position, never on its slot.
With one row every move is zero and `crop` does it, so any cache with `crop` serves one row.
"""

from __future__ import annotations

from collections.abc import Sequence

from decodekit.cache import Croppable, KVCache, RowCroppable

__all__ = ["RowCache"]


class RowCache:
    """Per row: how many leading history tokens the cache holds correctly, and the slot after them."""

    def __init__(self, cache: KVCache, batch_size: int, refeed: int = 1) -> None:
        self.cache = cache
        self.refeed = refeed  # the fewest history tokens every row feeds (so each row feeds as many as alone)
        self.correct = [0] * batch_size  # leading history tokens held correctly
        self.ends = [0] * batch_size  # the slot after them
        self.start = 0  # the slot where the next fed block begins
        self._fed_from = [0] * batch_size  # history index of each row's first fed column

    def prepare(self, lengths: Sequence[int], active: Sequence[bool]) -> int:
        """Crop and align the rows for histories of `lengths`; return `F`, the history tokens each row feeds.

        Row b then feeds history indices `lengths[b] - F ... lengths[b] - 1` (negative: padding).
        """
        F = max(self.refeed, *(n - c for n, c, a in zip(lengths, self.correct, active) if a))
        keep = [max(n - F, 0) for n in lengths]
        length = max(m for m, a in zip(keep, active) if a)
        # A row left out keeps nothing (ends 0, all padding): any cache can drop a row, while keeping its first
        # `length` slots would ask a cache that evicts for tokens it dropped.
        ends = [e - (c - m) if a else 0 for e, c, m, a in zip(self.ends, self.correct, keep, active)]
        if all(e == length for e in ends):
            assert isinstance(self.cache, Croppable)  # the strategy opened its decoding with needs=("crop",)
            self.cache.crop(length)
        elif isinstance(self.cache, RowCroppable):
            self.cache.crop_rows(ends, length)
        else:  # the strategy decodes rows one by one for such a cache
            raise TypeError(f"{type(self.cache).__name__} has no crop_rows")
        self.start = length
        self.correct = [m if a else 0 for m, a in zip(keep, active)]  # a row left out is fed afresh later
        self._fed_from = [n - F for n in lengths]
        return F

    def commit(self, row: int, correct: int) -> None:
        """After the forwards: row `row`'s first `correct` history tokens are now held correctly."""
        self.correct[row] = correct
        self.ends[row] = self.start + correct - self._fed_from[row]
