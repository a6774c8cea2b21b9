"""Green lists: which tokens a watermark favours after some context, drawn as transformers'
`WatermarkLogitsProcessor` draws them, so that the same key marks and detects alike in both.

The seed of a green list: lefthash, `key * t` for the last token `t`; selfhash, the smallest of `key * (T[c] + 1)
* (T[t] + 1)` over the last `context_width` tokens `c` (int64, wrapping as torch multiplies), `t` the last of
them (a candidate for the next token), `T` a fixed permutation of 1,000,003 numbers drawn from the key. The list:
the first `int(V * greenlist_ratio)` entries of `torch.randperm(V)` from a generator seeded with it (mod 2**64 - 1)
on the logits' device: a CPU draw differs from a CUDA one, in transformers too.
"""

from __future__ import annotations

import torch
from torch import Tensor

from decodekit_watermark.params import WatermarkParams

__all__ = ["Greenlists"]

TABLE_SIZE = 1_000_003  # transformers' `table_size`
SELFHASH_CANDIDATES = 40  # transformers' (from the original repository): the most likely tokens tried


class Greenlists:
    """The green lists of one watermark over a vocabulary of `vocab_size` tokens, on `device`."""

    def __init__(self, params: WatermarkParams, vocab_size: int, device: torch.device) -> None:
        self.params, self.vocab_size, self.device = params, vocab_size, device
        self.size = int(vocab_size * params.greenlist_ratio)
        self._generator = torch.Generator(device=device)
        self._table: Tensor | None = None

    def ids(self, context: Tensor) -> Tensor:
        """The green token ids `[size]` after `context` (a 1-D long tensor, at least `context_width` long)."""
        self._generator.manual_seed(self._seed(context[-self.params.context_width :]))
        return torch.randperm(self.vocab_size, generator=self._generator, device=self.device)[: self.size]

    def is_green(self, context: Tensor, token: int) -> bool:
        return bool((self.ids(context) == token).any())

    def self_hashed(self, context: Tensor, scores: Tensor) -> Tensor:
        """selfhash's green ids for the next token: of the most likely candidates (by `scores` `[V]`), those green
        in the list they seed themselves."""
        candidates = scores.sort(descending=True).indices[:SELFHASH_CANDIDATES].tolist()
        green = [c for c in candidates if self.is_green(torch.cat([context, context.new_tensor([c])]), c)]
        return torch.tensor(green, dtype=torch.long, device=self.device)

    def _seed(self, context: Tensor) -> int:
        key = self.params.hashing_key
        if self.params.seeding_scheme == "lefthash":
            return key * int(context[-1]) % (2**64 - 1)
        table = self._fixed_table()
        a = table[context % TABLE_SIZE] + 1
        b = table[context[-1] % TABLE_SIZE] + 1
        return int((key * a * b).min()) % (2**64 - 1)

    def _fixed_table(self) -> Tensor:
        if self._table is None:
            generator = torch.Generator(device=self.device).manual_seed(self.params.hashing_key)
            self._table = torch.randperm(TABLE_SIZE, generator=generator, device=self.device)
        return self._table
