"""The `dense` cache backend for decodekit."""

from decodekit_cache_dense.cache import DenseCache

__all__ = ["DenseCache"]
