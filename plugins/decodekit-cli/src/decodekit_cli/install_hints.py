"""What to type to install a standard plugin: from an index, or from the checkout decodekit was installed from,
by absolute folders (`decodekit.standard_plugins` names the plugins, and those they need)."""

from __future__ import annotations

from decodekit import standard_plugins
from decodekit.standard_plugins import checkout, installed

__all__ = ["checkout", "install_command", "install_hint", "installed"]


def install_hint(distributions: list[str]) -> str:
    """Both ways: `pip install NAMES` from an index; from the checkout, its absolute folders."""
    return standard_plugins.install_hint(distributions, checkout(), installed)


def install_command(distributions: list[str]) -> str:
    """The one command for this environment: from the checkout decodekit came from, or from an index."""
    if (root := checkout()) is None:
        return f"pip install {' '.join(sorted(set(distributions)))}"
    return f"pip install {standard_plugins.folders(distributions, root, installed)}"
