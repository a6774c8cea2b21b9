"""`DenseCache`: one key and one value per attention head, as a plain multi-head cache stores them.

On a grouped-query model the model's kv-heads are repeated to every query head before
they are stored, so the cache costs n_heads / n_kv_heads times what `gqa` costs.
Bytes: 2 · layers · batch · capacity · n_heads · head_dim · element size.
"""

from __future__ import annotations

from torch import Tensor

from decodekit.cache import PreallocatedKVCache
from decodekit.storage import FloatStorage


class RepeatedFloatStorage(FloatStorage):
    """`FloatStorage` with each kv-head repeated to every query head of its group (a plain MHA cache)."""

    def _heads(self, kv_heads: int) -> int:
        return self.spec.n_heads

    def _stored(self, x: Tensor) -> Tensor:
        # [B, H_kv, T, D] -> [B, H, T, D]: query head h reads kv-head h // repeat (the layer's kv-heads: x's).
        repeat = self.spec.n_heads // x.shape[1]
        return x if repeat == 1 else x.repeat_interleave(repeat, dim=1)


class DenseCache(PreallocatedKVCache):
    storage = RepeatedFloatStorage
