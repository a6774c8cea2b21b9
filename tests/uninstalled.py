"""Plugin distributions hidden from `importlib.metadata`, as if never installed: a test of what a user without a
plugin is told. (DECODEKIT_DISABLE_PLUGINS leaves a distribution installed, and the user is told to enable it.)"""

from __future__ import annotations

from collections.abc import Iterator
from importlib import metadata
from typing import Any

import pytest

import decodekit.plugins
from decodekit.standard_plugins import canonical_name

__all__ = ["uninstall"]


def uninstall(monkeypatch: pytest.MonkeyPatch, *distributions: str) -> None:
    """Hide `distributions` from every metadata lookup (entry points, `metadata.distribution`) until the test ends;
    the registry is rebuilt on first use, without them."""
    hidden = {canonical_name(d) for d in distributions}
    discover = metadata.Distribution.discover  # `distributions()`, `entry_points()` and `distribution()` go here

    def visible(cls: type[metadata.Distribution], /, **kwargs: Any) -> Iterator[metadata.Distribution]:
        return (d for d in discover(**kwargs) if canonical_name(d.metadata["Name"] or "") not in hidden)

    monkeypatch.setattr(metadata.Distribution, "discover", classmethod(visible))
    # Python 3.10's `distribution(name)` (Distribution.from_name) asks the finders itself, past `discover`.
    from_name = metadata.Distribution.from_name

    def found(cls: type[metadata.Distribution], name: str) -> metadata.Distribution:
        if canonical_name(name) in hidden:
            raise metadata.PackageNotFoundError(name)
        return from_name(name)

    monkeypatch.setattr(metadata.Distribution, "from_name", classmethod(found))
    monkeypatch.setattr(decodekit.plugins, "_registry", None)
