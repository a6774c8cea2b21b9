"""Registers the `dense` cache backend (imports no torch until a cache is created)."""

from decodekit import hookimpl
from decodekit.hookspecs import Registrar


@hookimpl
def register_cache_backends(register: Registrar) -> None:
    register(
        "dense",
        "decodekit_cache_dense.cache:DenseCache",
        description="Preallocated keys/values for every attention head: 2·L·T·n_heads·head_dim·bytes",
    )
