"""The reference GPT: learned or rotary positions, causal attention, optional GQA/MQA.

It speaks the model protocol: ``model(input_ids [B, T], positions [B, T], cache) -> logits [B, T, V]``.
Positions carry the padding: the decode loop left-pads ragged prompts and gives
padding tokens negative positions, so row ``b``'s first real token sits in slot
``slot - position`` and the attention mask follows from ``positions`` alone.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from decodekit.cache import KVCache
from decodekit.errors import ContextLengthError, ParameterError
from decodekit.spec import ModelSpec

__all__ = ["GPT", "GPTConfig", "apply_rope", "attention_mask", "rope_angles"]


@dataclass(frozen=True)
class GPTConfig:
    """Shape of a reference GPT. `n_kv_head=None` means one kv-head per head (MHA); 1 is MQA.

    `position="learned"` adds GPT-2's learned position embeddings; `"rope"` rotates queries and
    keys instead (RoFormer, Su et al. 2021; the rotate-half layout of GPT-NeoX and Llama) with
    frequencies `rope_base ** (-2i / head_dim)`.
    """

    vocab_size: int = 50257
    block_size: int = 1024
    n_layer: int = 12
    n_head: int = 12
    n_kv_head: int | None = None
    n_embd: int = 768
    bias: bool = True
    dropout: float = 0.0
    layer_norm_epsilon: float = 1e-5
    position: Literal["learned", "rope"] = "learned"
    rope_base: float = 10000.0

    def __post_init__(self) -> None:
        if self.position not in ("learned", "rope"):
            raise ParameterError(f"GPTConfig: position={self.position!r} is invalid; allowed: 'learned' or 'rope'")
        if self.position == "rope" and self.head_dim % 2 != 0:
            raise ParameterError(f"GPTConfig: head_dim={self.head_dim} is invalid with rope; allowed: an even number")
        if self.n_embd % self.n_head != 0:
            raise ParameterError(
                f"GPTConfig: n_embd={self.n_embd} is invalid; allowed: a multiple of n_head={self.n_head}"
            )
        if self.kv_heads < 1 or self.n_head % self.kv_heads != 0:
            raise ParameterError(
                f"GPTConfig: n_kv_head={self.n_kv_head} is invalid; allowed: a divisor of n_head={self.n_head}"
            )

    @property
    def kv_heads(self) -> int:
        return self.n_head if self.n_kv_head is None else self.n_kv_head

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def attention_mask(positions: Tensor, offset: int) -> Tensor:
    """Boolean mask `[B, 1, T, offset + T]`: which cache slots each new query may attend to.

    Query `i` of row `b` sits in slot `offset + i` at position `positions[b, i]`, so the
    row's position 0 is in slot `offset + i - positions[b, i]`; slots before it are padding.
    A padding query (negative position) sees only itself, so no softmax row is empty.
    """
    T = positions.shape[1]
    q_slots = torch.arange(offset, offset + T, device=positions.device)  # [T]
    slots = torch.arange(offset + T, device=positions.device)  # [S]
    first = (q_slots - positions).unsqueeze(-1)  # [B, T, 1]
    mask = (slots >= first) & (slots <= q_slots[:, None])  # [B, T, S]
    mask |= slots == q_slots[:, None]
    return mask.unsqueeze(1)


def rope_angles(positions: Tensor, head_dim: int, base: float) -> tuple[Tensor, Tensor]:
    """`cos`, `sin` `[B, 1, T, head_dim]` of the rotary angles `position · base^(-2i/head_dim)`."""
    inv_freq = base ** (-torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float32) / head_dim)
    angles = positions.to(torch.float32).unsqueeze(-1) * inv_freq  # [B, T, D/2]
    angles = torch.cat([angles, angles], dim=-1).unsqueeze(1)  # [B, 1, T, D]
    return angles.cos(), angles.sin()


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate `x` `[B, H, T, D]` by the angles: pairs `(x_i, x_{i+D/2})` turn as 2-d vectors."""
    x1, x2 = x.chunk(2, dim=-1)
    rotated = torch.cat([-x2, x1], dim=-1)
    return (x * cos + rotated * sin).to(x.dtype)


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig, layer: int) -> None:
        super().__init__()
        self.layer = layer
        self.n_head = config.n_head
        self.n_kv_head = config.kv_heads
        self.head_dim = config.head_dim
        kv_dim = self.n_kv_head * self.head_dim
        # Fused projection laid out [q | k | v], as GPT-2's c_attn is for MHA.
        self.c_attn = nn.Linear(config.n_embd, config.n_embd + 2 * kv_dim, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = config.dropout

    def forward(
        self, x: Tensor, mask: Tensor | None, cache: KVCache | None, rope: tuple[Tensor, Tensor] | None = None
    ) -> Tensor:
        B, T, C = x.shape
        kv_dim = self.n_kv_head * self.head_dim
        q, k, v = self.c_attn(x).split([C, kv_dim, kv_dim], dim=2)
        q = q.view(B, T, self.n_head, self.head_dim).transpose(1, 2)  # [B, H, T, D]
        k = k.view(B, T, self.n_kv_head, self.head_dim).transpose(1, 2)  # [B, H_kv, T, D]
        v = v.view(B, T, self.n_kv_head, self.head_dim).transpose(1, 2)
        if rope is not None:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        if cache is not None:
            k, v = cache.update(self.layer, k, v)  # [B, H_kv or H, S, D]
        y = F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=mask,
            dropout_p=self.dropout if self.training else 0.0,
            is_causal=mask is None,
            enable_gqa=k.shape[1] != self.n_head,
        )
        out: Tensor = self.c_proj(y.transpose(1, 2).reshape(B, T, C))
        return out


