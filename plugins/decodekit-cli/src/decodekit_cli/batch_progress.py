"""The progress bar of a batch job (local or on Ray): prompts done, tokens/s, time left.

Shown on stderr when it is a terminal; redirected, the job prints only its summary line.
"""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, Task, TextColumn, TimeRemainingColumn
from rich.text import Text

__all__ = ["BatchProgress"]


class _TokensPerSecond(ProgressColumn):
    def render(self, task: Task) -> Text:
        elapsed = task.elapsed or 0.0
        rate = task.fields.get("tokens", 0) / elapsed if elapsed > 0 else 0.0
        return Text(f"{rate:,.0f} tokens/s", style="progress.data.speed")


class BatchProgress:
    """A rich progress bar over `total` prompts; `advance` as records are written."""

    def __init__(self, total: int, label: str = "generating") -> None:
        self.console = Console(stderr=True)
        columns = (TextColumn(label), BarColumn(), MofNCompleteColumn(), TextColumn("prompts"))
        self._progress = Progress(
            *columns,
            _TokensPerSecond(),
            TimeRemainingColumn(),
            console=self.console,
            disable=not self.console.is_terminal,
        )
        self._task = self._progress.add_task(label, total=total, tokens=0)
        self.done = 0
        self.tokens = 0

    def advance(self, records: int, tokens: int) -> None:
        self.done += records
        self.tokens += tokens
        self._progress.update(self._task, completed=self.done, tokens=self.tokens)

    def __enter__(self) -> BatchProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def say(self, message: str) -> None:
        """A line on stderr (the summary, an interruption), printed as is."""
        self.console.print(message, highlight=False, soft_wrap=True)
