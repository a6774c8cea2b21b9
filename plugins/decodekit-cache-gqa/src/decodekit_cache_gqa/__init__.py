"""The `gqa` cache backend for decodekit.

`from decodekit_cache_gqa.cache import GQACache`; the entry point, `plugin`, imports no torch.
"""

__version__ = "0.1.0"
