"""The model protocol: `model(input_ids [B, T], positions [B, T], cache) -> logits [B, T, V]`, plus `model.spec`."""

from __future__ import annotations

import inspect
from typing import Protocol, runtime_checkable

import torch
from torch import Tensor, nn

from decodekit.cache import KVCache
from decodekit.errors import ParameterError
from decodekit.signatures import binds
from decodekit.spec import ModelSpec

__all__ = ["Model", "check_call", "last_only", "model_device_dtype"]


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


def check_call(model: object, name: str = "") -> None:
    """A model whose forward cannot take `(input_ids, positions, cache)` (a newcomer's `forward(input_ids)`) is a
    `ParameterError` naming both, before any work: its signature is bound once, as TypeError caught from the call
    would blame the model's own TypeErrors. One whose signature is unknown (a C function) passes. `name`: how the
    message names the model (a strategy's `"speculative: draft=<M>"`); by default `"model M"`."""
    options = last_only(model)
    forward = model.forward if isinstance(model, nn.Module) else model  # Module.__call__ takes (*args, **kwargs)
    if not callable(forward) or binds(forward, None, None, None, **options):
        return
    read = inspect.signature(forward)  # readable: it refused the call
    takes = inspect.Signature([p.replace(annotation=p.empty) for p in read.parameters.values()])
    called = "(input_ids, positions, cache, last_only=True) (its supports_last_only is True)" if options else ""
    raise ParameterError(
        f"{name or 'model ' + type(model).__name__}: its forward takes {takes}, but decodekit calls it as "
        f"forward{called or '(input_ids, positions, cache)'}; allowed: forward(input_ids [B, T], positions [B, T], "
        "cache) -> logits [B, T, V], cache None or a KVCache (docs/concepts.md, Models)"
    )
