"""decodekit inside a service: decodes from several threads at once on one model, and streams a client leaves."""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import torch

import decodekit as dk
from decodekit import compiling
from decodekit import threads as threads_module
from decodekit.cache import KVCache
from decodekit.registry import Registry
from decodekit.spec import CacheSpec
from tinymodels import tiny_gpt


def test_a_decode_entering_as_another_enters_restores_the_count_it_found(monkeypatch: pytest.MonkeyPatch) -> None:
    """threads() read torch's count twice; another thread's decode setting 1 between the reads left the process on
    1 thread for good (and decodekit then took it for the caller's choice). Another thread, simulated: its decode
    enters just after this one's first read and leaves while this one runs."""
    count = [2]
    reads = [0]

    def get_num_threads() -> int:
        reads[0] += 1
        found = count[0]
        if reads[0] == 1:
            count[0] = 1  # the other thread's decode enters now
        return found

    monkeypatch.setattr(torch, "get_num_threads", get_num_threads)
    monkeypatch.setattr(torch, "set_num_threads", lambda n: count.__setitem__(0, n))
    with threads_module.threads(1):
        count[0] = 2  # the other decode leaves, restoring the 2 it found
    assert count == [2]


def test_the_first_requests_of_several_threads_build_the_registry_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Eight threads asking at once built eight registries (each scanning and importing every plugin), and each
    thread's names came from a registry of its own."""
    import decodekit.plugins as plugins

    built: list[Registry] = []
    build = plugins._build

    def counted() -> Registry:
        built.append(build())
        return built[-1]

    monkeypatch.setattr(plugins, "_build", counted)
    monkeypatch.setattr(plugins, "_registry", None)
    start = threading.Barrier(8)

    def first_request(_: int) -> Registry:
        start.wait()
        return plugins.get_registry()

    with ThreadPoolExecutor(8) as pool:
        seen = list(pool.map(first_request, range(8)))
    assert len(built) == 1 and all(r is built[0] for r in seen)


def test_closing_a_stream_frees_its_cache_while_the_stream_is_still_referenced() -> None:
    """A server ends a stream whose client left with `close()`, as it would a generator's; EventStream had none (an
    AttributeError), and its cache lived as long as the stream object (a handler's local, a traceback's frame)."""
    kept: list[weakref.ref[KVCache]] = []

    def dense(spec: CacheSpec) -> KVCache:
        cache = dk.create_cache("dense", spec)
        kept.append(weakref.ref(cache))
        return cache

    model = tiny_gpt(2)
    stream = dk.stream(model, [[1, 2, 3]] * 2, cache=dense, max_new_tokens=30, seed=0)
    firsts = [next(stream) for _ in range(4)]
    assert kept[0]() is not None
    stream.close()
    assert kept[0]() is None and next(stream, None) is None and stream.result is None
    again = dk.generate(model, [[1, 2, 3]] * 2, max_new_tokens=30, seed=0)  # the next call is untouched
    assert [e.token for e in firsts] == [again.tokens[0][0], again.tokens[1][0], again.tokens[0][1], again.tokens[1][1]]


class _LazyParameters:
    """A model whose `parameters()` counts the tensors taken from it: the first on `device`, 1,000 more after."""

    def __init__(self, device: str) -> None:
        self.device, self.taken = device, 0

    def parameters(self) -> Iterator[torch.Tensor]:
        for _ in range(1001):
            self.taken += 1
            yield torch.empty(10, device=self.device)


@pytest.mark.parametrize(("device", "taken"), [("meta", 1), ("cpu", 1001)])
def test_the_threads_of_a_decode_are_decided_at_its_models_first_tensor_elsewhere(
    monkeypatch: pytest.MonkeyPatch, device: str, taken: int
) -> None:
    """Every call walked all of a model's parameters to decide its threads (1.5 ms a call over a 32-layer Llama's
    291 tensors), even for a model whose first tensor is on a GPU; now it stops at the first tensor that decides,
    and the model's next calls read its first tensor only (the walk is kept per model and device)."""
    monkeypatch.delenv("DECODEKIT_THREADS", raising=False)
    monkeypatch.setattr(threads_module, "_STARTED_WITH", torch.get_num_threads())  # nobody chose a count
    model = _LazyParameters(device)
    assert threads_module.decode_threads(model) == (None if device == "meta" else 1)
    assert model.taken == taken
    assert threads_module.decode_threads(model) == (None if device == "meta" else 1)
    assert model.taken == taken + 1


def _at_once(threads: int, call: Callable[[], object]) -> list[object]:
    """`call()` from `threads` threads, started together."""
    start = threading.Barrier(threads)

    def first(_: int) -> object:
        start.wait()
        return call()

    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(first, range(threads)))


def _slow_counting_compile(built: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """`compiling.compiled`, noting what it compiles and taking a while to (torch.compile's set-up), so that
    threads that check for a compiled function meanwhile would each build one; it compiles nothing."""

    def compiled(fn: Callable[..., Any], what: str, **options: Any) -> Callable[..., Any]:
        built.append(what)
        time.sleep(0.05)
        return fn

    monkeypatch.setattr(compiling, "compiled", compiled)


def test_the_first_compiled_requests_of_several_threads_compile_a_chain_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Four threads' first `compile=True` requests with one chain each built its compiled step (`Chain.compiled`
    checked, then set, unlocked): four compiled functions, each compiling the same graphs anew."""
    built: list[str] = []
    _slow_counting_compile(built, monkeypatch)
    chain = dk.Chain.parse("top_k(5) | sample")
    seen = _at_once(4, chain.compiled)
    assert built == ["the chain's step"] and all(c is seen[0] for c in seen)


def test_the_first_compiled_requests_of_several_threads_compile_a_model_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Four threads' first `compile=True` forwards of one model each built a compiled forward (the per-model and
    the per-cache-type ones were checked, then set, unlocked)."""
    built: list[str] = []
    _slow_counting_compile(built, monkeypatch)
    per_cache_type = compiling._per_cache_type

    def slow_per_cache_type() -> Callable[..., torch.Tensor]:
        time.sleep(0.05)
        return per_cache_type()

    monkeypatch.setattr(compiling, "_per_cache_type", slow_per_cache_type)
    model = tiny_gpt(n_layer=1)
    ids, positions = torch.tensor([[1, 2, 3]]), torch.arange(3)[None]

    def forward() -> object:
        cache = dk.create_cache("dense", CacheSpec.for_model(model.spec, batch_size=1, capacity=8))
        return compiling.compiled_forward(model)(ids, positions, cache).tolist()

    with torch.inference_mode():
        logits = _at_once(4, forward)
    assert built == ["the model's forward"] and all(x == logits[0] for x in logits)
