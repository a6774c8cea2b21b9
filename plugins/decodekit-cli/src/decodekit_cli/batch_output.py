"""`generate --output results.jsonl`: the checks made before a model loads, the lock that keeps a
second run out, the settings recorded beside the output, and what `--resume` finds already there.

The settings file `results.jsonl.settings.json` is also the lock: a run holds an exclusive
`flock` on it while it writes the output, and a second run that cannot take it is refused. The
output itself is not the lock because the Ray job replaces it (atomically) when it assembles it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from decodekit_cli.batch_input import is_stdin
from decodekit_cli.batch_records import Record, dumps, is_error, record_line
from decodekit_cli.batch_settings import FORMAT, MIXED_SAMPLE_0, UNTEXTED_LOGPROBS, differences, upgraded
from decodekit_cli.errors import CliError

__all__ = [
    "OrderedWriter",
    "OutputLock",
    "RecordWriteError",
    "check_output",
    "existing_records",
    "parts_path",
    "replace_output",
    "settings_path",
    "sort_output",
]


def settings_path(output: Path) -> Path:
    return output.with_name(output.name + ".settings.json")


def parts_path(output: Path) -> Path:
    """Where a `--ray` run writes its records before it assembles them into the output."""
    return output.with_name(output.name + ".parts")


def check_output(output: Path, input_path: Path, *, resume: bool, ray: bool) -> None:
    """Everything about `--output` that can be known before the model loads: a clear error naming the path."""
    name = repr(str(output))
    if str(output) == "-":  # the shell convention for stdout, which cannot be locked, resumed or assembled into
        raise CliError(
            f"--output {name}: records are written to a file, not to stdout (--resume and the settings "
            "recorded beside it need one); allowed: a file path, e.g. 'results.jsonl'"
        )
    if output.is_dir():
        raise CliError(f"--output {name} is a directory; allowed: a file path, e.g. {str(output / 'results.jsonl')!r}")
    parent = output.parent
    if not parent.is_dir():
        raise CliError(f"--output {name}: its folder {str(parent)!r} does not exist; create it first")
    if parts_path(output).exists() and not (resume and ray):
        raise CliError(
            f"--output {name}: {parts_path(output).name} holds the records of a --ray run that was killed; "
            "--resume --ray continues it (or remove it and start again)"
        )
    if not output.exists():
        return
    if not is_stdin(input_path) and input_path.exists() and output.samefile(input_path):
        raise CliError(f"--output {name} is the --input file; allowed: another file")
    if output.stat().st_size > 0 and not resume:
        raise CliError(f"--output {name} exists; --resume continues it (or remove it)")
    try:
        os.close(os.open(output, os.O_WRONLY | os.O_APPEND))
    except OSError as exc:
        raise CliError(f"--output {name}: cannot write it: {exc.strerror}") from None


class OutputLock:
    """The output's settings file, held under an exclusive lock for the length of a run."""

    def __init__(self, output: Path, fd: int) -> None:
        self.output, self.path, self._fd = output, settings_path(output), fd

    @classmethod
    def acquire(cls, output: Path) -> OutputLock:
        path = settings_path(output)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise CliError(f"--output {str(output)!r}: cannot create {str(path)!r} beside it: {exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise CliError(
                f"--output {str(output)!r} is being written by another run (it holds {path.name}); "
                "allowed: one run per output, so wait for it to end or choose another --output"
            ) from None
        return cls(output, fd)

    def check_resume(self, current: dict[str, Any]) -> str | None:
        """Refuse to continue an output written with other settings (or of unknown ones).

        Where only `ignore_eos` differs, the records are the same for a model without stop tokens, which is
        not loaded yet: the refusal is returned, for the caller to raise if the model has some."""
        text = os.pread(self._fd, os.fstat(self._fd).st_size, 0)
        if not text.strip() and not _holds_records(self.output):
            return None  # nothing was written: a first run
        try:
            recorded = json.loads(text)
        except ValueError:
            recorded = None
        if not isinstance(recorded, dict):
            raise CliError(
                f"--resume: {self.output} has no readable settings in {self.path.name}, so what it was written "
                "with is unknown; allowed: an output this version of decodekit wrote (or a new --output)"
            )
        written = upgraded(recorded)
        if written.get("format") == UNTEXTED_LOGPROBS:  # its records are format 3's, unless they hold logprobs
            self._refuse_untexted_logprobs()
            written = {**written, "format": MIXED_SAMPLE_0}
        if written.get("format") == MIXED_SAMPLE_0:  # its records are this format's, unless they hold samples
            self._refuse_reseeded_samples(current["strategy"])
            written = {**written, "format": FORMAT}
        changed = differences(written, current)
        if differences({**written, "ignore_eos": current["ignore_eos"]}, current):  # more than ignore_eos
            raise CliError(
                f"--resume: {self.output} was written with {'; '.join(changed)}; allowed: the input and "
                f"settings it was written with (recorded in {self.path.name}), or a new --output"
            )
        return _eos_refusal(self.output, recorded, current["ignore_eos"]) if changed else None

    def _refuse_untexted_logprobs(self) -> None:
        """An output of format 2 or before whose records hold logprobs (token ids without texts) is not continued:
        the records this version appends would give texts, and the output would hold both kinds."""
        self._refuse_older(
            UNTEXTED_LOGPROBS,
            _has_logprobs,
            "logprobs",
            "whose logprobs give token ids without their texts",
            "this version's records give the texts too (text, top_texts)",
        )

    def _refuse_reseeded_samples(self, strategy: str) -> None:
        """An output of format 3 or before whose records hold a line's `n` samples is not continued: its sample 0
        was drawn from mix_seed(seed, 0), this version's from the line's seed, so its lines would be seeded two ways.
        Under a strategy that returns hypotheses (beam search) `n` is one copy's best beams, seeded as before."""
        from decodekit.strategies import strategy_params

        if getattr(strategy_params(strategy), "num_return_sequences", None) is not None:
            return
        self._refuse_older(
            MIXED_SAMPLE_0,
            _has_samples,
            "lines of n samples",
            "which drew a line's first sample from another seed",
            "this version draws it from the line's own seed (as generate -n)",
        )

    def _refuse_older(self, format: int, holds_in: Callable[[bytes], bool], held: str, then: str, now: str) -> None:
        """Refuse to continue an output of settings `format` or before whose records (or a killed --ray run's parts)
        hold what this version writes otherwise: the output would mix the two."""
        holds = "the parts a killed --ray run left" if parts_path(self.output).exists() else None
        if holds is None and self.output.exists() and holds_in(self.output.read_bytes()):
            holds = f"its records hold {held}"
        if holds is not None:
            raise CliError(
                f"--resume: {self.output} was written by an older decodekit (settings format {format} or before), "
                f"{then}, and {holds}; {now}, so the output would mix the two; allowed: a new --output (or the "
                "decodekit that wrote it, to finish it)"
            )

    def record(self, settings: dict[str, Any]) -> None:
        """Write the settings before the first record, so an output never exists without them."""
        data = (json.dumps(settings, indent=2) + "\n").encode()
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, data, 0)
        os.fsync(self._fd)

    def release(self) -> None:
        """Unlock; settings that describe no records (nothing was written), or that were never written (the run was
        refused before it recorded them), are removed."""
        if os.fstat(self._fd).st_size == 0 or not _holds_records(self.output):
            self.path.unlink(missing_ok=True)
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)

    def __enter__(self) -> OutputLock:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.release()


