"""Rotary position embedding (RoFormer, Su et al. 2021), rotate-half layout (GPT-NeoX, Llama).

Angles are computed in float64 and rounded once (a float32 angle at position 100,000 is off by up to
~0.004 rad). Rotations compose, which is how a cache moves a key it keeps to another position (`rotate`).
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["apply_rope", "rope_angles", "rotate"]


def rope_angles(positions: Tensor, head_dim: int, base: float) -> tuple[Tensor, Tensor]:
    """`cos`, `sin` `[B, 1, T, head_dim]` (float32) of the angles `position · base^(-2i/head_dim)`."""
    inv_freq = base ** (-torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float64) / head_dim)
    angles = positions.to(torch.float64).unsqueeze(-1) * inv_freq  # [B, T, D/2]
    angles = torch.cat([angles, angles], dim=-1).unsqueeze(1)  # [B, 1, T, D]
    return angles.cos().float(), angles.sin().float()


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate `x` `[B, H, T, D]` by the angles: pairs `(x_i, x_{i+D/2})` turn as 2-d vectors."""
    x1, x2 = x.chunk(2, dim=-1)
    rotated = torch.cat([-x2, x1], dim=-1)
    out = x * cos + rotated * sin
    return out.to(x.dtype)  # itself when the dtypes agree


def rotate(x: Tensor, delta: int | Tensor, base: float) -> Tensor:
    """`x` `[B, H, T, D]`, rotated at some positions, moved `delta` positions on (an int, or one per `T`)."""
    shift = torch.as_tensor(delta, device=x.device).reshape(1, -1)  # [1, 1] or [1, T]
    cos, sin = rope_angles(shift, x.shape[-1], base)
    return apply_rope(x, cos, sin)
