"""`compile=True`: a function under `torch.compile`, whose compiler's failures (dynamo, inductor, its C++
compiler: on the first call, mid-decode) are a `CompileError` naming what it compiled; a model's forward, compiled
once per model and type of cache; and a function a compiled graph calls eagerly (host-side work a plugin cannot
trace)."""

from __future__ import annotations

import contextlib
import functools
import gc
import sys
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar, cast

import torch
from torch import Tensor

from decodekit.by_identity import ByIdentity
from decodekit.errors import CompileError
from decodekit.signatures import binds

if TYPE_CHECKING:
    from decodekit.cache import KVCache
    from decodekit.model import Model

__all__ = ["MAKING", "compiled", "compiled_forward", "eager", "freed_after_compiling", "graphs_made", "unsupported"]

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


def unsupported() -> str | None:
    """Why this torch cannot run `compile=True`, or None: a model's forward is compiled once per cache type with
    `torch.compile(isolate_recompiles=True)` (`_per_cache_type`), which torch 2.13 brought."""
    # A wrapper of torch.compile taking **options (a test's counting backend) passes it on.
    if binds(torch.compile, None, isolate_recompiles=True):
        return None
    return f"needs torch 2.13 or later (torch.compile's isolate_recompiles); this is torch {torch.__version__}"


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


# Each model's compiled forward, while the model lives. The forward takes the model as an argument, so that nothing
# here keeps a model (and its weights) alive.
_COMPILED: ByIdentity[Callable[..., Tensor]] = ByIdentity()
# A service's first compiled requests come together: one thread makes each compiled function, the others wait for it
# (made twice, each would compile its graphs anew). Making one compiles nothing yet: the wait is short.
MAKING = threading.Lock()


def compiled_forward(model: Model) -> Callable[..., Tensor]:
    """`model(input_ids, positions, cache, **options)` under `torch.compile`: compiled once per model and type of
    cache while the model lives (a new wrapper of it compiles anew; one no weak reference can hold, per decode)."""
    if (forward := _COMPILED.get(model)) is None:
        with MAKING:
            if (forward := _COMPILED.get(model)) is None:
                forward = _per_cache_type()
                _COMPILED.put(model, forward)
    return functools.partial(forward, model)


def _per_cache_type() -> Callable[..., Tensor]:
    """A model's forward, `run(model, ...)`, compiled once per type of cache it is called with, each counting its
    own recompiles: dynamo's limit (8 a function) then holds per cache backend, not across them (5 backends in one
    process met it). The model is an argument, not held: torch keeps its graphs, not the model (docs/concepts.md)."""
    graphs: dict[type, Callable[..., Tensor]] = {}

    def graph_for(kind: type) -> Callable[..., Tensor]:
        with MAKING:
            if (graph := graphs.get(kind)) is None:
                # Not dynamic=True: marking every dimension dynamic makes torch 2.13's CPU compiler emit an
                # unbound size for a repeated-heads (`dense`) cache past 2 layers.
                graph = graphs[kind] = compiled(_forward, "the model's forward", dynamic=None, isolate_recompiles=True)
            return graph

    def run(model: Model, input_ids: Tensor, positions: Tensor, cache: KVCache, **options: Any) -> Tensor:
        graph = graphs.get(type(cache)) or graph_for(type(cache))
        return graph(model, input_ids, positions, cache, **options)

    return run


def _forward(model: Model, input_ids: Tensor, positions: Tensor, cache: KVCache | None, **options: Any) -> Tensor:
    """`model`'s forward, the function `_per_cache_type` compiles."""
    return model(input_ids, positions, cache, **options)


def graphs_made() -> int:
    """How many graphs torch's compiler has made in this process (dynamo's count)."""
    from torch._dynamo.utils import counters  # loaded by compile=True's first decode anyway

    return counters["stats"]["unique_graphs"]


@contextlib.contextmanager
def freed_after_compiling(made: int) -> Iterator[None]:
    """Around a decode under `compile=True`, begun when torch had made `made` graphs: where its compiler has made
    more since, one garbage collection at its end. Compiling leaves the frames it traced from (the decode's: its
    model, cache and history) in reference cycles of torch's, which outlive the decode into the collector's oldest
    generation, whose collections are rare: a GPU cache held for good. Only a decode that compiled pays it (~0.1-0.5 s,
    against seconds of compiling)."""
    try:
        yield
    finally:
        if graphs_made() != made:
            gc.collect()


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
