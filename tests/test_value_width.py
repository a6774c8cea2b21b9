"""`CacheSpec.value_dim`: values of another width than the keys (DeepSeek's latent attention caches latents of
`kv_lora_rank` dims as keys and rotary keys of `qk_rope_head_dim` as values). Every storage allocates, checks and
counts values by it; None is `head_dim`, as before."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from decodekit_cache_int8.storage import Int8Storage

import decodekit as dk
from decodekit.storage import FloatStorage
from tinymodels import int8_round_trip

# 2 layers, 2 rows, 4 heads over 2 kv-heads, keys of 8 dims, values of 3
SPEC = dk.CacheSpec(n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8, batch_size=2, capacity=6, value_dim=3)


def fed(tokens: int, width: int, seed: int) -> torch.Tensor:
    return torch.randn(2, 2, tokens, width, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize(
    ("cache", "stored", "heads", "nbytes"),
    [
        ("dense", lambda x: x, 4, 2 * 2 * 6 * 4 * (8 + 3) * 4),  # every head repeated, float32
        ("gqa", lambda x: x, 2, 2 * 2 * 6 * 2 * (8 + 3) * 4),
        ("int8", int8_round_trip, 2, 2 * 2 * 6 * 2 * (8 + 4 + 3 + 4)),  # int8 entries and a float32 scale each
    ],
)
def test_values_of_another_width_are_stored_and_read_back(cache: str, stored, heads: int, nbytes: int) -> None:  # type: ignore[no-untyped-def]
    """A prompt of 4 then a token: `update` returns every key (8 dims) and value (3 dims) fed, as the storage keeps
    them, each kv-head repeated to `heads`; the bytes are the hand-worked formula's."""
    kv = dk.create_cache(cache, SPEC)
    assert kv.nbytes == nbytes  # type: ignore[attr-defined]
    for layer in range(2):
        k0, v0, k1, v1 = fed(4, 8, layer), fed(4, 3, 10 + layer), fed(1, 8, 20 + layer), fed(1, 3, 30 + layer)
        kv.update(layer, k0, v0)
        keys, values = kv.update(layer, k1, v1)
        want_k, want_v = (stored(torch.cat(pair, 2)).repeat_interleave(heads // 2, 1) for pair in ((k0, k1), (v0, v1)))
        assert keys.shape == (2, heads, 5, 8) and values.shape == (2, heads, 5, 3)
        torch.testing.assert_close(keys, want_k, rtol=0, atol=1e-6)
        torch.testing.assert_close(values, want_v, rtol=0, atol=1e-6)


@pytest.mark.parametrize("storage", [FloatStorage, Int8Storage])
def test_values_of_another_width_written_to_slots_of_their_own(storage) -> None:  # type: ignore[no-untyped-def]
    """`write_at` (the scored caches' per-head slots): row 0 kv-head 1 writes its two tokens to slots 3 and 0."""
    store = storage(SPEC, [4, 4])
    k, v = fed(2, 8, 0), fed(2, 3, 1)
    index = torch.tensor([[[0, 1], [3, 0]], [[2, 3], [1, 2]]])  # [B, H_kv, T]
    store.write_at(1, index, k, v)
    keys, values = store.read(1, 0, 4)
    round_trip = int8_round_trip if storage is Int8Storage else (lambda x: x)
    torch.testing.assert_close(values[0, 1, [3, 0]], round_trip(v)[0, 1], rtol=0, atol=1e-6)
    torch.testing.assert_close(keys[1, 0, [2, 3]], round_trip(k)[1, 0], rtol=0, atol=1e-6)


@pytest.mark.parametrize("cache", ["dense", "gqa", "int8", "window(size=4)", "h2o(budget=4, recent=0, sinks=0)"])
@pytest.mark.parametrize(
    ("value_dim", "width", "allowed"),
    [(3, 8, "value_dim=None"), (None, 3, "value_dim=3"), (3, 4, "value_dim=4")],
)
def test_values_of_a_width_the_spec_does_not_state_are_refused_naming_value_dim(
    cache: str, value_dim: int | None, width: int, allowed: str
) -> None:
    """A model that feeds values of another width than its `ModelSpec` states: a ParameterError naming value_dim
    and the width fed at the layer's first write (a torch shape error deep in the copy before, or none)."""
    spec = dk.CacheSpec(
        n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8, batch_size=2, capacity=6, value_dim=value_dim, max_positions=6
    )
    kv = dk.create_cache(cache, spec)
    with pytest.raises(
        dk.ParameterError,
        match=rf"value_dim={value_dim} is invalid: .*values of {width} dims.*"
        rf"allowed: {allowed}",
    ):
        kv.update(0, fed(2, 8, 0), fed(2, width, 1))


@pytest.mark.parametrize("value", [0, -1, True, 2.5, "3"])
def test_a_value_dim_that_is_no_width_is_refused(value: Any) -> None:  # Any: the run-time check refuses it
    for make in (
        lambda: dk.CacheSpec(
            n_layers=1, n_heads=1, n_kv_heads=1, head_dim=8, batch_size=1, capacity=1, value_dim=value
        ),
        lambda: dk.ModelSpec(
            n_layers=1, n_heads=1, n_kv_heads=1, head_dim=8, vocab_size=5, max_positions=4, value_dim=value
        ),
    ):
        with pytest.raises(
            dk.ParameterError,
            match=rf"value_dim={value!r} is invalid; allowed: None \(head_dim\) or an "
            "integer >= 1",
        ):
            make()  # type: ignore[no-untyped-call]


def test_for_model_carries_value_dim() -> None:
    model = dk.ModelSpec(n_layers=1, n_heads=4, n_kv_heads=1, head_dim=8, vocab_size=5, max_positions=4, value_dim=3)
    spec = dk.CacheSpec.for_model(model, batch_size=1, capacity=4)
    assert (spec.value_dim, spec.value_width) == (3, 3)
    assert (
        dk.CacheSpec.for_model(
            model.__class__(**{**model.__dict__, "value_dim": None}), batch_size=1, capacity=4
        ).value_width
        == 8
    )


def test_the_refusal_reads_as_docs_caches_md_shows_it() -> None:
    kv = dk.create_cache("gqa", SPEC)
    with pytest.raises(dk.ParameterError) as refused:
        kv.update(0, fed(2, 8, 0), fed(2, 8, 1))
    assert str(refused.value) == (
        "ModelSpec: value_dim=3 is invalid: the model's layer 0 fed cache.update values of 8 dims ([B, H_kv, T, "
        "value_dim]), keys of head_dim=8; allowed: value_dim=None, as the model feeds them (None: head_dim)"
    )
