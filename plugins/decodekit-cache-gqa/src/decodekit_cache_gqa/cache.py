"""`GQACache`: one key and one value per kv-head, shared by the query heads of its group.

The attention reads the shared heads directly (`enable_gqa`), so nothing is repeated.
Bytes: 2 · layers · batch · capacity · n_kv_heads · head_dim · element size, which is
n_heads / n_kv_heads times less than `dense` on a grouped-query model.
"""

from __future__ import annotations

from decodekit.cache import PreallocatedKVCache
from decodekit.params import NoParams
from decodekit.spec import CacheSpec


class GQACache(PreallocatedKVCache):
    def __init__(self, spec: CacheSpec, params: NoParams | None = None) -> None:
        super().__init__(spec, stored_heads=spec.n_kv_heads)
