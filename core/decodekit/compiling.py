"""`compile=True` of `dk.generate` / `dk.stream`: the model's decode step and the chain's step
under `torch.compile`.

Shapes that grow every step (the history, the cache's length) become dynamic on the second
step (dynamo's automatic dynamic shapes), so each compiles twice per chain and model, not once
per step; the others stay static (the vocabulary size a truncation plans its search by). Code
that cannot be traced (a stage drawing from its row's `torch.Generator`) runs eagerly between
compiled pieces.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from decodekit.chain import Chain
from decodekit.context import DecodeContext

__all__ = ["compiled_select", "compiled_step"]


def compiled_step(model: Any, chain: Chain) -> tuple[Callable[..., Tensor], Callable[[Tensor, DecodeContext], Tensor]]:
    """`(forward, select)`: `model` and `chain.select`, compiled."""
    # Not dynamic=True: marking every dimension dynamic makes torch 2.13's CPU compiler emit an
    # unbound size for a repeated-heads (`dense`) cache past 2 layers.
    return torch.compile(model, dynamic=None), compiled_select(chain)


def compiled_select(chain: Chain) -> Callable[[Tensor, DecodeContext], Tensor]:
    """`chain.select`, compiled as `compile=True` runs it."""
    # Not dynamic=True either: it breaks the graph where a truncation plans its search from the
    # vocabulary size.
    return torch.compile(chain.select, dynamic=None)
