"""What to type to install a standard plugin: from an index, or from a checkout of decodekit, where the
plugins it needs are folders no index knows (so they are named too)."""

from __future__ import annotations

import json
import shlex
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlparse

from decodekit_cli.catalogue import PLUGIN_NEEDS

__all__ = ["checkout", "install_command", "install_hint", "installed"]


def checkout() -> Path | None:
    """The checkout decodekit was installed from (pip's direct_url.json, PEP 610), or None (an index, a wheel)."""
    try:
        url = json.loads(metadata.distribution("decodekit").read_text("direct_url.json") or "{}").get("url", "")
    except (metadata.PackageNotFoundError, ValueError, AttributeError):
        return None
    parsed = urlparse(url)
    root = Path(unquote(parsed.path))
    return root if parsed.scheme == "file" and (root / "plugins").is_dir() else None


def installed(distribution: str) -> bool:
    try:
        metadata.distribution(distribution)
    except metadata.PackageNotFoundError:
        return False
    return True


def install_hint(distributions: list[str]) -> str:
    """Both ways: `pip install NAMES` from an index; from a checkout, their folders and those of the plugins
    they need that are not installed (pip would look those up on an index)."""
    names = sorted(set(distributions))
    root = checkout()
    where = "from a checkout" if root else "from a checkout of decodekit, in its folder"
    return f"pip install {' '.join(names)} ({where}: pip install {_folders(root, names)})"


def install_command(distributions: list[str]) -> str:
    """The one command for this environment: from the checkout decodekit came from, or from an index."""
    if (root := checkout()) is None:
        return f"pip install {' '.join(sorted(set(distributions)))}"
    return f"pip install {_folders(root, distributions)}"


def _folders(root: Path | None, distributions: list[str]) -> str:
    """The plugins' folders and those they need, quoted for a shell (a checkout may sit in "my checkout")."""
    prefix = f"{root}/" if root else ""
    return " ".join(shlex.quote(f"{prefix}plugins/{d}") for d in _with_needs(distributions))


def _with_needs(distributions: list[str]) -> list[str]:
    """The distributions and the plugins they need, in turn, that are not installed."""
    local = set(distributions)
    while needed := {n for d in local for n in PLUGIN_NEEDS.get(d, ()) if not installed(n)} - local:
        local |= needed
    return sorted(local)
