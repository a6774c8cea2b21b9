"""`GQACache`: one key and one value per kv-head, shared by the query heads of its group.

The attention reads the shared heads directly (`enable_gqa`), so nothing is repeated.
Bytes: 2 · layers · batch · capacity · n_kv_heads · head_dim · element size, which is
n_heads / n_kv_heads times less than `dense` on a grouped-query model.
"""

from __future__ import annotations

from decodekit.cache import PreallocatedKVCache
from decodekit.storage import FloatStorage


class GQACache(PreallocatedKVCache):
    storage = FloatStorage
