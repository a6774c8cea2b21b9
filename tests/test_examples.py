"""The examples run, and what they show is true."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import torch

import decodekit as dk
from decodekit.storage import lookup_storage
from decodekit.testing import CacheConformance

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_script(name: str) -> str:
    """What `python examples/<name>.py` prints."""
    return subprocess.run(
        [sys.executable, str(EXAMPLES / f"{name}.py")], capture_output=True, text=True, check=True
    ).stdout


def test_custom_sampler_script_runs() -> None:
    out = run_script("custom_sampler")
    assert "in code:      no_token_zero | softcap(cap=5.0) | sample" in out
    assert "by name:      softcap(cap=5.0) | sample" in out
    assert "bad value:    softcap: cap=-1 is invalid" in out


def test_custom_sampler_numbers_and_registration() -> None:
    ex = load("custom_sampler")
    softcap = ex.Softcap(cap=5.0)
    logits = torch.tensor([[10.0, -10.0, 0.0, float("-inf")]])
    out = softcap(logits, dk.DecodeContext(tokens=torch.zeros(1, 1, dtype=torch.long)))
    # 5 · tanh(2) = 4.8201, 5 · tanh(-2) = -4.8201, 0 stays 0, -inf stays removed
    torch.testing.assert_close(out, torch.tensor([[4.8201379, -4.8201379, 0.0, float("-inf")]]))
    banned = ex.no_token_zero(torch.zeros(2, 3), dk.DecodeContext(tokens=torch.zeros(2, 1, dtype=torch.long)))
    assert banned[:, 0].eq(float("-inf")).all() and banned[:, 1:].eq(0).all()

    plugin = ex.SoftcapPlugin()
    dk.register_plugin(plugin, name="softcap-example")
    try:
        model = ex.GPT(ex.GPTConfig(vocab_size=64, block_size=32, n_layer=1, n_head=2, n_embd=16)).eval()
        by_name = dk.generate(model, [[1, 2, 3]], chain="softcap(5.0) | sample", max_new_tokens=8, seed=0)
        in_code = dk.generate(model, [[1, 2, 3]], chain=dk.Chain([ex.Softcap(cap=5.0)]), max_new_tokens=8, seed=0)
        assert by_name.tokens == in_code.tokens
        assert dk.Chain.parse("softcap(5.0)").to_spec() == [
            {"name": "softcap", "params": {"cap": 5.0}},
            {"name": "sample", "params": {}},
        ]
        with pytest.raises(dk.ParameterError, match="cap=-1 .*greater than 0"):
            dk.create("softcap", cap=-1)
    finally:
        dk.unregister_plugin(plugin)


def test_custom_cache_script_runs() -> None:
    out = run_script("custom_cache")
    assert "recent(n=16, store='int8')                 100 tokens past a 32-position context" in out
    assert "cache=RecentCache (n=64, gqa)              20 tokens" in out  # the class as a factory of its own
    assert "bytes: recent(n=16) 4096 half 2048" in out


def test_the_example_recent_cache_takes_the_documented_backend_signature() -> None:
    """docs/caches.md ("Writing a cache"): a backend class takes `(spec, params=None)`, and with `params=None` it is
    a `cache=` factory of its own. The example's `RecentCache` took `(spec, params)`: as a factory, a `TypeError`
    for the missing `params`."""
    from decodekit_gpt.gpt import GPT, GPTConfig

    ex = load("custom_cache")
    torch.manual_seed(0)
    config = GPTConfig(vocab_size=50, block_size=32, n_layer=2, n_head=4, n_kv_head=2, n_embd=32, position="rope")
    out = dk.generate(GPT(config).eval(), [[1, 2, 3]], cache=ex.RecentCache, max_new_tokens=20, chain="greedy")
    assert len(out.tokens[0]) == 20
    cache = ex.RecentCache(dk.CacheSpec(2, 4, 2, 8, 1, 64))
    assert cache.n == ex.RecentParams().n and cache.storage is lookup_storage("gqa")  # the parameters' defaults


class TestExampleRecentCacheConformance(CacheConformance):
    """The example's eviction policy, held to the kit: the last 5 slots, at their own positions."""

    store = "gqa"

    def make(self, spec: dk.CacheSpec) -> dk.KVCache:
        ex = load("custom_cache")
        return ex.RecentCache(spec, ex.RecentParams(n=5, store=self.store))  # type: ignore[no-any-return]

    def kept(self, spec: dk.CacheSpec, layer: int, query: int, first: int) -> dict[int, int]:
        return {t: t for t in range(max(0, query - 4), query + 1)}

    def rollback(self, spec: dk.CacheSpec) -> int | None:
        return 0  # it cannot take back a token once it has evicted one

    def nbytes(self, spec: dk.CacheSpec) -> int:
        return 2 * spec.n_layers * spec.batch_size * 5 * spec.n_kv_heads * spec.head_dim * spec.dtype.itemsize


class TestExampleRecentOverInt8(TestExampleRecentCacheConformance):
    """The same policy over the int8 storage: what it hands out is what the storage gives back."""

    store = "int8"
    in_place = False

    def round_trip(self, x: torch.Tensor) -> torch.Tensor:
        from decodekit_cache_int8.storage import dequantise, quantise

        return dequantise(*quantise(x), x.dtype)

    def nbytes(self, spec: dk.CacheSpec) -> int:
        return 2 * spec.n_layers * spec.batch_size * 5 * spec.n_kv_heads * (spec.head_dim + 4)


@pytest.fixture
def example_caches() -> Iterator[None]:
    """The example's backends registered, as its plugin would be once installed (`store="half"`)."""
    plugin = load("custom_cache").CachePlugin()
    dk.register_plugin(plugin, name="example-caches")
    yield
    dk.unregister_plugin(plugin)


@pytest.mark.usefixtures("example_caches")
class TestExampleRecentOverHalf(TestExampleRecentCacheConformance):
    """And over the example's own float16 storage."""

    store = "half"
    in_place = False

    def round_trip(self, x: torch.Tensor) -> torch.Tensor:
        return x.half().to(x.dtype)

    def nbytes(self, spec: dk.CacheSpec) -> int:
        return 2 * spec.n_layers * spec.batch_size * 5 * spec.n_kv_heads * spec.head_dim * 2


class TestExampleHalfStorageConformance(CacheConformance):
    """The example's storage, held to the kit as docs/plugins.md shows."""

    in_place = False

    def make(self, spec: dk.CacheSpec) -> dk.KVCache:
        return load("custom_cache").HalfCache(spec)  # type: ignore[no-any-return]

    def round_trip(self, x: torch.Tensor) -> torch.Tensor:
        return x.half().to(x.dtype)

    def nbytes(self, spec: dk.CacheSpec) -> int:
        return 2 * spec.n_layers * spec.batch_size * spec.capacity * spec.n_kv_heads * spec.head_dim * 2
