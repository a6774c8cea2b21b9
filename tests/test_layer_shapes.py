"""`CacheSpec.layer_shapes`: layers that cache other shapes (Gemma 4's full-attention layers wider keys than its
sliding ones, fewer kv-heads under `attention_k_eq_v`; MiMo-V2-Flash's sliding layers twice the kv-heads). Every
standard storage allocates, checks and counts each layer in its own shape; None is every layer as the scalar fields
say, as before."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from decodekit_cache_int8.storage import Int8Storage

import decodekit as dk
from decodekit.storage import FloatStorage
from tinymodels import int8_round_trip

# 2 layers, 2 rows, 4 heads; layer 0: 2 kv-heads, keys of 8 dims, values of 8; layer 1: 1 kv-head, 16 and 12
SHAPES = ((2, 8, 8), (1, 16, 12))
SPEC = dk.CacheSpec(n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8, batch_size=2, capacity=6, layer_shapes=SHAPES)


def fed(heads: int, tokens: int, width: int, seed: int) -> torch.Tensor:
    return torch.randn(2, heads, tokens, width, generator=torch.Generator().manual_seed(seed))


def identity(x: torch.Tensor) -> torch.Tensor:
    return x


@pytest.mark.parametrize(
    ("cache", "stored", "repeated", "nbytes"),
    [
        # rows · slots · (layer 0 + layer 1) · float32; dense repeats every kv-head to the 4 heads
        ("dense", identity, True, 2 * 6 * (4 * (8 + 8) + 4 * (16 + 12)) * 4),
        ("gqa", identity, False, 2 * 6 * (2 * (8 + 8) + 1 * (16 + 12)) * 4),
        # int8 entries and a float32 scale per key and per value
        ("int8", int8_round_trip, False, 2 * 6 * (2 * (8 + 4 + 8 + 4) + 1 * (16 + 4 + 12 + 4))),
    ],
)
def test_each_layer_is_stored_and_read_back_in_its_shape(
    cache: str, stored: Callable[[torch.Tensor], torch.Tensor], repeated: bool, nbytes: int
) -> None:
    """A prompt of 4 then a token on each layer: `update` returns every key and value fed, in the layer's shape, as
    the storage keeps them (dense: each kv-head repeated to the 4 heads); the bytes are the hand-worked formula's."""
    kv = dk.create_cache(cache, SPEC)
    assert kv.nbytes == nbytes  # type: ignore[attr-defined]
    for layer, (h, d, w) in enumerate(SHAPES):
        k0, v0, k1, v1 = fed(h, 4, d, layer), fed(h, 4, w, 10 + layer), fed(h, 1, d, 20 + layer), fed(h, 1, w, 30)
        kv.update(layer, k0, v0)
        keys, values = kv.update(layer, k1, v1)
        heads = 4 if repeated else h
        want_k, want_v = (stored(torch.cat(pair, 2)).repeat_interleave(heads // h, 1) for pair in ((k0, k1), (v0, v1)))
        assert keys.shape == (2, heads, 5, d) and values.shape == (2, heads, 5, w)
        torch.testing.assert_close(keys, want_k, rtol=0, atol=1e-6)
        torch.testing.assert_close(values, want_v, rtol=0, atol=1e-6)


@pytest.mark.parametrize("storage", [FloatStorage, Int8Storage])
def test_a_layer_of_its_own_shape_written_to_slots_of_their_own(storage: type) -> None:
    """`write_at` on layer 1 (one kv-head of 16, values of 12): row 0 writes its two tokens to slots 3 and 0."""
    store = storage(SPEC, [4, 4])
    k, v = fed(1, 2, 16, 0), fed(1, 2, 12, 1)
    index = torch.tensor([[[3, 0]], [[1, 2]]])  # [B, H_kv, T]
    store.write_at(1, index, k, v)
    keys, values = store.read(1, 0, 4)
    round_trip = int8_round_trip if storage is Int8Storage else identity
    torch.testing.assert_close(keys[0, 0, [3, 0]], round_trip(k)[0, 0], rtol=0, atol=1e-6)
    torch.testing.assert_close(values[1, 0, [1, 2]], round_trip(v)[1, 0], rtol=0, atol=1e-6)


@pytest.mark.parametrize("cache", ["dense", "gqa", "int8", "window(size=4)"])
def test_a_layer_that_feeds_another_shape_is_refused_naming_its_layer_shape(cache: str) -> None:
    """Layer 1 fed layer 0's shape: a ParameterError naming layer_shapes[1] and the shape fed, at the layer's first
    write (the float storage's copy failed with a torch shape error before, or the scalars' check passed it)."""
    spec = dk.CacheSpec(**{**SPEC.__dict__, "max_positions": 6})
    kv = dk.create_cache(cache, spec)
    kv.update(0, fed(2, 2, 8, 0), fed(2, 2, 8, 1))
    with pytest.raises(dk.ParameterError) as refused:
        kv.update(1, fed(2, 2, 8, 2), fed(2, 2, 8, 3))
    assert str(refused.value) == (
        "ModelSpec: layer_shapes[1]=(1, 16, 12) is invalid: the model's layer 1 fed cache.update keys of 2 kv-heads "
        "of 8 dims and values of 8 ((kv-heads, head_dim, value width)); allowed: layer_shapes[1]=(2, 8, 8), as the "
        "model feeds them"
    )


@pytest.mark.parametrize("cache", ["h2o", "tova", "snapkv", "knorm", "streaming"])
def test_a_scored_cache_holds_each_layer_in_its_shape(cache: str) -> None:
    """Refused at creation until 2026-12-06 (`layer_shapes=... is invalid`). A prompt of 4 then a token on each layer:
    `update` returns its `budget + 4·slack` slots in the layer's shape (the prompt: and its own 4), the mask its
    queries' own; the bytes are rows · slots · (layer 0 + layer 1) · float32. What each layer keeps:
    decodekit-cache-scored's test_layer_shapes.py."""
    kv: Any = dk.create_cache(f"{cache}(budget=16)", SPEC)  # slack 8: 48 slots
    assert kv.nbytes == 2 * 48 * (2 * (8 + 8) + 1 * (16 + 12)) * 4
    for T, first, S in ((4, 0, 48 + 4), (1, 4, 48)):
        for layer, (h, d, w) in enumerate(SHAPES):
            keys, values = kv.update(layer, fed(h, T, d, layer), fed(h, T, w, 10 + layer))
            mask = kv.attention_mask(layer, torch.arange(first, first + T).expand(2, T))
            assert keys.shape == (2, h, S, d) and values.shape == (2, h, S, w)
            assert mask.shape == (2, 4, T, S)
            if hasattr(kv, "observe"):
                kv.observe(layer, fed(4, T, d, 20 + layer))


@pytest.mark.parametrize(
    "shapes",
    [
        ((2, 8, 8),),  # one layer's, of two
        [(2, 8, 8), (1, 16, 12)],  # a list
        ((2, 8, 8), (3, 16, 12)),  # 3 kv-heads do not divide 4 heads
        ((2, 8, 8), (1, 0, 12)),
        ((2, 8, 8), (1, 16, True)),
        ((2, 8, 8), (1, 16)),
        ((2, 8, 8), (1, 16.0, 12)),
    ],
)
def test_layer_shapes_that_are_no_shapes_are_refused(shapes: Any) -> None:  # Any: the run-time check refuses it
    allowed = (
        r"allowed: None \(every layer as n_kv_heads, head_dim and value_dim say\) or n_layers=2 \(kv-heads, head_dim, "
        r"value width\) tuples of integers >= 1, each kv-heads a divisor of n_heads=4"
    )
    scalars: dict[str, Any] = dict(n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8)
    for owner, make in (
        ("CacheSpec", lambda: dk.CacheSpec(**scalars, batch_size=1, capacity=1, layer_shapes=shapes)),
        ("ModelSpec", lambda: dk.ModelSpec(**scalars, vocab_size=5, max_positions=4, layer_shapes=shapes)),
    ):
        with pytest.raises(dk.ParameterError, match=rf"^{owner}: layer_shapes=.* is invalid; {allowed}$"):
            make()  # type: ignore[no-untyped-call]


def test_for_model_carries_layer_shapes_and_layer_shape_reads_either_form() -> None:
    model = dk.ModelSpec(
        n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8, vocab_size=5, max_positions=4, layer_shapes=SHAPES
    )
    spec = dk.CacheSpec.for_model(model, batch_size=1, capacity=4)
    assert spec.layer_shapes == SHAPES and [spec.layer_shape(i) for i in range(2)] == list(SHAPES)
    uniform = dk.CacheSpec(n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8, batch_size=1, capacity=1, value_dim=3)
    assert [uniform.layer_shape(i) for i in range(2)] == [(2, 8, 3), (2, 8, 3)]
