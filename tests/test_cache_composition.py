"""Eviction and storage compose without knowing each other: a storage defined only here (int4)
runs under the standard `window` eviction, through the conformance kit and through the model."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from typing import cast

import pytest
import torch
from decodekit_cache_window.cache import WindowCache
from decodekit_cache_window.params import WindowParams
from decodekit_gpt.gpt import GPT, GPTConfig
from torch import Tensor

import decodekit as dk
from decodekit.cache import PreallocatedKVCache
from decodekit.testing import CacheConformance


class Int4Storage:
    """Symmetric 4-bit keys and values (levels -7 .. 7), one float32 scale per (row, head, token),
    two values packed per byte. Knows nothing of windows."""

    def __init__(self, spec: dk.CacheSpec, slots: Sequence[int]) -> None:
        if spec.value_dim not in (None, spec.head_dim):  # what a storage that holds one width says (the kit checks it)
            raise dk.ParameterError(f"int4: value_dim={spec.value_dim} is invalid; allowed: None (head_dim)")
        if spec.layer_shapes is not None:  # and one that holds one shape for every layer
            raise dk.ParameterError(f"int4: layer_shapes={spec.layer_shapes} is invalid; allowed: None")
        self.spec = spec
        B, H, D = spec.batch_size, spec.n_kv_heads, spec.head_dim
        self.packed = [[torch.zeros(B, H, n, D // 2, dtype=torch.uint8) for _ in "kv"] for n in slots]
        self.scales = [[torch.ones(B, H, n, 1) for _ in "kv"] for n in slots]

    @property
    def heads(self) -> int:
        return self.spec.n_kv_heads

    @property
    def nbytes(self) -> int:
        tensors = [t for layer in (*self.packed, *self.scales) for t in layer]
        return sum(t.numel() * t.element_size() for t in tensors)

    def write(self, layer: int, start: int, k: Tensor, v: Tensor) -> None:
        end = start + k.shape[2]
        for i, x in enumerate((k, v)):
            q, scale = int4_quantise(x)
            u = (q + 8).to(torch.uint8)  # 1 .. 15
            self.packed[layer][i][:, :, start:end] = u[..., 0::2] | (u[..., 1::2] << 4)
            self.scales[layer][i][:, :, start:end] = scale

    def write_at(self, layer: int, index: Tensor, k: Tensor, v: Tensor) -> None:
        """Each row and head to slots of its own (`index` `[B, H, T]`): what `window` writes a ragged batch with."""
        where = index.unsqueeze(-1)
        for i, x in enumerate((k, v)):
            q, scale = int4_quantise(x)
            u = (q + 8).to(torch.uint8)
            packed = u[..., 0::2] | (u[..., 1::2] << 4)
            self.packed[layer][i].scatter_(2, where.expand(-1, -1, -1, packed.shape[-1]), packed)
            self.scales[layer][i].scatter_(2, where, scale)

    def read(self, layer: int, start: int, stop: int) -> tuple[Tensor, Tensor]:
        out = []
        for i in range(2):
            p = self.packed[layer][i][:, :, start:stop]
            u = torch.stack([p & 15, p >> 4], -1).flatten(-2).float() - 8
            out.append((u * self.scales[layer][i][:, :, start:stop]).to(self.spec.dtype))
        return out[0], out[1]

    def reorder(self, index: Tensor, stop: int) -> None:
        for group in (*self.packed, *self.scales):
            for t in group:
                t[:, :, :stop] = t[:, :, :stop].index_select(0, index)


def int4_quantise(x: Tensor) -> tuple[Tensor, Tensor]:
    scale = x.float().abs().amax(-1, keepdim=True) / 7
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    return (x.float() / scale).round().clamp(-7, 7), scale


class Int4Cache(PreallocatedKVCache):
    """What registering a storage means: a backend that keeps every token in it."""

    storage = Int4Storage


class Int4Plugin:
    @dk.hookimpl
    def register_cache_backends(self, register: dk.hookspecs.Registrar) -> None:
        register("int4", Int4Cache, description="test-only 4-bit storage")


@pytest.fixture(autouse=True)
def int4_registered() -> Iterator[None]:
    plugin = Int4Plugin()
    dk.register_plugin(plugin, name="test-int4")
    yield
    dk.unregister_plugin(plugin)


SIZES, SINKS, SLACK = [5, 3], 2, 3


class TestWindowOverInt4(CacheConformance):
    """The standard window, over the test's storage, held to the kit with an int4 reference."""

    in_place = False
    tolerance = 1e-5

    def make(self, spec: dk.CacheSpec) -> WindowCache:
        return cast(
            WindowCache, dk.create_cache(f"window(size={SIZES}, sinks={SINKS}, slack={SLACK}, store='int4')", spec)
        )

    def kept(self, spec: dk.CacheSpec, layer: int, query: int, first: int) -> dict[int, int]:
        size = SIZES[layer]
        seen = {t: t + max(0, query - size - SINKS + 1) for t in range(min(SINKS, query + 1))}
        seen.update({t: t for t in range(max(0, query - size + 1), query + 1)})
        return seen

    def round_trip(self, x: Tensor) -> Tensor:
        q, scale = int4_quantise(x.double())
        return (q * scale.float().double()).to(x.dtype)

    def rollback(self, spec: dk.CacheSpec) -> int | None:
        return SLACK

    def nbytes(self, spec: dk.CacheSpec) -> int:
        slots = sum(SINKS + size + SLACK - 1 for size in SIZES)
        return 2 * spec.batch_size * slots * spec.n_kv_heads * (spec.head_dim // 2 + 4)


class SlotsInOrderOnly(Int4Storage):
    """A storage that writes slots in order only, the same for every row."""

    write_at = None  # type: ignore[assignment]  # None: not implemented (typing's rule for protocols)


class SlotsInOrderOnlyCache(PreallocatedKVCache):
    storage = SlotsInOrderOnly  # type: ignore[assignment]


class InOrderPlugin:
    @dk.hookimpl
    def register_cache_backends(self, register: dk.hookspecs.Registrar) -> None:
        register("in_order", SlotsInOrderOnlyCache, description="test-only: slots in order, no write_at")


def test_a_storage_without_write_at_is_refused_naming_store() -> None:
    """A window writes each row of a ragged batch to slots of its own; a storage that cannot is refused up front."""
    plugin = InOrderPlugin()
    dk.register_plugin(plugin, name="test-in-order")
    spec = dk.CacheSpec(n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8, batch_size=2, capacity=64)
    try:
        with pytest.raises(dk.ParameterError) as exc:
            dk.create_cache("window(size=8, store='in_order')", spec)
    finally:
        dk.unregister_plugin(plugin)
    assert str(exc.value) == (
        "cache window: store='in_order' is invalid: its storage cannot write each row to slots of its own (write_at), "
        "which rows of different prompt lengths need; allowed: a storage with write_at (gqa, dense, int8)"
    )


def test_int4_window_is_an_eighth_of_float32_plus_scales() -> None:
    spec = dk.CacheSpec(n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8, batch_size=1, capacity=64)
    int4 = WindowCache(spec, WindowParams(size=16, sinks=4, store="int4"))
    fp32 = WindowCache(spec, WindowParams(size=16, sinks=4))
    assert int4.nbytes / fp32.nbytes == (8 // 2 + 4) / (8 * 4)


@torch.no_grad()
def test_a_model_streams_through_window_over_int4() -> None:
    torch.manual_seed(0)
    config = GPTConfig(vocab_size=17, block_size=16, n_layer=2, n_head=4, n_kv_head=2, n_embd=32)
    model = GPT(dataclasses.replace(config, position="rope")).eval()
    out = dk.generate(model, [[1, 2, 3]], cache="window(size=8, sinks=2, store='int4')", max_new_tokens=50)
    assert len(out.tokens[0]) == 50  # past the 16-position context
