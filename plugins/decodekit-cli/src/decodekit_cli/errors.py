"""How the command line reports problems: one line on stderr, `decodekit: error: ...`."""

from __future__ import annotations

import sys

__all__ = [
    "EXIT_BROKEN_PIPE",
    "EXIT_FAILURE",
    "EXIT_INTERRUPTED",
    "EXIT_USAGE",
    "CliError",
    "report_error",
    "report_note",
    "report_warning",
]

EXIT_FAILURE = 1  # something failed while running (a model that does not load, an unexpected error)
EXIT_USAGE = 2  # bad flags, bad chain strings, unknown names (click's usage-error status)
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what shells report for Ctrl-C
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what shells report for a command whose reader went away (`| head`)


class CliError(Exception):
    """A problem with what the user asked for; reported without a traceback."""

    def __init__(self, message: str, exit_code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def _one_line(message: str) -> str:
    return " ".join(message.split())


def report_error(message: str) -> None:
    print(f"decodekit: error: {_one_line(message)}", file=sys.stderr)


def report_warning(message: str) -> None:
    # a library warning already says "decodekit: "
    print(f"decodekit: warning: {_one_line(message).removeprefix('decodekit: ')}", file=sys.stderr)


def report_note(message: str) -> None:
    """What the command chose for the user, without a problem (the model's own chain)."""
    print(f"decodekit: note: {_one_line(message)}", file=sys.stderr)
