"""`decodekit new-plugin NAME --kind KIND`: write a plugin distribution that passes its tests as written."""

from __future__ import annotations

import re
from pathlib import Path

from decodekit_cli.errors import CliError
from decodekit_cli.plugin_template import KINDS, files_for

__all__ = ["write_plugin"]

NAME = re.compile(r"[a-z][a-z0-9_]*")  # a chain-string name, a Python package suffix and a distribution name


def write_plugin(name: str, kind: str, directory: Path | None) -> int:
    """Write the distribution; refuse to touch a folder that has files in it."""
    if not NAME.fullmatch(name):
        raise CliError(
            f"new-plugin: NAME {name!r} is invalid; allowed: lowercase letters, digits and _, a letter first"
        )
    if kind not in KINDS:
        raise CliError(f"new-plugin: --kind {kind!r} is invalid; allowed: {', '.join(KINDS)}")
    files = files_for(kind, name)
    dist = "decodekit-" + name.replace("_", "-")
    target = directory if directory is not None else Path(dist)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise CliError(f"new-plugin: {str(target)!r} exists and is not empty; allowed: a new or empty folder (--dir)")
    for path, text in files.items():
        file = target / path
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(text)
    # Plain print: paths are long, and a wrapped command could not be copied.
    print(f"wrote {target} (distribution {dist}, {kind} {name!r}):")
    for path in files:
        print(f"  {path}")
    print(f"next: pip install -e {target} && pytest {target}")
    return 0
