"""`DenseCache`: one key and one value per attention head, as a plain multi-head cache stores them.

On a grouped-query model the model's kv-heads are repeated to every query head before
they are stored, so the cache costs n_heads / n_kv_heads times what `gqa` costs.
Bytes: 2 · layers · batch · capacity · n_heads · head_dim · element size.
"""

from __future__ import annotations

from decodekit.cache import PreallocatedKVCache
from decodekit.storage import RepeatedFloatStorage


class DenseCache(PreallocatedKVCache):
    storage = RepeatedFloatStorage
