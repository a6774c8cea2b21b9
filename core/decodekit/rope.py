"""Rotary position embedding (RoFormer, Su et al. 2021), rotate-half layout (GPT-NeoX, Llama).

A key at position `p` is turned by the angles `p · inv_freq[i]`, pair `(x_i, x_{i+n})` of its first `2n` dims
(`n = len(inv_freq)`; the rest of a partial rotary embedding's head passes). Angles are computed in float64 and
rounded once (a float32 angle at position 100,000 is off by up to ~0.004 rad). Rotations compose, which is how a
cache moves a key it keeps to another position (`rotate`), whatever the model's frequencies.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["apply_rope", "frequencies", "rope_angles", "rotate", "turns"]


def frequencies(rotated: int, base: float, device: torch.device | str = "cpu") -> Tensor:
    """The default inverse frequencies of `rotated` dims, `base^(-2i/rotated)`: float64 `[rotated/2]`."""
    return base ** (-torch.arange(0, rotated, 2, device=device, dtype=torch.float64) / rotated)


def turns(positions: Tensor, inv_freq: Tensor) -> tuple[Tensor, Tensor]:
    """`cos`, `sin` `[*positions.shape, 2·len(inv_freq)]` (float32) of the angles `position · inv_freq`."""
    if inv_freq.dtype != torch.float64 or inv_freq.device != positions.device:  # a no-op Tensor.to still costs µs
        inv_freq = inv_freq.to(positions.device, torch.float64)
    angles = positions.to(torch.float64).unsqueeze(-1) * inv_freq
    angles = torch.cat([angles, angles], dim=-1)  # both halves of a pair: one call fewer than cos and sin apart
    return angles.cos().float(), angles.sin().float()


def rope_angles(positions: Tensor, head_dim: int, base: float) -> tuple[Tensor, Tensor]:
    """`cos`, `sin` `[B, 1, T, head_dim]` (float32) of the angles `position · base^(-2i/head_dim)`."""
    return turns(positions.unsqueeze(1), frequencies(head_dim, base, positions.device))


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate `x` `[B, H, T, D]` by the angles: pairs `(x_i, x_{i+n})` of its first `2n = cos.shape[-1]` dims turn as
    2-d vectors (the rest pass: a partial rotary embedding)."""
    width = cos.shape[-1]
    if width < x.shape[-1]:
        return torch.cat([apply_rope(x[..., :width], cos, sin), x[..., width:]], dim=-1)
    x1, x2 = x.chunk(2, dim=-1)
    rotated = torch.cat([-x2, x1], dim=-1)
    out = x * cos + rotated * sin
    return out if out.dtype == x.dtype else out.to(x.dtype)  # a no-op Tensor.to costs µs, per layer and step


def rotate(x: Tensor, delta: int | Tensor, inv_freq: Tensor) -> Tensor:
    """`x` `[..., D]`, rotated at some positions by `inv_freq`, moved `delta` positions on: an int, or a tensor that
    broadcasts to `x.shape[:-1]` (`[T]` for `x` `[B, H, T, D]`). `apply_rope`'s arithmetic on each half of a pair
    (the same floats), without its full-width angles and concatenations: a cache moves keys at every step."""
    n = inv_freq.shape[-1]
    angles = torch.as_tensor(delta, device=x.device).unsqueeze(-1).double() * inv_freq
    cos, sin = angles.cos().float(), angles.sin().float()
    if 2 * n < x.shape[-1]:  # a partial rotary embedding: the rest of the head passes
        return torch.cat([_turn(x[..., : 2 * n], cos, sin), x[..., 2 * n :]], dim=-1)
    return _turn(x, cos, sin)


def _turn(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """`x` `[..., 2n]` turned by the angles of `cos`, `sin` `[..., n]`: pair `(x_i, x_{i+n})` as a 2-d vector."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(x.dtype)