def _eos_refusal(output: Path, recorded: dict[str, Any], ignore_eos: bool) -> str:
    """Why `--resume` with another `--ignore-eos` than the output's cannot continue it, and what to pass."""
    if recorded.get("format") == 1:
        how = "in settings format 1, which went on past the model's end-of-sequence token (as --ignore-eos does now)"
    else:
        how = f"with ignore_eos={recorded['ignore_eos']!r} (this run: {ignore_eos!r})"
    what = "leave out --ignore-eos" if ignore_eos else "pass --ignore-eos"
    return (
        f"--resume: {output} was written {how}, and this model has stop tokens, so its lines would end "
        f"elsewhere; to continue it as it was written, {what} (or choose a new --output)"
    )


def _has_logprobs(records: bytes) -> bool:
    """Whether JSON lines `dumps` wrote hold a `logprobs` or `prompt_logprobs` key (a text's quotes are escaped)."""
    return b'"logprobs": [' in records or b'"prompt_logprobs": [' in records


def _has_samples(records: bytes) -> bool:
    """Whether JSON lines `dumps` wrote hold a line of several samples, `"n": 2` or more (a text's quotes are
    escaped)."""
    return re.search(rb'"n": (?:[2-9]|[1-9][0-9])', records) is not None


def _holds_records(output: Path) -> bool:
    """Whether the output, or the parts of a --ray run on it, hold anything."""
    return (output.exists() and output.stat().st_size > 0) or parts_path(output).exists()


