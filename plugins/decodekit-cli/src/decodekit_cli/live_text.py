"""Streaming generated text to the terminal, with a tokens/s status line when stderr is a terminal.

Three cases:
- stderr is not a terminal: text goes to stdout as it comes, and there is no status line;
- stderr is a terminal and stdout is not the same one (redirected to a file, a pipe, another
  terminal): text goes to stdout, and a transient status line is drawn on stderr;
- both are the same terminal: rich draws the status line, with the unfinished line of text
  above it, and prints each finished line above both (as rich's own `redirect_stdout` does),
  so text and status never overwrite each other.
"""

from __future__ import annotations

import os
import sys
from types import TracebackType

from rich.cells import cell_len
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.text import Text

__all__ = ["SampleWriter", "TextOutput"]


def _same_terminal() -> bool:
    """Whether stdout and stderr are one and the same terminal."""
    try:
        out, err = sys.stdout.fileno(), sys.stderr.fileno()
        return os.isatty(out) and os.isatty(err) and os.path.samestat(os.fstat(out), os.fstat(err))
    except (AttributeError, OSError, ValueError):  # replaced streams without a file descriptor
        return False


class TextOutput:
    """A context manager: `write` text as it is generated, `status` the progress line."""

    def __init__(self, *, text: bool = True) -> None:
        self.console = Console(stderr=True)
        self.show_status = self.console.is_terminal
        self.inline = text and self.show_status and _same_terminal()
        self._line = ""  # inline: the unfinished line of text, drawn in the live region
        self._status = Text()
        self._live: Live | None = None

    def __enter__(self) -> TextOutput:
        if self.show_status:
            # redirect_stdout=False: text written to sys.stdout must reach stdout, not this console.
            self._live = Live(
                self._renderable(), console=self.console, transient=True, refresh_per_second=10, redirect_stdout=False
            )
            self._live.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._live is not None:
            self._live.stop()  # transient: the status line disappears
            self._live = None
        if self._line:
            self.console.print(Text(self._line), end="")
            self._line = ""

    def write(self, text: str) -> None:
        if not self.inline:
            sys.stdout.write(text)
            sys.stdout.flush()
            return
        *finished, self._line = (self._line + text).split("\n")
        for line in finished:
            self.console.print(Text(line))
        # Keep the live region one row tall: print what fills the terminal's width above it.
        width = self.console.width
        while cell_len(self._line) > width:
            cut = self._line.rfind(" ", 0, width) + 1 or width
            self.console.print(Text(self._line[:cut]))
            self._line = self._line[cut:]
        self._refresh()

    def status(self, text: str) -> None:
        self._status = Text(text, style="dim")
        self._refresh()

    def _renderable(self) -> RenderableType:
        return Group(Text(self._line), self._status) if self.inline else self._status

    def _refresh(self) -> None:
        if self._live is not None:
            self._live.update(self._renderable())


class SampleWriter:
    """Prints `n` samples one after another while they are generated together.

    The current sample streams; text of later samples is held until the ones before them end.
    With more than one sample each starts with a `--- sample i/n ---` line. Nothing is printed
    before the first token, so a prompt the model cannot encode is not echoed.
    """

    def __init__(self, out: TextOutput, n: int, prefix: str) -> None:
        self.out, self.n, self.prefix = out, n, prefix
        self.held = [""] * n
        self.finished = [False] * n
        self.current = 0
        self.started = False
        self.at_line_start = True

    def text(self, row: int, delta: str) -> None:
        if row == self.current:
            self._begin()
            self._emit(delta)
        else:
            self.held[row] += delta

    def finish(self, row: int) -> None:
        self.finished[row] = True
        while self.current < self.n and self.finished[self.current]:
            self._begin()  # a sample without text still shows its header
            if not self.at_line_start:
                self._emit("\n")
            self.current += 1
            self.started = False
            if self.current < self.n and self.held[self.current]:
                self._begin()

    def close(self, count: int) -> None:
        """Print every sample not printed yet (after Ctrl-C, with what it had so far). count: the samples there
        are, fewer than `n` where a strategy returned fewer (a beam search of no steps has one hypothesis)."""
        self.n = min(count, self.n)
        for row in range(self.n):
            self.finish(row)

    def _begin(self) -> None:
        """The current sample's header and held text, once: not before its first text, so that a sample a strategy
        never returns (a beam search with fewer hypotheses than asked) has no header."""
        if self.started:
            return
        self.started = True
        if self.n > 1:
            self._emit(f"--- sample {self.current + 1}/{self.n} ---\n")
        self._emit(self.prefix + self.held[self.current])
        self.held[self.current] = ""

    def _emit(self, text: str) -> None:
        if text:
            self.out.write(text)
            self.at_line_start = text.endswith("\n")
