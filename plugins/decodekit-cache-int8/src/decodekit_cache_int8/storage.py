"""`Int8Storage`: symmetric int8 keys and values, one float32 scale per (row, head, token).

`x ≈ q · s` with `s = max|x| / 127` over the head's `D` channels and `q = round(x / s)`, so
the error of each entry is at most `s / 2`. Per-token scales are the vector-wise scheme of
LLM.int8() (Dettmers et al. 2022) and ZeroQuant (Yao et al. 2022) applied to the cache;
KIVI (Liu et al. 2024) quantises keys per channel instead, because a few key channels
carry outliers, which matters at 2 bits; at 8 bits the per-token error is already small
(docs/caches.md has the measured loss), and a token's scale is final when it is written,
so no float residual of recent tokens is kept. Bytes per token and head: `2 · (D + 4)`,
against `2 · 4 · D` in float32 (0.29x for D = 24, 0.26x for D = 64); values of another width
(`CacheSpec.value_dim`): `D + 4 + value_dim + 4`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from decodekit.cache import PreallocatedKVCache
from decodekit.spec import CacheSpec
from decodekit.storage import check_keys, take_slots

__all__ = ["Int8Cache", "Int8Storage", "dequantise", "quantise"]


def quantise(x: Tensor) -> tuple[Tensor, Tensor]:
    """`q` int8 `[..., D]` and `s` float32 `[..., 1]` with `x ≈ q · s`, `|x - q·s| <= s / 2`."""
    x = x.float()
    scale = x.abs().amax(-1, keepdim=True) / 127
    # an all-zero vector stays exact; a NaN scale stays NaN, so a NaN key is NaN read back, as in a float cache
    scale = torch.where(scale != 0, scale, torch.ones_like(scale))
    return (x / scale).round_().clamp_(-127, 127).to(torch.int8), scale


def dequantise(q: Tensor, scale: Tensor, dtype: torch.dtype) -> Tensor:
    return (q.float() * scale).to(dtype)


class Int8Storage:
    """Per layer: `q` int8 `[B, H_kv, slots, D]` and `scale` float32 `[B, H_kv, slots, 1]`, for keys and values
    (values `spec.value_width` wide)."""

    def __init__(self, spec: CacheSpec, slots: Sequence[int]) -> None:
        self.spec = spec
        B = spec.batch_size

        def q(n: int, heads: int, width: int) -> Tensor:
            return torch.zeros(B, heads, n, width, dtype=torch.int8, device=spec.device)

        def s(n: int, heads: int) -> Tensor:
            return torch.ones(B, heads, n, 1, dtype=torch.float32, device=spec.device)

        # k, k scale, v, v scale; each layer's shape (`spec.layer_shape`)
        shapes = [spec.layer_shape(layer) for layer in range(len(slots))]
        self.tensors = [[q(n, h, d), s(n, h), q(n, h, w), s(n, h)] for n, (h, d, w) in zip(slots, shapes)]

    @property
    def heads(self) -> int:
        return self.spec.n_kv_heads

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for layer in self.tensors for t in layer)

    def write(self, layer: int, start: int, k: Tensor, v: Tensor) -> None:
        if start == 0:  # a layer's first write: checked once
            check_keys(self.spec, layer, k, v)
        end = start + k.shape[2]
        kq, ks, vq, vs = self.tensors[layer]
        for x, q, s in ((k, kq, ks), (v, vq, vs)):
            xq, xs = quantise(x)
            q[:, :, start:end].copy_(xq)
            s[:, :, start:end].copy_(xs)

    def write_at(self, layer: int, index: Tensor, k: Tensor, v: Tensor) -> None:
        """Store `k`, `v` `[B, H_kv, T, D]` in slots `index` `[B, H_kv, T]` (each row and head its own)."""
        kq, ks, vq, vs = self.tensors[layer]
        where = index.unsqueeze(-1)  # [B, H, T, 1]
        for x, q, s in ((k, kq, ks), (v, vq, vs)):
            xq, xs = quantise(x)
            q.scatter_(2, where.expand(-1, -1, -1, xq.shape[-1]), xq)
            s.scatter_(2, where, xs)

    def read(self, layer: int, start: int, stop: int) -> tuple[Tensor, Tensor]:
        kq, ks, vq, vs = self.tensors[layer]
        dtype = self.spec.dtype
        return (
            dequantise(kq[:, :, start:stop], ks[:, :, start:stop], dtype),
            dequantise(vq[:, :, start:stop], vs[:, :, start:stop], dtype),
        )

    def reorder(self, index: Tensor, stop: int) -> None:
        index = index.to(self.spec.device)
        for layer in self.tensors:
            for t in layer:
                t[:, :, :stop] = t[:, :, :stop].index_select(0, index)

    def take_slots(self, source: Tensor, stop: int) -> None:
        """Slot `s` of row `b` becomes old slot `source[b, s]`: codes and scales move together."""
        take_slots([t for layer in self.tensors for t in layer], source, stop)


class Int8Cache(PreallocatedKVCache):
    """Every token, in int8 (`Int8Storage`); `update` hands out dequantised keys and values."""

    storage = Int8Storage
