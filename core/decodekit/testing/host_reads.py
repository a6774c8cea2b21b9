"""A stage's step reads nothing back from the device: run it on tensors that have no values.

Under `FakeTensorMode` a tensor has a shape, a dtype and a device but no values, so whatever needs
one raises: `.item()`, `.tolist()`, `int()`, `float()` or `bool()` of a tensor (an `if` on one),
`torch.equal`, a shape that depends on values (`nonzero`, a boolean mask, `unique`); printing a tensor
and `.numpy()` are caught as they are called. The logits, the candidates and the context's tensors
are fake; a tensor the stage built itself (from its parameters) is not device data, but what it
computes from one is checked like the rest.
"""

from __future__ import annotations

import linecache
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from torch._subclasses.fake_tensor import (
    DataDependentOutputException,
    DynamicOutputShapeException,
    FakeTensor,
    FakeTensorMode,
)
from torch.overrides import TorchFunctionMode

from decodekit.context import DecodeContext
from decodekit.stage import Candidates

__all__ = ["UncheckedError", "assert_reads_nothing", "find_host_read"]

_CALLS: dict[Callable[..., Any], str] = {
    Tensor.item: ".item() or .tolist()",  # a fake tensor's tolist calls item
    Tensor.tolist: ".tolist()",
    Tensor.__bool__: "bool() of a tensor (an if, and, or, not on one)",
    Tensor.__int__: "int() of a tensor",
    Tensor.__float__: "float() of a tensor",
    Tensor.__index__: "a tensor used as an int (an index, a range)",
    Tensor.__repr__: "printing a tensor",
    Tensor.__format__: "formatting a tensor",
    Tensor.numpy: ".numpy()",
}
_TORCH = Path(torch.__file__).parent


class UncheckedError(Exception):
    """The call could not run on fake tensors for a reason other than a host read (an operator without a
    fake implementation, say): nothing can be said about its reads."""


class _ReadError(Exception):
    pass


class _Calls(TorchFunctionMode):
    """Catches the Python-level reads of a fake tensor by name, before torch's own error."""

    def __torch_function__(
        self, func: Callable[..., Any], types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        what = _CALLS.get(func)
        if what is not None and any(isinstance(a, FakeTensor) for a in args):
            raise _ReadError(what)
        return func(*args, **(kwargs or {}))


def find_host_read(call: Callable[..., object], *args: object) -> str | None:
    """What `call(*args)` reads back from the device and where (`"int() of a tensor at dry.py:117: ..."`), run on
    fake copies of its tensor arguments (logits, `Candidates`, a `DecodeContext`'s tensors); None when it
    reads nothing. Raises `UncheckedError` when it cannot run on fake tensors for another reason."""
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    fakes = [_fake(mode, a) for a in args]
    package = str(getattr(call, "__module__", "")).partition(".")[0]
    try:
        with mode, _Calls():
            call(*fakes)
    except _ReadError as exc:
        return f"{exc.args[0]} at {_where(exc, package)}"
    except DataDependentOutputException as exc:
        return f"a value ({exc.func}: .item(), int(), bool() of a tensor, torch.equal) at {_where(exc, package)}"
    except DynamicOutputShapeException as exc:
        return f"a shape that depends on values ({exc.func}: nonzero, a boolean mask, unique) at {_where(exc, package)}"
    except Exception as exc:
        raise UncheckedError(f"{type(exc).__name__}: {exc}") from exc
    return None


def _fake(mode: FakeTensorMode, arg: object) -> object:
    if isinstance(arg, Tensor):
        return mode.from_tensor(arg)
    if isinstance(arg, Candidates):
        return Candidates(mode.from_tensor(arg.values), mode.from_tensor(arg.indices))
    if isinstance(arg, DecodeContext):
        twin = arg.fork()  # (not the constructor: its check of the ids reads them)
        for name in ("tokens", "prompt_lengths", "draws"):
            value = getattr(twin, name)
            if isinstance(value, Tensor):
                setattr(twin, name, mode.from_tensor(value))
        return twin
    return arg


def _where(exc: BaseException, package: str) -> str:
    """The innermost line of `package` (the stage's) the read came from, else of any code but torch's and this
    module's: a library that wraps `print` (Ray's progress bars do) is not where the stage read."""
    frames = [
        (frame.f_globals.get("__name__", ""), frame.f_code.co_filename, line)
        for frame, line in traceback.walk_tb(exc.__traceback__)
        if not Path(frame.f_code.co_filename).is_relative_to(_TORCH) and frame.f_code.co_filename != __file__
    ]
    own = [f for f in frames if f[0].partition(".")[0] == package]
    if not (own or frames):
        return "an unknown line"
    _, filename, line = (own or frames)[-1]
    return f"{Path(filename).name}:{line}: {linecache.getline(filename, line).strip()}"


def assert_reads_nothing(stage: object, what: str, call: Callable[..., object], *args: object) -> None:
    """`call(*args)`, a method of `stage` a decode step calls (`what` says which, and on what), reads nothing
    back from the device; raises `UncheckedError` when that cannot be told."""
    read = find_host_read(call, *args)
    assert read is None, (
        f"{stage!r}{what}: reads back from the device in a decode step ({read}); allowed: no host read (a step "
        "is one graph under torch.compile(fullgraph=True), and on a GPU every read waits for the device)"
    )
