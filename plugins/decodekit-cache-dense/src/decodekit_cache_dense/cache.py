"""`DenseCache`: one key and one value per attention head, as a plain multi-head cache stores them.

On a grouped-query model the model's kv-heads are repeated to every query head before
they are stored, so the cache costs n_heads / n_kv_heads times what `gqa` costs.
Bytes: 2 · layers · batch · capacity · n_heads · head_dim · element size.
"""

from __future__ import annotations

from torch import Tensor

from decodekit.cache import PreallocatedKVCache
from decodekit.params import NoParams
from decodekit.spec import CacheSpec


class DenseCache(PreallocatedKVCache):
    def __init__(self, spec: CacheSpec, params: NoParams | None = None) -> None:
        super().__init__(spec, stored_heads=spec.n_heads)
        self._repeat = spec.n_heads // spec.n_kv_heads

    def _to_stored(self, x: Tensor) -> Tensor:
        # [B, H_kv, T, D] -> [B, H, T, D]: query head h reads kv-head h // repeat.
        return x if self._repeat == 1 else x.repeat_interleave(self._repeat, dim=1)
