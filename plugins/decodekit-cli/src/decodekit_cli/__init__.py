"""The `decodekit` command line: generate text, explain a chain, list plugins and samplers.

`main()` is the console-script entry point. Importing this package is light: torch loads only
inside the commands that run a model, so `decodekit --help` and `decodekit plugins` stay fast.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with `argv` (default: `sys.argv[1:]`); return the exit status."""
    try:
        from decodekit_cli.app import run

        return run(argv)
    except KeyboardInterrupt:  # Ctrl-C while Python imports the command line, before `run` catches it
        from decodekit_cli.errors import EXIT_INTERRUPTED, report_error

        report_error("interrupted")
        return EXIT_INTERRUPTED
