"""A third-party cache plugin: a storage (`half`) and an eviction policy (`recent`), each with no
knowledge of the other, composing with each other and with the standard ones.

python examples/custom_cache.py
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import torch
from decodekit_gpt.gpt import GPT, GPTConfig
from pydantic import Field
from torch import Tensor

import decodekit as dk
from decodekit.cache import PreallocatedKVCache, Sized, slot_mask
from decodekit.hookspecs import Registrar
from decodekit.storage import FloatStorage, lookup_storage


# 1. A storage: keys and values in float16, whatever the model computes in. `read` gives back `spec.dtype`.
class HalfStorage(FloatStorage):
    def __init__(self, spec: dk.CacheSpec, slots: Sequence[int]) -> None:
        super().__init__(dk.CacheSpec(**{**spec.__dict__, "dtype": torch.float16}), slots)
        self.out_dtype = spec.dtype

    def read(self, layer: int, start: int, stop: int) -> tuple[Tensor, Tensor]:
        k, v = super().read(layer, start, stop)
        return k.to(self.out_dtype), v.to(self.out_dtype)


class HalfCache(PreallocatedKVCache):
    """Registering a backend that keeps every token in the storage names the storage: `store="half"`."""

    storage = HalfStorage


# 2. An eviction policy: the last `n` tokens of every layer, in a ring of `n` slots of any storage.
class RecentParams(dk.Params):
    n: int = Field(default=64, ge=1, description="tokens each query sees, itself included")
    store: str = Field(default="gqa", description="the storage backend the ring lives in")


class RecentCache:
    """Evicts (it states its `reach`): `update` returns the ring (in ring order) plus the new block.

    Every key it hands out has been through its storage once (an int8 or half storage changes them),
    the new block included: it goes through a scratch storage of the block's length.
    """

    def __init__(self, spec: dk.CacheSpec, params: RecentParams | None = None) -> None:
        # A backend is called impl(spec, params); params=None (the defaults) makes the class a cache= factory too.
        params = RecentParams() if params is None else params
        self.spec, self.n = spec, params.n
        self.storage = lookup_storage(params.store, "recent")  # errors say "cache recent: store=..."
        self.store = self.storage(spec, [params.n] * spec.n_layers)
        self.slots = [torch.full((params.n,), -1) for _ in range(spec.n_layers)]  # stream slot in each ring slot
        self.lengths = [0] * spec.n_layers
        self.returned = [self.slots[0][:0]] * spec.n_layers  # slot of each key the last update returned

    capacity = sys.maxsize

    @property
    def length(self) -> int:
        return self.lengths[-1]

    @property
    def nbytes(self) -> int:
        return self.store.nbytes

    def update(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        start, T = self.lengths[layer], k.shape[2]
        held = min(start, self.n)
        scratch = self.storage(self.spec, [0] * layer + [T])  # the block as the storage will give it back, in the
        scratch.write(layer, 0, k, v)  # layer's shape (its slots on `layer` alone: layers may differ, layer_shapes)
        new_k, new_v = scratch.read(layer, 0, T)
        old_k, old_v = self.store.read(layer, 0, held)  # a read may be a view of the ring: ...
        keys, values = torch.cat([old_k, new_k], 2), torch.cat([old_v, new_v], 2)  # ... copied before it is overwritten
        self.returned[layer] = torch.cat([self.slots[layer][:held], torch.arange(start, start + T)])
        for i in range(max(0, T - self.n), T):  # the newest `n` of the block stay
            self.store.write(layer, (start + i) % self.n, k[:, :, i : i + 1], v[:, :, i : i + 1])
            self.slots[layer][(start + i) % self.n] = start + i
        self.lengths[layer] = start + T
        return keys, values

    def attention_mask(self, layer: int, positions: Tensor) -> Tensor:
        first = self.lengths[layer] - positions.shape[1]
        return slot_mask(self.returned[layer], positions, first, window=self.n)

    def reach(self, new: int) -> int:
        return min(self.length + new, self.n)  # no query sees further back than n - 1

    def reset(self) -> None:
        self.lengths = [0] * self.spec.n_layers
        for s in self.slots:
            s.fill_(-1)

    rollback = 0  # once the ring has wrapped, a taken-back slot may already be overwritten

    def crop(self, n: int) -> None:
        if n != self.length and not (self.length <= self.n and 0 <= n <= self.length):
            raise dk.ParameterError(f"recent.crop: n={n} is invalid; allowed: n = length, or any before an eviction")
        self.lengths = [n] * self.spec.n_layers
        for s in self.slots:
            s.masked_fill_(s >= n, -1)

    def reorder(self, index: Tensor) -> None:
        self.store.reorder(index, self.n)


class CachePlugin:
    @dk.hookimpl
    def register_cache_backends(self, register: Registrar) -> None:
        register("half", HalfCache, description="Every token, stored in float16")
        register("recent", RecentCache, RecentParams, description="The last n tokens per layer, any storage")


def main() -> None:
    dk.register_plugin(CachePlugin(), name="example-caches")  # what an entry point does once installed
    torch.manual_seed(0)
    config = GPTConfig(vocab_size=50, block_size=32, n_layer=2, n_head=4, n_kv_head=2, n_embd=32, position="rope")
    model = GPT(config).eval()
    for cache in ("recent(n=16, store='half')", "recent(n=16, store='int8')", "window(size=12, sinks=4, store='half')"):
        out = dk.generate(model, [[1, 2, 3]], cache=cache, max_new_tokens=100, chain="greedy")
        print(f"{cache:42} {len(out.tokens[0])} tokens past a 32-position context")
    out = dk.generate(model, [[1, 2, 3]], cache=RecentCache, max_new_tokens=20, chain="greedy")  # as a factory
    print(f"{'cache=RecentCache (n=64, gqa)':42} {len(out.tokens[0])} tokens")
    spec = dk.CacheSpec.for_model(model.spec, batch_size=1, capacity=1)
    full, half = (dk.create_cache(c, spec) for c in ("recent(n=16)", "recent(n=16, store='half')"))
    assert isinstance(full, Sized) and isinstance(half, Sized)  # both report their bytes
    print("bytes: recent(n=16)", full.nbytes, "half", half.nbytes)


if __name__ == "__main__":
    main()
