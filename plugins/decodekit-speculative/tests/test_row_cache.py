"""`crop_rows` on the standard backends: each row keeps its own prefix, right-aligned, by hand-worked slots."""

from __future__ import annotations

import pytest
import torch

import decodekit as dk


@pytest.mark.parametrize("backend", ["dense", "gqa"])
def test_crop_rows_moves_each_row(backend: str) -> None:
    spec = dk.CacheSpec(n_layers=2, n_heads=2, n_kv_heads=2, head_dim=1, batch_size=2, capacity=8)
    cache = dk.create_cache(backend, spec)
    # slot s of row b holds 10 b + s in every layer, keys and values
    k = (torch.arange(6.0) + torch.tensor([[0.0], [10.0]])).view(2, 1, 6, 1).expand(2, 2, 6, 1)
    for layer in range(2):
        cache.update(layer, k, k + 100)
    assert isinstance(cache, dk.cache.RowCroppable)
    cache.crop_rows([3, 5], 4)  # row 0 keeps slots 0..2, row 1 slots 0..4; both end at slot 4
    assert cache.length == 4
    keys, values = cache.update(1, k[:, :, :0], k[:, :, :0])
    assert keys[0, 0, 1:, 0].tolist() == [0.0, 1.0, 2.0]  # row 0 moved right by one (slot 0 is padding now)
    assert keys[1, 0, :, 0].tolist() == [11.0, 12.0, 13.0, 14.0]  # row 1 moved left by one (its slot 0 dropped)
    assert values[1, 0, :, 0].tolist() == [111.0, 112.0, 113.0, 114.0]
    cache.crop_rows([2, 2], 2)  # equal ends: a plain crop
    assert cache.length == 2
    with pytest.raises(dk.ParameterError, match="crop_rows: ends=\\[3, 9\\], length=2 are invalid"):
        cache.crop_rows([3, 9], 2)
