"""`compile=True`: a function under `torch.compile`, whose compiler's failures (dynamo, inductor, its C++
compiler: on the first call, mid-decode) are a `CompileError` naming what it compiled."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import torch

from decodekit.errors import CompileError

__all__ = ["compiled"]

T = TypeVar("T")


def compiled(fn: Callable[..., T], what: str, **options: Any) -> Callable[..., T]:
    """`torch.compile(fn, **options)`, its compiler's failures a `CompileError`; the function's own pass as they are."""
    graph = torch.compile(fn, **options)
    from torch._dynamo.exc import TorchDynamoException  # loaded by torch.compile, so here at no cost

    def run(*args: Any, **kwargs: Any) -> T:
        try:
            return graph(*args, **kwargs)
        except TorchDynamoException as exc:
            inner = getattr(exc, "inner_exception", None)  # BackendCompilerFailed wraps inductor's error
            source = inner if isinstance(inner, BaseException) else exc
            first = next((line.strip() for line in str(source).splitlines() if line.strip()), "")
            reason = f"{type(source).__name__}: {first}" if first else type(source).__name__
            raise CompileError(what, reason) from exc

    return run
