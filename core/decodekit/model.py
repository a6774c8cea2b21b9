"""The model protocol: `model(input_ids [B, T], positions [B, T], cache) -> logits [B, T, V]`, plus `model.spec`."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch
from torch import Tensor

from decodekit.cache import KVCache
from decodekit.spec import ModelSpec

__all__ = ["Model", "last_only", "model_device_dtype"]


@runtime_checkable
class Model(Protocol):
    """`model(input_ids [B, T], positions [B, T], cache) -> logits [B, T, V]`, plus `model.spec` (docs/concepts.md,
    "Models": padding has negative positions). `cache`: a `KVCache`, or None to attend over `input_ids` alone. A
    model whose `supports_last_only` is True also takes `last_only=True`, for the last column alone `[B, 1, V]`
    (the engine asks for it wherever it reads only `[:, -1]`)."""

    @property
    def spec(self) -> ModelSpec: ...  # read-only: an attribute or a property

    def __call__(self, input_ids: Tensor, positions: Tensor, cache: KVCache | None, /) -> Tensor: ...


def model_device_dtype(model: object) -> tuple[torch.device, torch.dtype]:
    """The device and dtype of the model's first parameter (CPU float32 for a parameterless one)."""
    if callable(params := getattr(model, "parameters", None)):
        for p in params():
            return p.device, p.dtype
    return torch.device("cpu"), torch.float32


def last_only(model: object) -> dict[str, bool]:
    """`{"last_only": True}` for a model that can return only the last column, else `{}`."""
    return {"last_only": True} if getattr(model, "supports_last_only", False) else {}
