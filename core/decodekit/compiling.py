"""`compile=True`: a function under `torch.compile`, whose compiler's failures (dynamo, inductor, its C++
compiler: on the first call, mid-decode) are a `CompileError` naming what it compiled; and a function a
compiled graph calls eagerly (host-side work a plugin cannot trace)."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, TypeVar, cast

import torch

from decodekit.errors import CompileError

__all__ = ["compiled", "eager"]

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


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


def eager(fn: F) -> F:
    """`fn`, run outside any `torch.compile` graph that calls it (one graph break there); itself when eager.

    Its disabled form is made once torch's compiler is loaded, on an eager call where there is one (a compiled
    decode's first step): made inside a trace it splits that trace once more, and making it imports the compiler
    (~1 s), which an eager decode never needs."""
    disabled: list[F] = []

    def make() -> None:
        disabled.append(torch.compiler.disable(fn))  # type: ignore[no-untyped-call]  # untyped in torch 2.13

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        if not torch.compiler.is_compiling():
            if not disabled and "torch._dynamo" in sys.modules:  # loaded: making it costs nothing
                make()
            return fn(*args, **kwargs)
        if not disabled:
            make()
        return disabled[0](*args, **kwargs)

    return cast(F, run)
