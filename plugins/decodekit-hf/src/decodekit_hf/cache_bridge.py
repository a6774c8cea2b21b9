"""`DecodekitCache`: a decodekit KV cache seen through transformers' `Cache` API (transformers 5).

transformers' attention calls `cache.update(key_states, value_states, layer_idx)` with the new
`[B, H_kv, T, D]` keys and values and attends over what it returns; the mask code
(`masking_utils.create_causal_mask`) asks `get_query_offset` / `get_seq_length` for the tokens
already held and `get_mask_sizes(q_length, layer)` for the key length and offset, then
combines the causal pattern with the 2-D padding mask `[B, past + T]`.

Every call is forwarded to the decodekit cache, which holds all the memory (its `nbytes`
stays exact): the bridge allocates nothing. A `dense` cache on a grouped-query model stores
each kv-head once per query head (`repeat_interleave`); transformers expects kv-heads and
repeats them itself, so the bridge hands back a strided view with one stored head per group.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor
from transformers.cache_utils import Cache, CacheLayerMixin

from decodekit.cache import Croppable, KVCache, Reorderable
from decodekit.errors import ParameterError

__all__ = ["DecodekitCache", "DecodekitLayer"]


class DecodekitLayer(CacheLayerMixin):  # type: ignore[misc,no-untyped-call]  # transformers is untyped
    """Layer `layer` of a decodekit cache: a full-attention layer that never drops a token."""

    is_compileable = False
    is_croppable = True
    is_sliding = False

    def __init__(self, kv: KVCache, layer: int) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.kv = kv
        self.layer = layer
        self.is_initialized = True  # the decodekit cache preallocated its buffers

    def lazy_initialization(self, key_states: Tensor, value_states: Tensor) -> None:
        """Nothing to do: the decodekit cache was allocated from its `CacheSpec`."""

    def update(self, key_states: Tensor, value_states: Tensor, *args: Any, **kwargs: Any) -> tuple[Tensor, Tensor]:
        k, v = self.kv.update(self.layer, key_states, value_states)  # [B, H_stored, S, D]
        repeat = k.shape[1] // key_states.shape[1]
        if repeat > 1:
            # Stored head h holds kv-head h // repeat, so heads 0, repeat, 2·repeat, ... are the kv-heads.
            k, v = k[:, ::repeat], v[:, ::repeat]  # [B, H_kv, S, D], a view
        return k, v

    def get_mask_sizes(self, query: int | Tensor) -> tuple[int, int]:
        """(kv_length, kv_offset): the held tokens plus the new ones, from slot 0.

        `query` is the count of new tokens; early 5.x releases pass their cache positions `[T]`.
        """
        query_length = query if isinstance(query, int) else query.shape[0]
        return self.kv.length + query_length, 0

    def get_seq_length(self) -> int:
        return self.kv.length

    def get_max_length(self) -> int:
        return self.kv.spec.capacity

    get_max_cache_shape = get_max_length  # its name before transformers 5.x renamed it


class DecodekitCache(Cache):  # type: ignore[misc]
    """A transformers `Cache` whose layers read and write the decodekit cache `kv`.

    Whole-cache operations (reset, crop, reorder) go to `kv` once, not once per layer.
    """

    def __init__(self, kv: KVCache) -> None:
        super().__init__(layers=[DecodekitLayer(kv, layer) for layer in range(kv.spec.n_layers)])
        self.kv = kv

    def reset(self) -> None:
        self.kv.reset()

    def crop(self, n: int) -> None:
        """Drop the last `-n` tokens for `n <= 0` (transformers 5.x); keep the first `n` for `n > 0` (as 5.0 did)."""
        length = self.kv.length
        keep = n if n > 0 else length + n
        if not isinstance(self.kv, Croppable):
            raise ParameterError(f"DecodekitCache.crop: cache {type(self.kv).__name__} cannot crop")
        self.kv.crop(min(max(keep, 0), length))

    def reorder_cache(self, beam_idx: Tensor) -> None:
        if not isinstance(self.kv, Reorderable):
            raise ParameterError(f"DecodekitCache.reorder_cache: cache {type(self.kv).__name__} cannot reorder")
        self.kv.reorder(beam_idx)

    def batch_repeat_interleave(self, repeats: int) -> None:
        raise NotImplementedError("DecodekitCache: the batch size is fixed by the decodekit cache's CacheSpec")

    def batch_select_indices(self, indices: Tensor) -> None:
        raise NotImplementedError("DecodekitCache: the batch size is fixed by the decodekit cache's CacheSpec")
