"""`decodekit new-plugin NAME --kind KIND`: write a plugin distribution that passes its tests as written."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import keyword
import re
import shlex
import warnings
from pathlib import Path

from decodekit.plugins import get_registry
from decodekit.registry import CATEGORIES
from decodekit_cli import install_hints
from decodekit_cli.errors import CliError
from decodekit_cli.plugin_template import KINDS, NEEDS, files_for

__all__ = ["taken", "write_plugin"]

NAME = re.compile(r"[a-z][a-z0-9_]*")  # a chain-string name, a Python package suffix and a distribution name


def write_plugin(name: str, kind: str, directory: Path | None, *, force: bool = False) -> int:
    """Write the distribution; refuse a name already in use (unless `force`) and a folder that has files in it."""
    if not NAME.fullmatch(name):
        raise CliError(
            f"new-plugin: NAME {name!r} is invalid; allowed: lowercase letters, digits and _, a letter first"
        )
    if keyword.iskeyword(name):  # the module `decodekit_NAME.NAME` could not be imported by its own tests
        raise CliError(f"new-plugin: NAME {name!r} is a Python keyword; allowed: a name that is not one")
    if name == "plugin":  # `$name.py` and the hook's `plugin.py` would be one file
        raise CliError(
            "new-plugin: NAME 'plugin' would name its implementation plugin.py, the hook's module; "
            "allowed: another name"
        )
    if kind not in KINDS:
        raise CliError(f"new-plugin: --kind {kind!r} is invalid; allowed: {', '.join(KINDS)}")
    dist = "decodekit-" + name.replace("_", "-")
    reasons = [] if force else taken(name, kind, dist)
    if reasons:
        raise CliError(
            f"new-plugin: NAME {name!r} is taken: {'; '.join(reasons)}; allowed: a name nothing installed "
            "registers or provides (--force writes it anyway)"
        )
    files = files_for(kind, name)
    target = directory if directory is not None else Path(dist)
    try:
        _write(target, files)
    except OSError as exc:  # a folder that cannot be made or written, a name too long for the file system
        where = exc.filename if exc.filename is not None else target
        raise CliError(
            f"new-plugin: cannot write {str(where)!r}: {exc.strerror or exc}; allowed: a folder that can be "
            "created and written (--dir)"
        ) from None
    # Plain print: paths are long, and a wrapped command could not be copied.
    print(f"wrote {target} (distribution {dist}, {kind} {name!r}):")
    for path in files:
        print(f"  {path}")
    # The test extra brings pytest: without it the `pytest` on PATH may be another environment's.
    steps = [f"pip install -e {shlex.quote(f'{target}[test]')}", f"pytest {shlex.quote(str(target))}"]
    if missing := [d for d in NEEDS[kind] if not install_hints.installed(d)]:  # pip may find it on no index
        steps.insert(0, install_hints.install_command(missing))
    print("next: " + " && ".join(steps))
    return 0


def _write(target: Path, files: dict[str, str]) -> None:
    """Write `files` under `target`, a new or empty folder."""
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        what = "exists and is not empty" if target.is_dir() else "is a file"
        raise CliError(f"new-plugin: {str(target)!r} {what}; allowed: a new or empty folder (--dir)")
    for path, text in files.items():
        file = target / path
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(text)


def taken(name: str, kind: str, dist: str) -> list[str]:
    """Why installing the plugin would break something: `name` registered (two registrations make a name
    unusable), or its distribution or package installed (pip would replace or shadow it)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a plugin that fails to load: not this command's business
        registry = get_registry()
    reasons = [
        f"{category} {name!r} is registered by {entry.distribution}, and a second registration makes a name unusable"
        for category in CATEGORIES
        if (entry := registry.section(category).get(name)) is not None
    ]
    reasons += [
        f"{c.category} {name!r} is registered by {' and '.join(c.distributions)}"
        for c in registry.conflicts
        if c.name == name
    ]
    if kind == "cache" and name == "none":
        reasons.append("cache 'none' means no cache (cache='none', --cache none)")
    package = dist.replace("-", "_")
    try:
        version = importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        if importlib.util.find_spec(package) is not None:
            reasons.append(f"package {package} is importable already, and the two would shadow each other")
    else:
        reasons.append(f"distribution {dist} {version} is installed, and pip install would replace it")
    return reasons
