"""The `int8` cache backend for decodekit: keys and values in int8, one scale per token and head.

`from decodekit_cache_int8.storage import Int8Cache, Int8Storage`; the entry point, `plugin`,
imports no torch.
"""

__version__ = "0.1.0"
