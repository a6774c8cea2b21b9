"""The core wheel alone pulls exactly the design card's packages: `python tests/core_deps.py` in a venv
where only torch (first, the CPU build) and the `decodekit` wheel were installed (make dist-check).

Installed = decodekit + torch, pluggy, pydantic, typing-extensions and what those four require
themselves, nothing else (pip and setuptools aside)."""

from __future__ import annotations

import re
from importlib import metadata

CARD = {"torch", "pluggy", "pydantic", "typing-extensions"}
TOOLS = {"pip", "setuptools", "wheel"}


def _name(text: str) -> str:
    return re.sub(r"[-_.]+", "-", text).lower()


def _requires(dist: str) -> set[str]:
    """A distribution's unconditional requirements (no extras, no environment markers that exclude them)."""
    out = set()
    for req in metadata.requires(dist) or []:
        spec, _, marker = req.partition(";")
        if "extra ==" in marker:
            continue
        out.add(_name(re.split(r"[ <>=!~\[(]", spec.strip(), maxsplit=1)[0]))
    return out


def closure(roots: set[str]) -> set[str]:
    seen, todo = set(), list(roots)
    while todo:
        dist = todo.pop()
        if dist in seen:
            continue
        seen.add(dist)
        try:
            todo += _requires(dist) - seen
        except metadata.PackageNotFoundError:  # a marker-excluded requirement that is not installed
            seen.discard(dist)
    return seen


def main() -> None:
    installed = {_name(d.metadata["Name"]) for d in metadata.distributions()} - TOOLS
    assert _requires("decodekit") == CARD, f"decodekit requires {sorted(_requires('decodekit'))}, not {sorted(CARD)}"
    allowed = closure(CARD) | {"decodekit"}
    extra = installed - allowed
    assert not extra, f"installing the core wheel brought {sorted(extra)}, beyond the card's packages"
    print(f"core wheel: decodekit + {sorted(CARD)} and their {len(allowed) - len(CARD) - 1} dependencies, nothing else")


if __name__ == "__main__":
    main()
