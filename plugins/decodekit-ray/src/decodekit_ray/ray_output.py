"""What Ray prints in the command's process, kept to what the user can act on: the progress bar and one line each.

Ray's C++ logger writes to file descriptor 2 with no switch of its own, and Ray's driver prints the raylet's notes
on the job to `sys.stdout`, coloured: both would cut through the progress bar and fill a job's logs.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import TextIO

__all__ = ["RAY_LOG_LINE", "stderr_without", "without_raylet_notes", "without_restart_note"]

RESTART_NOTE = b"ray-project/ray/issues/53727"  # the one line `without_restart_note` drops
# A line of Ray's C++ logger: "[2026-12-05 02:59:03,713 W 31607 31607] gcs_client.cc:210: ..."
RAY_LOG_LINE = re.compile(rb"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ [A-Z] \d+ \d+\] ")


@contextlib.contextmanager
def without_restart_note() -> Iterator[None]:
    """Drop Ray's core-worker ERROR line "... has constructor arguments in the object store and max_restarts > 0"
    from this process's stderr while the block runs.

    Ray Data always passes an actor pool's map function by reference (`ray.put`, not our arguments) with
    max_restarts=-1, and holds that reference for the whole job, so a restarted actor finds it: the line
    (ray-project/ray#53727) is noise on every run."""
    with stderr_without(lambda line: RESTART_NOTE in line):
        yield


@contextlib.contextmanager
def stderr_without(drop: Callable[[bytes], object]) -> Iterator[None]:
    """Drop the lines `drop` is true of from this process's stderr while the block runs.

    Ray's C++ logger writes to file descriptor 2 with no switch of its own, so fd 2 goes through a filter;
    Python's `sys.stderr` keeps the terminal (the progress bar).
    """
    sys.stderr.flush()
    terminal = os.dup(2)
    read, write = os.pipe()
    os.dup2(write, 2)
    os.close(write)
    python_stderr = sys.stderr
    sys.stderr = open(os.dup(terminal), "w", encoding=python_stderr.encoding, errors="backslashreplace")  # noqa: SIM115
    copier = threading.Thread(target=_copy_lines, args=(read, terminal, drop), daemon=True)
    copier.start()
    try:
        yield
    finally:
        sys.stderr.flush()
        sys.stderr.close()
        sys.stderr = python_stderr
        os.dup2(terminal, 2)  # the pipe's last writer closes: the copier reads its end and stops
        copier.join(timeout=5)
        os.close(terminal)


def _copy_lines(read: int, to: int, drop: Callable[[bytes], object]) -> None:
    """Copy the lines of the pipe `read` to the descriptor `to`, but those `drop` is true of."""
    with open(read, "rb") as pipe, open(to, "wb", closefd=False) as out:
        for line in pipe:
            if not drop(line):
                out.write(line)
                out.flush()


ANSI = re.compile(r"\x1b\[[0-9;]*m")
WORKER_DIED = "A worker died or was killed"  # the raylet's note on a dead actor, the one of its notes said here
DIED = (
    "--ray: a decoding actor's process died (killed, out of memory, or its node lost); Ray starts it again and "
    "retries its blocks, so every line is still written once; its node's Ray logs say why (docs/scale-out.md, "
    "'Faults'; later deaths are not said here)"
)


@contextlib.contextmanager
def without_raylet_notes() -> Iterator[None]:
    """While the block runs, drop the raylet's notes Ray's driver prints on `sys.stdout`, coloured ("(raylet) A
    worker died ...", "Task ... failed. There are infinite retries remaining"): a batch job writes nothing there,
    and Ray retries a dead actor's blocks as the docs promise. The first death is one warning (an actor that dies
    on every try, out of memory, would otherwise stall the job in silence). Any other line is printed."""
    stdout = sys.stdout
    sys.stdout = _WithoutRayletNotes(stdout)  # type: ignore[assignment]
    try:
        yield
    finally:
        sys.stdout = stdout


class _WithoutRayletNotes:
    """A text stream that passes each complete line to `out`, but the raylet's."""

    def __init__(self, out: TextIO) -> None:
        self.out, self.pending, self.died = out, "", False

    def write(self, text: str) -> int:
        *lines, self.pending = (self.pending + text).split("\n")
        for line in lines:
            plain = ANSI.sub("", line)
            if not plain.startswith("(raylet)"):
                self.out.write(line + "\n")
            elif WORKER_DIED in plain and not self.died:
                self.died = True
                warnings.warn(DIED, stacklevel=1)
        return len(text)

    def flush(self) -> None:
        self.out.flush()