class MLP(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: Tensor) -> Tensor:
        # GPT-2's "gelu_new" is the tanh approximation.
        out: Tensor = self.dropout(self.c_proj(F.gelu(self.c_fc(x), approximate="tanh")))
        return out


class Block(nn.Module):
    def __init__(self, config: GPTConfig, layer: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon, bias=config.bias)
        self.attn = CausalSelfAttention(config, layer)
        self.ln_2 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon, bias=config.bias)
        self.mlp = MLP(config)

    def forward(
        self, x: Tensor, mask: Tensor | None, cache: KVCache | None, rope: tuple[Tensor, Tensor] | None = None
    ) -> Tensor:
        x = x + self.attn(self.ln_1(x), mask, cache, rope)
        out: Tensor = x + self.mlp(self.ln_2(x))
        return out


class GPT(nn.Module):
    """A GPT-2-style decoder with tied input/output embeddings; it has no weights of its own."""

    supports_last_only = True  # forward(..., last_only=True) projects only the last column

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd) if config.position == "learned" else None
        self.drop = nn.Dropout(config.dropout)
        self.h = nn.ModuleList(Block(config, layer) for layer in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon, bias=config.bias)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying
        self.apply(self._init_weights)
        # GPT-2's scaled init of the residual projections: std 0.02 / sqrt(2 * n_layer).
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    @property
    def spec(self) -> ModelSpec:
        c = self.config
        return ModelSpec(
            n_layers=c.n_layer,
            n_heads=c.n_head,
            n_kv_heads=c.kv_heads,
            head_dim=c.head_dim,
            vocab_size=c.vocab_size,
            max_positions=c.block_size,
        )

    def forward(
        self,
        input_ids: Tensor,
        positions: Tensor | None = None,
        cache: KVCache | None = None,
        *,
        last_only: bool = False,
    ) -> Tensor:
        """Logits `[B, T, V]` for `input_ids` `[B, T]` at `positions` `[B, T]` (negative: padding).

        `positions=None` (training, no cache) means unpadded rows at positions `0..T-1`,
        served by the plain causal kernel. `last_only=True` returns `[B, 1, V]`, the logits of
        the last column only (what a prefill needs).
        """
        offset = 0 if cache is None else cache.length
        T = input_ids.shape[1]
        if offset + T > self.config.block_size:
            raise ContextLengthError(
                f"GPT: {offset + T} tokens (cached {offset} + new {T}) exceed the context of "
                f"block_size={self.config.block_size}"
            )
        if positions is None:
            if cache is not None:
                raise ParameterError("GPT: positions=None is only allowed without a cache")
            mask = None
            real = torch.arange(T, device=input_ids.device).unsqueeze(0)  # [1, T]
        else:
            mask = attention_mask(positions, offset)
            real = positions.clamp(min=0)
        x = self.wte(input_ids)
        rope = None
        if self.wpe is not None:
            x = x + self.wpe(real)
        else:
            rope = rope_angles(real, self.config.head_dim, self.config.rope_base)
        x = self.drop(x)
        for block in self.h:
            x = block(x, mask, cache, rope)
        if last_only:
            x = x[:, -1:]  # [B, 1, C]: the caller reads only the last column
        out: Tensor = self.lm_head(self.ln_f(x))
        return out
