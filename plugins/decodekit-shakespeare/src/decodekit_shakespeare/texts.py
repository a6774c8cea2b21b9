"""The held-out text shipped with the model: Hamlet (public domain), which training never saw.

`decodekit cache calibrate` measures attention on it by default, and the benchmarks stream it through
the caches; nothing outside the installed packages is read.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

__all__ = ["HAMLET", "hamlet"]

HAMLET = "hamlet.txt"  # Shakespeare's Hamlet, 173,944 characters


def hamlet() -> Path:
    """The shipped Hamlet's path, inside the installed package."""
    return Path(str(resources.files("decodekit_shakespeare") / HAMLET))
