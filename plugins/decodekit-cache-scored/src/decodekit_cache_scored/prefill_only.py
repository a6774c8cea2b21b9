"""`prefill_only=True` once the prompt is compressed (kvpress's semantics): every later token is appended after the
prompt's kept entries, as a plain cache appends: no scores, no eviction, and steps that `compile=True` traces.

`ScoredCache` compresses the prompt (its first forward) into storage slots `[0, budget)`, in slot order; the
`i`-th token after it goes to slot `budget + i`. `crop` takes back any of those, never the prompt.
"""

from __future__ import annotations

import torch
from torch import Tensor

from decodekit.storage import Storage

__all__ = ["PrefillOnly"]


class PrefillOnly:
    """What a `prefill_only` cache holds once its prompt is compressed: the prompt's kept entries, then every
    token since. Made with the cache, so `compile=True` finds the count of tokens since from its first trace on."""

    def __init__(self, store: Storage, budget: int, heads: int, layers: int) -> None:
        self.store, self.budget, self.heads = store, budget, heads  # the store has `budget + capacity` slots
        self.settled = False  # whether the prompt is compressed (`settle`): every later token is then appended
        self.prompt = 0  # the prompt's length, once settled
        self.appended = [0] * layers  # per layer: tokens written after the prompt
        self.holds: list[Tensor] = []  # per layer, [B, H_kv, budget]: which of the prompt's slots hold a token
        self.slots: list[Tensor] = []  # per layer, [B, H_kv, budget]: the stream slot each of them holds

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
        mask = torch.cat([kept.expand(-1, -1, T, -1), (later <= query).expand(*kept.shape[:2], T, -1)], -1)
        groups = self.heads // kept.shape[1]  # the query heads of each of the layer's kv-heads
        return mask.repeat_interleave(groups, dim=1) if groups > 1 else mask

    def crop(self, n: int) -> None:
        """Take back every token from stream slot `n` on (`n` at least the prompt's length)."""
        self.appended = [n - self.prompt] * len(self.appended)

    def kept(self, layer: int) -> Tensor:
        """`[B, H_kv, budget + tokens since]`: the stream slot of each entry `layer` holds (-1: none)."""
        prompt = torch.where(self.holds[layer], self.slots[layer], -1)
        since = torch.arange(self.prompt, self.fed(layer), device=prompt.device)
        return torch.cat([prompt, since.expand(*prompt.shape[:2], -1)], -1)

    def reorder(self, index: Tensor) -> None:
        """Row `i` becomes row `index[i]`: its storage, and which prompt entries it holds."""
        self.store.reorder(index, self.budget + self.appended[-1])
        self.holds = [holds.index_select(0, index) for holds in self.holds]
        self.slots = [slots.index_select(0, index) for slots in self.slots]
