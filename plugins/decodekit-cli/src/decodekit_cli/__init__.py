"""The `decodekit` command line: generate text, explain a chain, list plugins and samplers.

`main()` is the console-script entry point. Importing this package is light: torch loads only
inside the commands that run a model, so `decodekit --help` and `decodekit plugins` stay fast.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with `argv` (default: `sys.argv[1:]`); return the exit status."""
    from decodekit_cli.app import run

    return run(argv)
