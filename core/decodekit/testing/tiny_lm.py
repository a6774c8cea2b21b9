"""`TinyLM`: the kit's own small language model, so a plugin's tests need no model distribution.

A decoder of `n_layers` blocks (pre-norm attention with rotary or learned positions and
grouped-query heads, then an MLP), random weights from a seed. It speaks the model protocol,
`model(input_ids [B, T], positions [B, T], cache) -> logits [B, T, V]`, with padding marked by
negative positions, through any cache or none, so the strategy and cache checks can decode with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from decodekit.cache import KVCache, cached_attention, slot_mask
from decodekit.rope import apply_rope, rope_angles
from decodekit.spec import ModelSpec

__all__ = ["Letters", "TinyLM"]


class Letters:
    """Token i is the letter chr(97 + i % 26): a tokenizer for any vocabulary size."""

    def __init__(self, vocab_size: int) -> None:
        self.vocab_size = vocab_size

    def encode(self, text: str) -> list[int]:
        return [(ord(c) - 97) % 26 % self.vocab_size for c in text]

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(chr(97 + i % 26) for i in ids)


class _Block(nn.Module):
    def __init__(self, dim: int, n_heads: int, n_kv_heads: int) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = n_heads, n_kv_heads, dim // n_heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, (n_heads + 2 * n_kv_heads) * self.head_dim)
        self.out = nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(
        self, x: Tensor, layer: int, positions: Tensor, cache: KVCache | None, rope: tuple[Tensor, Tensor] | None
    ) -> Tensor:
        B, T, C = x.shape
        H, H_kv = self.n_heads, self.n_kv_heads
        # [B, H + 2 H_kv, T, D]: query heads, key heads, value heads
        qkv = self.qkv(self.norm1(x)).view(B, T, H + 2 * H_kv, self.head_dim).transpose(1, 2)
        q, k, v = qkv.split([H, H_kv, H_kv], dim=1)
        if rope is not None:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        if cache is None:
            mask = slot_mask(torch.arange(T, device=x.device), positions, 0)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=H_kv != H)
        else:  # through cached_attention: a cache that scores by attention (h2o, tova, snapkv) is handed the queries
            k, v = cache.update(layer, k, v)
            y = cached_attention(cache, layer, q, k.to(q.dtype), v.to(q.dtype), positions)
        x = x + self.out(y.transpose(1, 2).reshape(B, T, C))
        out: Tensor = x + self.mlp(self.norm2(x))
        return out


class TinyLM(nn.Module):
    """A small random-weight decoder speaking the model protocol (see the module docstring)."""

    def __init__(
        self,
        vocab_size: int = 64,
        *,
        dim: int = 16,
        n_layers: int = 2,
        n_heads: int = 2,
        n_kv_heads: int | None = None,
        max_positions: int = 64,
        position: Literal["rope", "learned"] = "rope",
        seed: int = 0,
    ) -> None:
        super().__init__()
        generator_state = torch.random.get_rng_state()
        torch.manual_seed(seed)
        self.position = position
        kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        self.spec = ModelSpec(
            n_layers=n_layers,
            n_heads=n_heads,
            n_kv_heads=kv_heads,
            head_dim=dim // n_heads,
            vocab_size=vocab_size,
            max_positions=max_positions,
            rope_base=10000.0 if position == "rope" else None,
        )
        self.embed = nn.Embedding(vocab_size, dim)
        self.wpe = nn.Embedding(max_positions, dim) if position == "learned" else None
        self.blocks = nn.ModuleList(_Block(dim, n_heads, kv_heads) for _ in range(n_layers))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab_size, bias=False)
        torch.random.set_rng_state(generator_state)  # building a model leaves the caller's stream alone
        self.eval()

    def forward(self, input_ids: Tensor, positions: Tensor, cache: KVCache | None = None) -> Tensor:
        real = positions.clamp(min=0)  # [B, T]: padding sits at position 0, masked anyway
        x = self.embed(input_ids)
        rope = None
        if self.wpe is not None:
            x = x + self.wpe(real.clamp(max=self.spec.max_positions - 1))
        else:
            rope = rope_angles(real, self.spec.head_dim, 10000.0)
        for layer, block in enumerate(self.blocks):
            x = block(x, layer, positions, cache, rope)
        out: Tensor = self.head(self.norm(x))
        return out
