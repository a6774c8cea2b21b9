"""`prefill_only=True` once the prompt is compressed (kvpress's semantics): every later token is appended after the
prompt's kept entries, as a plain cache appends: no scores, no eviction, and steps that `compile=True` traces.

`ScoredCache` compresses the prompt (its first forward) into storage slots `[0, budget)`, in slot order; the
`i`-th token after it goes to slot `budget + i`. `crop` takes back any of those, never the prompt. `crop_rows` moves
each row's later tokens within those slots, so a row's own begin at its `lead`-th (those before it: padding).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from decodekit.storage import Storage, no_take_slots

__all__ = ["PrefillOnly"]


class PrefillOnly:
    """What a `prefill_only` cache holds once its prompt is compressed: the prompt's kept entries, then every
    token since. Made with the cache, so `compile=True` finds the count of tokens since from its first trace on."""

    def __init__(self, store: Storage, budget: int, heads: int, layers: int, rows: int, device: torch.device) -> None:
        self.store, self.budget, self.heads = store, budget, heads  # the store has `budget + capacity` slots
        self.settled = False  # whether the prompt is compressed (`settle`): every later token is then appended
        self.prompt = 0  # the prompt's length, once settled (`crop_rows` may lower it: the later tokens' first slot)
        self.appended = [0] * layers  # per layer: tokens written after the prompt
        self.holds: list[Tensor] = []  # per layer, [B, H_kv, budget]: which of the prompt's slots hold a token
        self.slots: list[Tensor] = []  # per layer, [B, H_kv, budget]: the stream slot each of them holds
        # Per row, the first later token that is its own (`crop_rows`), host-side and as the mask reads it; and
        # whether the row still holds its prompt (a row that kept none of its tokens does not).
        self.lead, self.keeps = [0] * rows, [True] * rows
        self._lead = torch.zeros(rows, 1, 1, 1, dtype=torch.long, device=device)

    def settle(self, prompt: int, holds: list[Tensor], slots: list[Tensor]) -> None:
        """The prompt, of `prompt` tokens, is compressed into storage slots `[0, budget)`: append from now on."""
        self.settled, self.prompt, self.holds, self.slots = True, prompt, holds, slots

    @property
    def length(self) -> int:
        return self.fed(-1)

    def fed(self, layer: int) -> int:
        """Stream slots `layer` has been fed: the prompt and every token since."""
        return self.prompt + self.appended[layer]

    def update(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """`k`, `v` `[B, H_kv, T, D]` written after what `layer` holds; everything it holds returned."""
        start, T = self.budget + self.appended[layer], k.shape[2]
        self.store.write(layer, start, k, v)
        self.appended[layer] += T
        return self.store.read(layer, 0, start + T)

    def attention_mask(self, layer: int, positions: Tensor) -> Tensor:
        """The prompt's kept entries, then every later token up to each query (causal)."""
        T, appended = positions.shape[1], self.appended[layer]
        later = torch.arange(appended, device=positions.device)
        query = torch.arange(appended - T, appended, device=positions.device)[:, None]
        kept = self.holds[layer].unsqueeze(2)  # [B, H_kv, 1, budget]
        since = (later <= query) & (later >= self._lead)  # [B, 1, T, appended]: a row's own, causally
        mask = torch.cat([kept.expand(-1, -1, T, -1), since.expand(-1, kept.shape[1], -1, -1)], -1)
        groups = self.heads // kept.shape[1]  # the query heads of each of the layer's kv-heads
        return mask.repeat_interleave(groups, dim=1) if groups > 1 else mask

    def crop(self, n: int) -> None:
        """Take back every token from stream slot `n` on (`n` at least the prompt's length)."""
        self.appended = [n - self.prompt] * len(self.appended)

    def oldest(self) -> int:
        """The smallest `n` that `crop(n)` accepts: no row's prompt is taken back."""
        return self.prompt + max((lead for lead, keeps in zip(self.lead, self.keeps) if keeps), default=0)

    def floors(self) -> list[int]:
        """Per row, the smallest slot `crop_rows` may end it at (keeping any of its tokens): after its prompt."""
        return [self.prompt + lead if keeps else self.prompt for lead, keeps in zip(self.lead, self.keeps)]

    def crop_rows(self, ends: Sequence[int], length: int, empty: list[bool]) -> None:
        """Row `b` keeps its later tokens before stream slot `ends[b]`, moved to end at `length` (nothing where
        `empty[b]`); the first later slot drops where a row moved left needs it (its padding shrinks)."""
        take = getattr(self.store, "take_slots", None)
        if take is None:
            raise no_take_slots("prefill_only.crop_rows", self.store)
        prompt, device = self.prompt, self._lead.device
        kept = [0 if none else end - prompt - lead for end, lead, none in zip(ends, self.lead, empty)]
        first = min(prompt, length - max(kept))  # the later tokens' first stream slot: every row's must fit
        since = length - first
        # Later slot j of row b takes its old later slot j + ends[b] - prompt - since (padding: any, masked).
        shift = torch.tensor([end - prompt - since for end in ends], device=device)[:, None]
        later = (torch.arange(since, device=device)[None] + shift).clamp_(min=0) + self.budget
        held = torch.arange(self.budget, device=device).expand(len(ends), -1)
        take(torch.cat([held, later], 1), self.budget + self.appended[-1])
        self.prompt, self.appended = first, [since] * len(self.appended)
        self.lead = [since - count for count in kept]
        self.keeps = [keeps and not none for keeps, none in zip(self.keeps, empty)]
        self._lead = torch.tensor(self.lead, device=device)[:, None, None, None]
        moved = torch.tensor([length - end for end in ends], device=device)[:, None, None]
        none = torch.tensor(empty, device=device)[:, None, None]
        self.holds = [holds & ~none for holds in self.holds]
        self.slots = [torch.where(slots >= 0, slots + moved, -1) for slots in self.slots]

    def kept(self, layer: int) -> Tensor:
        """`[B, H_kv, budget + tokens since]`: the stream slot of each entry `layer` holds (-1: none)."""
        prompt = torch.where(self.holds[layer], self.slots[layer], -1)
        since = torch.arange(self.prompt, self.fed(layer), device=prompt.device)
        own = since >= self.prompt + self._lead[:, 0]  # [B, 1, appended]: a row's padding holds none
        return torch.cat([prompt, torch.where(own, since, -1).expand(-1, prompt.shape[1], -1)], -1)

    def reorder(self, index: Tensor) -> None:
        """Row `i` becomes row `index[i]`: its storage, and which prompt entries it holds."""
        self.store.reorder(index, self.budget + self.appended[-1])
        self.holds = [holds.index_select(0, index) for holds in self.holds]
        self.slots = [slots.index_select(0, index) for slots in self.slots]
        rows = index.tolist()
        self.lead, self.keeps = [self.lead[i] for i in rows], [self.keeps[i] for i in rows]
        self._lead = self._lead.index_select(0, index)