def existing_records(output: Path) -> dict[int, str]:
    """The records already in `output` by input line (for `--resume`). A last line cut short by a
    kill is removed first; any other line that is not a record is an error naming it."""
    if not output.exists():
        return {}
    data = output.read_bytes()
    complete = data[: data.rfind(b"\n") + 1]
    if complete != data:  # an unfinished write: drop it, every complete record stays
        with output.open("r+b") as f:
            f.truncate(len(complete))
    found: dict[int, str] = {}
    for number, raw in enumerate(complete.split(b"\n")[:-1], 1):
        try:
            text = raw.decode("utf-8")
            found[record_line(text)] = text + "\n"
        except ValueError:  # UnicodeDecodeError and json's errors are ValueErrors
            raise CliError(
                f"--resume: {output} line {number} is not a record of decodekit generate; "
                "allowed: an output this version of decodekit wrote (or a new --output)"
            ) from None
    return found


def replace_output(output: Path, records: dict[int, str]) -> None:
    """Write `records` sorted by line to a new file and rename it over `output` (atomic on POSIX). Where the disk
    cannot take the new file, the OSError is raised and the output is as it was, with no half-written copy beside."""
    new = output.with_name(output.name + ".new")
    try:
        with new.open("w", encoding="ascii") as f:
            f.writelines(records[line] for line in sorted(records))
            f.flush()
            os.fsync(f.fileno())
    except OSError:
        new.unlink(missing_ok=True)
        raise
    os.replace(new, output)


def sort_output(output: Path) -> None:
    """Put the output's records in input order, where appending after a gap left them out of it. Where the
    disk cannot take the copy, the records stay as they are: the next `--resume` sorts them."""
    with contextlib.suppress(OSError):
        replace_output(output, existing_records(output))


class OrderedWriter:
    """Appends records to the output in input order: a record waits for every line before it.

    `lines` is the order to write; `put(line, None)` means that line gets no record this run.
    Each record is flushed as a whole line, so an interruption loses nothing written.
    """

    def __init__(self, out: IO[bytes], lines: Iterable[int]) -> None:
        self._out = out
        self._order = deque(lines)
        self._held: dict[int, Record | None] = {}
        self.written = 0
        self.errors = 0  # of the records written, how many are error records

    def put(self, line: int, record: Record | None) -> int:
        """Hold the record, write what is now in order; how many records this call wrote."""
        self._held[line] = record
        before = self.written
        while self._order and self._order[0] in self._held:
            ready = self._held.pop(self._order.popleft())
            if ready is not None:
                self._write(dumps(ready).encode("ascii"))
                self.written += 1
                self.errors += is_error(ready)
        return self.written - before

    def _write(self, data: bytes) -> None:
        """One whole record. `out` is unbuffered, so a write that fails (a full disk) leaves nothing
        behind to flush again at close, and the error is `RecordWriteError`, raised once."""
        view = memoryview(data)
        try:
            while view:
                view = view[self._out.write(view) or 0 :]
        except OSError as exc:
            raise RecordWriteError(exc.strerror or str(exc)) from exc


class RecordWriteError(Exception):
    """The output cannot take another record (its disk is full, its file system gone)."""
