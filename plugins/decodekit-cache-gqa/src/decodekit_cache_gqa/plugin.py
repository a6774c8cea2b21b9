"""Registers the `gqa` cache backend (imports no torch until a cache is created)."""

from decodekit import hookimpl
from decodekit.hookspecs import Registrar


@hookimpl
def register_cache_backends(register: Registrar) -> None:
    register(
        "gqa",
        "decodekit_cache_gqa.cache:GQACache",
        description="Preallocated keys/values per kv-head group (GQA/MQA): 2·L·T·n_kv_heads·head_dim·bytes",
    )
