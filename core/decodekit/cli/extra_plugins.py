"""`DECODEKIT_EXTRA_PLUGINS`: plugin objects to register besides the installed entry points.

A comma-separated list of `package.module` or `package.module:attribute`, each a module or
object with `@decodekit.hookimpl` functions. For development and tests: a plugin can be tried,
and loaded by a `decodekit` subprocess, without packaging it. Each is handed to
`decodekit.register_plugin` and listed by `decodekit plugins` under the name given here.
"""

from __future__ import annotations

import importlib
import os

from decodekit.cli.errors import CliError

__all__ = ["ENV_VAR", "register_extra_plugins"]

ENV_VAR = "DECODEKIT_EXTRA_PLUGINS"

_registered: set[str] = set()


def _load(spec: str) -> object:
    module_name, _, attr = spec.partition(":")
    try:
        value: object = importlib.import_module(module_name)
        for part in attr.split(".") if attr else ():
            value = getattr(value, part)
    except Exception as exc:
        raise CliError(f"{ENV_VAR}: cannot load {spec!r}: {type(exc).__name__}: {exc}") from None
    return value


def register_extra_plugins() -> None:
    """Register each plugin named in `DECODEKIT_EXTRA_PLUGINS` (once per process)."""
    specs = [s.strip() for s in os.environ.get(ENV_VAR, "").split(",") if s.strip()]
    if not specs:
        return
    from decodekit.plugins import register_plugin

    for spec in specs:
        if spec not in _registered:
            register_plugin(_load(spec), spec)
            _registered.add(spec)
