"""Layers that cache other shapes (`CacheSpec.layer_shapes`: Gemma 4, MiMo-V2-Flash). A scored cache's layers are
independent but for the rows' positions, so a layer of a cache whose layers differ must be the cache of a one-layer
model of that layer's shape, fed the same: the same keys, values and mask at every step, past the context (each
layer's keys moved by its own head_dim's frequencies), through a crop and a reorder, and the same entries kept. The
layers of one shape are planned and scored together (here layers 0 and 2, with another shape between them), so the
second implementation is the per-shape cache of one layer; the Hugging Face models of those shapes are checked
against the rule itself in decodekit-hf's test_newer_architectures.py."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import decodekit as dk

SHAPES = ((2, 8, 8), (1, 16, 12), (2, 8, 8), (4, 8, 4))  # (kv-heads, head_dim, value width) of each layer
H, B, M = 4, 2, 32  # query heads, rows, context
SCHEDULE = (10, 1, 2, 1, 1, 3, 1, 1, 1, 2, 1, 1, 1, 1, 3, 1, 1, 1, 1, 2, 1, 1, 1, 1, 1, 2, 1)  # 42 tokens
CACHES = [
    "h2o",
    "tova",
    "knorm",
    "streaming",
    "snapkv(window=4, kernel=3)",
    "snapkv(window=4, kernel=3, decode='tova')",
    "h2o(store='int8')",
    "tova(store='dense')",
]


def _spec(shapes: tuple[tuple[int, int, int], ...]) -> dk.CacheSpec:
    kv_heads, head_dim, width = shapes[0]
    return dk.CacheSpec(
        n_layers=len(shapes), n_heads=H, n_kv_heads=kv_heads, head_dim=head_dim, value_dim=width, batch_size=B,
        capacity=64, rope_base=100.0, max_positions=M, layer_shapes=shapes if len(set(shapes)) > 1 else None,
    )  # fmt: skip


def _made(cache: str, spec: dk.CacheSpec) -> Any:
    name, _, params = cache.partition("(")
    more = f", {params[:-1]}" if params else ""
    return dk.create_cache(f"{name}(budget=6, sinks=1, recent=1, slack=3{more})", spec)


@pytest.mark.parametrize("cache", CACHES)
def test_each_layer_is_the_cache_of_a_model_of_its_shape(cache: str) -> None:
    whole = _made(cache, _spec(SHAPES))
    alone = [_made(cache, _spec((shape,))) for shape in SHAPES]
    g = torch.Generator().manual_seed(0)
    pad = torch.tensor([[0], [2]])  # row 1 left-padded by 2
    fed = 0
    for step, T in enumerate(SCHEDULE):
        if step == 12:  # drafts taken back, then the rows swapped (their padding with them)
            fed, pad = fed - 2, pad[[1, 0]]
            for c in (whole, *alone):
                c.crop(fed)
                c.reorder(torch.tensor([1, 0]))
        positions = torch.arange(fed, fed + T) - pad  # negative: padding
        for layer, (kv_heads, D, width) in enumerate(SHAPES):
            k, q = torch.randn(B, kv_heads, T, D, generator=g), torch.randn(B, H, T, D, generator=g)
            v = torch.randn(B, kv_heads, T, width, generator=g)
            got = (*whole.update(layer, k, v), whole.attention_mask(layer, positions))
            want = (*alone[layer].update(0, k, v), alone[layer].attention_mask(0, positions))
            for name, x, y in zip(("keys", "values", "mask"), got, want, strict=True):
                torch.testing.assert_close(x, y, rtol=0, atol=1e-6, msg=f"step {step}, layer {layer}: {name}")
            if hasattr(whole, "observe"):
                whole.observe(layer, q)
                alone[layer].observe(0, q)
        fed += T
        for layer, one in enumerate(alone):
            assert torch.equal(whole.kept(layer), one.kept(0)), f"step {step}, layer {layer}: kept"
    assert fed > M  # past the context: the keys were moved


def test_the_layers_keep_other_entries() -> None:
    """The comparison above has the power to fail: layers 0 and 2, of one shape and planned together, fed other
    values, keep other entries."""
    whole = _made("h2o", _spec(SHAPES))
    g = torch.Generator().manual_seed(1)
    for start, T in ((0, 10), (10, 1), (11, 1)):
        positions = torch.arange(start, start + T).expand(B, T)
        for layer, (kv_heads, D, width) in enumerate(SHAPES):
            k, v = torch.randn(B, kv_heads, T, D, generator=g), torch.randn(B, kv_heads, T, width, generator=g)
            whole.update(layer, k, v)
            whole.attention_mask(layer, positions)
            whole.observe(layer, torch.randn(B, H, T, D, generator=g))
    assert not torch.equal(whole.kept(0), whole.kept(2))
