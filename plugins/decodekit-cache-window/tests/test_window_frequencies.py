"""The window moves each layer's sinks by that layer's own rotary frequencies (`CacheSpec.frequencies`): layers of one
size share the sinks' turn only where their frequencies agree."""

from __future__ import annotations

import math

import torch

import decodekit as dk

FREQS = ((1.0, 0.5), (0.3,))  # layer 0 turns both pairs of its head of 4, layer 1 the first two dims only


def moved(key: list[float], shift: int, freqs: tuple[float, ...]) -> list[float]:
    """`key` turned by hand, in float64: pair `(i, i + n)` by `shift · freqs[i]`, the dims past `2n` as they are."""
    n, out = len(freqs), list(key)
    for i, f in enumerate(freqs):
        c, s = math.cos(shift * f), math.sin(shift * f)
        out[i], out[i + n] = key[i] * c - key[i + n] * s, key[i + n] * c + key[i] * s
    return out


@torch.no_grad()
def test_each_layer_moves_its_sinks_by_its_own_frequencies() -> None:
    """Before `rope_frequencies` every layer turned by one base; a turn shared by layers of one size would give layer
    1 the angles of layer 0."""
    spec = dk.CacheSpec(
        n_layers=2, n_heads=1, n_kv_heads=1, head_dim=4, batch_size=1, capacity=1, dtype=torch.float64,
        max_positions=64, rope_frequencies=FREQS,
    )  # fmt: skip
    cache = dk.create_cache("window(size=2, sinks=1, slack=1)", spec)
    keys = torch.randn(2, 12, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    for t in range(12):
        for layer in range(2):
            k = keys[layer, t].reshape(1, 1, 1, 4)
            out, _ = cache.update(layer, k, k.clone())  # type: ignore[attr-defined]
            cache.attention_mask(layer, torch.tensor([[t]]))  # type: ignore[attr-defined]
            want = moved(keys[layer, 0].tolist(), max(0, t - 2), FREQS[layer])  # past size + sinks - 1 = 2
            torch.testing.assert_close(out[0, 0, 0], torch.tensor(want, dtype=torch.float64), atol=1e-6, rtol=0)
