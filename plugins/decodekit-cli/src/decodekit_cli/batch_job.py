"""A checked batch job, and running it in this process.

`BatchJob` is what is left to do once every line has been checked: the same for the local run
below and for `decodekit_ray`, which runs it on a Ray cluster. Results are appended in input
order as soon as a row and every line before it have ended, one flushed line each, so an
interrupted run keeps every record it wrote and `--resume` continues after them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from decodekit import errors as _errors
from decodekit.errors import CompileError
from decodekit_cli.acceptance import Acceptance, DraftTotals
from decodekit_cli.batch_decode import Pending, batches, decode_records
from decodekit_cli.batch_output import OrderedWriter, RecordWriteError, sort_output
from decodekit_cli.batch_progress import BatchProgress
from decodekit_cli.batch_records import Record, is_error, record_tokens
from decodekit_cli.batch_settings import BatchSettings
from decodekit_cli.errors import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_USAGE, CliError, report_error, report_warning
from decodekit_cli.options import compile_failure

__all__ = ["BatchJob", "failed_lines", "line_of", "plural", "run_local", "summary", "warn_skipped"]

DECODEKIT_ERRORS = frozenset(_errors.__all__)


@dataclass(frozen=True)
class BatchJob:
    """The lines still to do (checked: a `Pending` or its error record), and where records go."""

    input: Path
    output: Path
    settings: BatchSettings
    todo: list[Pending | Record]  # in input order
    already_done: int  # records the output already holds (--resume)
    batch_size: int
    on_error: str  # "skip": a line that fails while decoding gets an error record; "fail": none
    # --resume over an output with a gap (an interrupted --ray run's): records appended after it are out of order
    reorder: bool = False

    @property
    def pending(self) -> list[Pending]:
        return [item for item in self.todo if isinstance(item, Pending)]

    def keeps(self, record: Record) -> bool:
        """Whether a record made while decoding is written (with --on-error fail, a failure is not)."""
        return self.on_error == "skip" or not is_error(record)


def line_of(item: Pending | Record) -> int:
    return item.line if isinstance(item, Pending) else int(item["line"])


def run_local(model: Any, job: BatchJob) -> int:
    """Decode the job's prompts here, `batch_size` at a time; return the exit status."""
    try:
        return _decode_here(model, job)
    finally:
        if job.reorder:
            sort_output(job.output)


def _decode_here(model: Any, job: BatchJob) -> int:
    progress = BatchProgress(len(job.todo))
    skipped: list[Record] = []  # error records written (--on-error skip); a job never holds the others
    failed: list[Record] = []
    drafts = DraftTotals()
    with progress, job.output.open("ab", buffering=0) as out:
        writer = OrderedWriter(out, [line_of(item) for item in job.todo])
        try:
            for item in job.todo:
                if not isinstance(item, Pending):
                    progress.advance(writer.put(item["line"], item), 0)
            for batch in batches(job.pending, job.batch_size):
                where = f"--input {job.input.name}"
                for record in decode_records(model, job.settings, batch, rows=job.batch_size, where=where):
                    keep = job.keeps(record)
                    if is_error(record):  # only a failure is kept: its line is said at the end
                        (skipped if keep else failed).append(record)
                    written = writer.put(record["line"], record if keep else None)
                    drafts.add(record)
                    progress.advance(written, record_tokens(record))
        except KeyboardInterrupt:
            records = plural(writer.written, "record")
            progress.say(f"decodekit: interrupted; {records} written to {job.output} (--resume continues)")
            return EXIT_INTERRUPTED
        except RecordWriteError as exc:
            records = plural(writer.written, "record")
            raise CliError(
                f"--output {str(job.output)!r}: cannot write a record: {exc}; {records} written (--resume continues)",
                exit_code=EXIT_FAILURE,
            ) from None
        except CompileError as exc:
            records = plural(writer.written, "record")
            raise CliError(f"{compile_failure(exc)}; {records} written (--resume continues)", EXIT_FAILURE) from None
    warn_skipped(skipped)
    progress.say(summary(job, writer.written, writer.errors, acceptance=drafts.acceptance))
    return failed_lines(failed)


def summary(job: BatchJob, written: int, errors: int, earlier: int = 0, acceptance: Acceptance | None = None) -> str:
    """The last line of a run: what it wrote, and what was there before (`earlier`: records a killed run left
    beside the output, which it holds now); a speculative job's acceptance over the records this run wrote, as
    `generate` ends its status line."""
    results = plural(written - errors, "result") + (f" and {plural(errors, 'error record')}" if errors else "")
    there = job.already_done + earlier
    before = f", {there} already there" if there else ""
    accepted = "" if acceptance is None else f" · {acceptance.shown()}"
    return f"{results} written to {job.output}{before}{accepted}"


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def failed_lines(failed: list[Record]) -> int:
    """With --on-error fail: report the lines that failed while decoding (they have no record), in line order
    (they end in decode order: by prompt length under a window cache, by part on Ray)."""
    if not failed:
        return 0
    for record in sorted(failed, key=lambda record: int(record["line"])):
        report_error(_line_failure(record))
    usage = all(r["error"]["type"] in DECODEKIT_ERRORS for r in failed)  # else a plugin's own failure
    raise CliError(
        f"{plural(len(failed), 'line')} failed while decoding and {'has' if len(failed) == 1 else 'have'} no record; "
        f"the others are written. --resume retries {'it' if len(failed) == 1 else 'them'}; --on-error skip writes an "
        "error record instead",
        exit_code=EXIT_USAGE if usage else EXIT_FAILURE,
    )


def warn_skipped(records: list[Record]) -> None:
    """With --on-error skip: say each line that failed while decoding, in line order, as the check says a bad
    line (its error record alone went unnoticed until someone read the output)."""
    for record in sorted(records, key=lambda record: int(record["line"])):
        if is_error(record):
            report_warning(f"{_line_failure(record)}; an error record is written")


def _line_failure(record: Record) -> str:
    error = record["error"]
    return f"line {record['line']} (id {record['id']!r}): {error['type']}: {error['message']}"
