"""The `dense` cache backend for decodekit.

`from decodekit_cache_dense.cache import DenseCache`; the entry point, `plugin`, imports no torch.
"""

__version__ = "0.1.0"
