"""`ByIdentity`: a value kept per object while the object lives, for what decodekit works out once per model or
per function rather than on every request."""

from __future__ import annotations

import contextlib
import weakref
from typing import Any, Generic, TypeVar

__all__ = ["ByIdentity"]

V = TypeVar("V")


class ByIdentity(Generic[V]):
    """Values keyed by an object's identity, not its `==` (a model's or a callable's may be anything, or call two
    objects equal), held weakly: an entry goes when its object dies, and a later object given the same id is
    told apart by the reference. An object no weak reference can hold keeps nothing (`put` does nothing)."""

    def __init__(self) -> None:
        self._held: dict[int, tuple[weakref.ref[Any], V]] = {}

    def get(self, obj: object) -> V | None:
        """The value kept for `obj`, or None."""
        known = self._held.get(id(obj))
        return known[1] if known is not None and known[0]() is obj else None

    def put(self, obj: object, value: V) -> None:
        key = id(obj)
        with contextlib.suppress(TypeError):  # a weak reference cannot hold it
            self._held[key] = (weakref.ref(obj, lambda ref: self._forget(key, ref)), value)

    def _forget(self, key: int, ref: weakref.ref[Any]) -> None:
        """Drop `key`'s entry if it is still that of the object that died (`ref`), not a later object's."""
        if (known := self._held.get(key)) is not None and known[0] is ref:
            self._held.pop(key, None)
