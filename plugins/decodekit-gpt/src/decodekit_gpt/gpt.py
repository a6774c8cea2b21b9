"""The reference GPT: learned or rotary positions, causal attention, optional GQA/MQA.

It speaks the model protocol: ``model(input_ids [B, T], positions [B, T], cache) -> logits [B, T, V]``.
Positions carry the padding: the decode loop left-pads ragged prompts and gives
padding tokens negative positions, so row ``b``'s first real token sits in slot
``slot - position`` and the attention mask follows from ``positions`` alone.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from decodekit.cache import KVCache, cached_attention, evicts, slot_mask
from decodekit.compiling import eager
from decodekit.errors import ContextLengthError, ParameterError
from decodekit.rope import apply_rope, rope_angles
from decodekit.spec import ModelSpec

__all__ = ["GPT", "GPTConfig", "LayerInputs", "apply_rope", "attention_mask", "rope_angles"]


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
    """Boolean mask `[B, 1, T, offset + T]` over slots `0 .. offset + T - 1` (a cache that keeps all).

    Query `i` of row `b` sits in slot `offset + i` at position `positions[b, i]`, so the
    row's position 0 is in slot `offset + i - positions[b, i]`; slots before it are padding.
    A padding query (negative position) sees only itself, so no softmax row is empty.
    """
    slots = torch.arange(offset + positions.shape[1], device=positions.device)
    return slot_mask(slots, positions, offset)


class LayerInputs(NamedTuple):
    """What every layer of one forward reads besides the hidden states."""

    mask: Tensor | None  # without a cache: the padding-aware causal mask; None: plain causal
    cache: KVCache | None  # with one, each layer writes its keys and values and asks it for a mask
    rope: tuple[Tensor, Tensor] | None  # rotary (cos, sin) at each token's position; None: learned positions
    positions: Tensor | None  # [B, T], negative at padding; None: 0..T-1 (training)


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

    def forward(self, x: Tensor, inputs: LayerInputs) -> Tensor:
        B, T, _ = x.shape
        mask, cache = inputs.mask, inputs.cache
        H, H_kv = self.n_head, self.n_kv_head
        # [B, H + 2 H_kv, T, D]: query heads, then key heads, then value heads; queries and keys are
        # rotated in one go (on a CPU a small model's forward costs what it dispatches).
        qkv = self.c_attn(x).view(B, T, H + 2 * H_kv, self.head_dim).transpose(1, 2)
        qk, v = qkv[:, : H + H_kv], qkv[:, H + H_kv :]
        if inputs.rope is not None:
            qk = apply_rope(qk, *inputs.rope)
        q, k = qk.split([H, H_kv], dim=1)  # [B, H, T, D], [B, H_kv, T, D]
        if cache is not None and inputs.positions is not None:
            eager_call = torch.compiler.is_compiling() and _runs_eagerly(cache)  # one eager call: see `_runs_eagerly`
            through = _eager_through_cache if eager_call else _through_cache
            return self._project(through(self, cache, q, k, v, inputs.positions))
        y = F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=mask,
            dropout_p=self.dropout if self.training else 0.0,
            is_causal=mask is None,
            enable_gqa=k.shape[1] != self.n_head,
        )
        return self._project(y)

    def _project(self, y: Tensor) -> Tensor:
        """The heads `[B, H, T, D]` back to `[B, T, C]`, through the output projection."""
        B, H, T, D = y.shape
        out: Tensor = self.c_proj(y.transpose(1, 2).reshape(B, T, H * D))
        return out


def _through_cache(
    attn: CausalSelfAttention, cache: KVCache, q: Tensor, k: Tensor, v: Tensor, positions: Tensor
) -> Tensor:
    """Layer `attn`'s new keys written to `cache`, then its attention through it (the cache's mask; observe):
    `[B, H, T, D]`. The layer index is read here, so under `_eager_through_cache` no compiled code reads it."""
    k, v = cache.update(attn.layer, k, v)  # [B, H_kv or H, S, D], in the cache's order
    return cached_attention(cache, attn.layer, q, k, v, positions)


_eager_through_cache = eager(_through_cache)


def _runs_eagerly(cache: KVCache) -> bool:
    """Whether `cache`'s steps run outside a compiled graph (`runs_eagerly = True`: the scored caches). Called from
    compiled code each would break the graph, and the frame dynamo resumes after a break is specialised on the
    layer (`self.layer == 7`): recompiled per layer up to dynamo's limit. So the layer's write and attention
    through such a cache are one eager call, `_eager_through_cache`, the same for every layer. Not with
    `prefill_only`: its steps after the prompt are traced, and this forward, with no break, is one graph."""
    prefill_only = getattr(getattr(cache, "params", None), "prefill_only", False)
    return bool(getattr(cache, "runs_eagerly", False)) and not prefill_only


class MLP(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: Tensor) -> Tensor:
        # GPT-2's "gelu_new" is the tanh approximation.
        out: Tensor = self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))
        return self.dropout(out) if self.training else out


class Block(nn.Module):
    def __init__(self, config: GPTConfig, layer: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon, bias=config.bias)
        self.attn = CausalSelfAttention(config, layer)
        self.ln_2 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x: Tensor, inputs: LayerInputs) -> Tensor:
        x = x + self.attn(self.ln_1(x), inputs)
        out: Tensor = x + self.mlp(self.ln_2(x))
        return out


def _last_position(slots: int, positions: Tensor | None) -> int:
    """1 + the largest position a forward over `slots` slots presents (0: not read, compiled)."""
    if positions is None:
        return slots
    return 0 if torch.compiler.is_compiling() else int(positions.max()) + 1


class GPT(nn.Module):
    """A GPT-2-style decoder with tied input/output embeddings; it has no weights of its own."""

    supports_last_only = True  # forward(..., last_only=True) projects only the last column
    # Each layer's calibrated attention window D_f, or the calibration file it is read from when a cache
    # needs it (set by a loader that ships a calibration).
    attention_windows: tuple[int, ...] | None = None
    calibration: Path | None = None

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
            rope_base=c.rope_base if c.position == "rope" else None,
            attention_windows=self.attention_windows,
            calibration=self.calibration,
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
        T = input_ids.shape[1]
        self._check_context(T, cache, positions)
        mask = None  # with a cache, each layer asks the cache for its mask
        if positions is None:
            if cache is not None:
                raise ParameterError("GPT: positions=None is only allowed without a cache")
            real = torch.arange(T, device=input_ids.device).unsqueeze(0)  # [1, T]
        else:
            if cache is None:
                mask = attention_mask(positions, 0)
            real = positions.clamp(min=0)
        x = self.wte(input_ids)
        rope = None
        if self.wpe is not None:
            x = x + self.wpe(real)
        else:
            rope = rope_angles(real, self.config.head_dim, self.config.rope_base)
        if self.training:
            x = self.drop(x)
        inputs = LayerInputs(mask, cache, rope, positions)
        for block in self.h:
            x = block(x, inputs)
        if last_only:
            x = x[:, -1:]  # [B, 1, C]: the caller reads only the last column
        out: Tensor = self.lm_head(self.ln_f(x))
        return out

    def _check_context(self, new: int, cache: KVCache | None, positions: Tensor | None) -> None:
        """Refuse a forward that needs a position or a distance the model was never trained on.

        Learned positions end at `block_size` whatever the cache keeps. Rotary attention depends
        only on query-key distances, so a cache that evicts decides: `cache.reach(new)` is the
        widest distance (plus one) the forward will present. Slots past the context are padding of rows
        that start later (each row's positions start at 0): the positions decide, read only then (compiled,
        not at all: the read would break the graph, and the engine checked each row's reach).
        """
        block = self.config.block_size
        held = 0 if cache is None else cache.length
        if cache is not None and self.wpe is None and evicts(cache):
            reach = cache.reach(new)  # type: ignore[attr-defined]
            if reach > block:
                raise ContextLengthError(
                    f"GPT: {new} new tokens on {held} cached would attend across {reach} positions, past the "
                    f"context of block_size={block}; use a cache that evicts, e.g. cache='window(size=auto)'"
                )
        elif held + new > block and (last := _last_position(held + new, positions)) > block:
            raise ContextLengthError(
                f"GPT: {last} positions (cached {held} + new {new} slots) exceed the context of block_size={block}"
                + ("" if self.wpe is None else " (learned positions end there, whatever the cache keeps)")
            )
