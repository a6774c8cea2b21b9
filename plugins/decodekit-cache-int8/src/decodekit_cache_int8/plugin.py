"""Registers the `int8` cache backend (imports no torch until a cache is created)."""

from decodekit import hookimpl
from decodekit.hookspecs import Registrar


@hookimpl
def register_cache_backends(register: Registrar) -> None:
    register(
        "int8",
        "decodekit_cache_int8.storage:Int8Cache",
        description="Keys/values per kv-head in int8, one float32 scale per token and head each: "
        "L·T·n_kv_heads·(head_dim+value width+8) bytes",
    )
