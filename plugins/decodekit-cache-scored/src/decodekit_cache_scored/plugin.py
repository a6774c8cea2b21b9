"""Registers the scored cache backends (imports no torch until a cache is created)."""

from decodekit import hookimpl
from decodekit.hookspecs import Registrar
from decodekit_cache_scored.params import ScoredParams, SnapKVParams

_TARGET = "decodekit_cache_scored.caches"


@hookimpl
def register_cache_backends(register: Registrar) -> None:
    register(
        "h2o",
        f"{_TARGET}:H2OCache",
        ScoredParams,
        description="Heavy hitters (H2O): accumulated attention, sinks and recent tokens within a budget; any storage",
    )
    register(
        "tova",
        f"{_TARGET}:TOVACache",
        ScoredParams,
        description="TOVA: drops what the latest query attends to least, within a budget; any storage",
    )
    register(
        "snapkv",
        f"{_TARGET}:SnapKVCache",
        SnapKVParams,
        description="SnapKV: a prompt compressed by its last "
        "queries' pooled attention, then an eviction rule; any storage",
    )
    register(
        "knorm",
        f"{_TARGET}:KeyNormCache",
        ScoredParams,
        description="Key-norm: keeps the keys of smallest L2 norm within a budget; any storage",
    )
    register(
        "streaming",
        f"{_TARGET}:StreamingCache",
        ScoredParams,
        description="StreamingLLM's sinks + newest "
        "tokens after a full prefill (kvpress's StreamingLLMPress); any storage",
    )
