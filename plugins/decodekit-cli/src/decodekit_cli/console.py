"""The console the commands print their tables and listings on: stdout, no spaces at the ends of lines."""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Iterable

from rich.console import Console
from rich.segment import Segment

__all__ = ["stdout_console"]

_TRAILING = re.compile(r"[ \t]+$", re.M)


class _Stdout(Console):
    """rich pads wrapped lines and table titles to the width, and keeps the space where a line wraps;
    a pipe or a file would keep those spaces (and a diff show them): each print drops them."""

    def _render_buffer(self, buffer: Iterable[Segment]) -> str:
        return _TRAILING.sub("", super()._render_buffer(buffer))

    def on_broken_pipe(self) -> None:
        """rich exits with status 1 when the reader goes away (`| head`); `decodekit_cli.app.run`
        handles it as it does for every command."""
        self.quiet = True
        raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))


def stdout_console() -> Console:
    return _Stdout()
