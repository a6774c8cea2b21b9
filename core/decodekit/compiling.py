"""`compile=True`: a function under `torch.compile`, whose compiler's failures are a `CompileError`.

`torch.compile` compiles on the first call, so a model dynamo cannot trace, or a machine without a
working C++ compiler for inductor, fails in the middle of a decode: that failure names `compile=True`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import torch

from decodekit.errors import CompileError

__all__ = ["compiled"]

T = TypeVar("T")


def compiled(fn: Callable[..., T], what: str, **options: Any) -> Callable[..., T]:
    """`torch.compile(fn, **options)`; a failure of the compiler (dynamo, inductor, its C++ compiler) is a
    `CompileError` naming `what`, raised from it. Other errors (the function's own) pass as they are."""
    graph = torch.compile(fn, **options)
    from torch._dynamo.exc import TorchDynamoException  # loaded by torch.compile, so here at no cost

    def run(*args: Any, **kwargs: Any) -> T:
        try:
            return graph(*args, **kwargs)
        except TorchDynamoException as exc:
            raise CompileError(what, _reason(exc)) from exc

    return run


def _reason(exc: BaseException) -> str:
    """The compiler's failure in a line: the error inside dynamo's wrapper (inductor's), its first line."""
    inner = getattr(exc, "inner_exception", None)  # BackendCompilerFailed: "backend='inductor' raised:\n..."
    source = inner if isinstance(inner, BaseException) else exc
    lines = [line.strip() for line in str(source).splitlines() if line.strip()]
    return f"{type(source).__name__}: {lines[0]}" if lines else type(source).__name__
