"""Registers the `gqa` cache backend (imports no torch until a cache is created)."""

from decodekit import hookimpl
from decodekit.hookspecs import CacheRegistrar


@hookimpl
def register_cache_backends(register: CacheRegistrar) -> None:
    register(
        "gqa",
        "decodekit_cache_gqa.cache:GQACache",
        "Preallocated keys/values per kv-head group (GQA/MQA): 2·L·T·n_kv_heads·head_dim·bytes",
    )
