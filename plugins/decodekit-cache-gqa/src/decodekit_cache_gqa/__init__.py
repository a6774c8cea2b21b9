"""The `gqa` cache backend for decodekit."""

from decodekit_cache_gqa.cache import GQACache

__all__ = ["GQACache"]
