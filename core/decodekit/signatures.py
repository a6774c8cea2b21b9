"""Whether a callable takes a call, by its signature, read once per function object: decodekit checks a model's
forward and a plugin's factory this way before calling them (a TypeError caught from the call would blame their
own), on every request, and `inspect.signature` costs 20-50 µs a read."""

from __future__ import annotations

import inspect
import types
from typing import Any

from decodekit.by_identity import ByIdentity

__all__ = ["binds"]

_SIGNATURES: ByIdentity[inspect.Signature] = ByIdentity()
_NONE = inspect.Signature()  # kept for a function with no signature to read


def _signature(fn: object) -> inspect.Signature | None:
    """`inspect.signature(fn)`, or None where there is none to read (a C function); remembered while `fn` lives. A
    function replaced (a model's new forward, a class defined again) is another object, read anew."""
    if (known := _SIGNATURES.get(fn)) is not None:
        return None if known is _NONE else known
    try:
        read = inspect.signature(fn)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        read = _NONE
    _SIGNATURES.put(fn, read)
    return None if read is _NONE else read


def binds(fn: object, *args: Any, **kwargs: Any) -> bool:
    """Whether `fn(*args, **kwargs)` binds to `fn`'s signature; True where it has none to read (trusted). A bound
    method is read through its function (a new method object each access: `model.forward`), its self filled."""
    if isinstance(fn, types.MethodType):
        fn, args = fn.__func__, (fn.__self__, *args)  # type: ignore[attr-defined]
    if (read := _signature(fn)) is None:
        return True
    try:
        read.bind(*args, **kwargs)
    except TypeError:
        return False
    return True
