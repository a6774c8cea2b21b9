"""What to type to install a standard plugin: from an index, or from the checkout decodekit was installed from,
by absolute folders (`decodekit.standard_plugins` names the plugins, and those they need)."""

from __future__ import annotations

import json
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlparse

from decodekit import standard_plugins
from decodekit.standard_plugins import installed

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


def install_hint(distributions: list[str]) -> str:
    """Both ways: `pip install NAMES` from an index; from the checkout, its absolute folders."""
    return standard_plugins.install_hint(distributions, checkout(), installed)


def install_command(distributions: list[str]) -> str:
    """The one command for this environment: from the checkout decodekit came from, or from an index."""
    if (root := checkout()) is None:
        return f"pip install {' '.join(sorted(set(distributions)))}"
    return f"pip install {standard_plugins.folders(distributions, root, installed)}"
