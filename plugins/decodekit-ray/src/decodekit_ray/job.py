"""`decodekit generate --input ... --output ... --ray [ADDRESS]`: the checked job, run on Ray Data.

The command has checked every line, locked the output and recorded its settings (as for a local
run); here the lines still to do are read with Ray Data, decoded by the actor pool, written as
Parquet parts and assembled into the output, sorted by line: record for record what one local
process writes. A killed run leaves its complete parts, and `--resume` counts them as done.
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path

import ray
import ray.data
from decodekit_cli.acceptance import DraftTotals
from decodekit_cli.batch_decode import Pending
from decodekit_cli.batch_job import BatchJob, failed_lines, plural, summary, warn_skipped
from decodekit_cli.batch_output import existing_records, parts_path, replace_output
from decodekit_cli.batch_progress import BatchProgress
from decodekit_cli.batch_records import dumps, is_error
from decodekit_cli.errors import EXIT_FAILURE, EXIT_INTERRUPTED, CliError
from decodekit_cli.options import compile_failure

from decodekit.errors import CompileError
from decodekit_ray.cluster import LOCAL, actor_failures_unlogged, connect
from decodekit_ray.dataset import generate_lines
from decodekit_ray.decoder import ActorSetupError
from decodekit_ray.lines import read_prompt_lines
from decodekit_ray.parts import PartsWatcher, disk_error
from decodekit_ray.ray_output import without_raylet_notes, without_restart_note

__all__ = ["RayOptions", "run_job"]


@dataclass(frozen=True)
class RayOptions:
    """Where the job runs and how big its actors are (see `decodekit_ray.generate`)."""

    address: str = LOCAL
    actors: int | None = None  # default: as many as the cluster's CPUs (or GPUs) hold
    actor_cpus: float = 1.0
    actor_gpus: float = 0.0


def run_job(job: BatchJob, options: RayOptions) -> int:
    """Run `job` on Ray and assemble its output; return the exit status."""
    parts = parts_path(job.output)
    before = existing_records(job.output)
    checked = {int(item["line"]): item for item in job.todo if not isinstance(item, Pending)}
    progress = BatchProgress(len(job.todo), "generating on Ray")
    interrupted = False
    failed: str | None = None  # an actor failed as a whole: the job stops, keeping what it wrote
    with progress:
        progress.advance(len(checked), 0)
        # Each part is read once, by the watcher: a killed run's parts first, which are done, but for a failure
        # this job does not keep (--on-error fail): --resume retries that line.
        watcher = PartsWatcher(parts, progress.advance, lines={p.line for p in job.pending})
        watcher.poll()
        done = {line for line, text in watcher.parts.records.items() if job.keeps(json.loads(text))}
        todo = [p.line for p in job.pending if p.line not in done]
        try:
            with watcher:
                if todo:
                    with without_raylet_notes():
                        _decode(job, options, todo, str(parts.resolve()))
        except KeyboardInterrupt:
            interrupted = True
        except (CompileError, ActorSetupError) as exc:  # an actor's, as Ray raises it: a RayTaskError that is one too
            failed = _failure(getattr(exc, "cause", exc))
        except OSError as exc:  # the parts' disk filled: the parts written so far are assembled, as for a failure
            full = disk_error(exc)
            if full is None:
                raise
            failed = f"--output {str(job.output)!r}: cannot write a record: {_reason(full)}"
    made = {line: json.loads(text) for line, text in watcher.parts.records.items() if line not in before}
    for said in watcher.parts.warnings_of(made):  # the actors' warnings, which the local job prints as it decodes
        warnings.warn(said, stacklevel=1)
    new = {**checked, **{line: record for line, record in made.items() if job.keeps(record)}}
    _assemble(job.output, {**{line: dumps(record) for line, record in new.items()}, **before})
    warn_skipped([record for record in made.values() if job.keeps(record)])
    ours = [record for line, record in new.items() if line not in done]  # a killed run's parts were there before
    written = plural(len(ours), "record")
    if interrupted:
        progress.say(f"decodekit: interrupted; {written} written to {job.output} (--resume continues)")
        return EXIT_INTERRUPTED
    if failed is not None:
        raise CliError(f"{failed}; {written} written (--resume continues)", EXIT_FAILURE)
    drafts = DraftTotals.of(ours).acceptance
    progress.say(summary(job, len(ours), sum(map(is_error, ours)), earlier=len(done), acceptance=drafts))
    return failed_lines([record for record in made.values() if not job.keeps(record)])


def _decode(job: BatchJob, options: RayOptions, lines: list[int], parts: str) -> None:
    """Read, decode and write the lines to do as Parquet parts (blocking until Ray is done)."""
    started = connect(options.address)
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False  # the command shows its own
    context.print_on_execution_start = False
    # An actor's CompileError or ActorSetupError arrives as one (not as "user code failed"), and Ray Data logs none.
    context.raise_original_map_exception = True
    try:
        records = generate_lines(
            read_prompt_lines(job.input, keep=set(lines)),
            job.settings,
            batch_size=job.batch_size,
            actors=options.actors,
            actor_cpus=options.actor_cpus,
            actor_gpus=options.actor_gpus,
            checked=True,
            where=f"--input {job.input.name}",
        )
        # Writing takes no CPU (the actors may hold every one) and one worker: a task free of CPUs
        # would otherwise start a Python process of its own for each block.
        # The actors start here; Ray's note on their arguments is noise.
        with without_restart_note(), actor_failures_unlogged():
            records.write_parquet(parts, ray_remote_args={"num_cpus": 0}, concurrency=1)
    finally:
        if started:
            ray.shutdown()


def _assemble(output: Path, records: dict[int, str]) -> None:
    """Write the output's records and remove the parts; where the disk cannot take the output, the parts stay."""
    parts = parts_path(output)
    try:
        replace_output(output, records)
    except OSError as exc:
        full = disk_error(exc)
        if full is None:
            raise
        raise CliError(
            f"--output {str(output)!r}: cannot assemble the records of {parts.name} into it: {_reason(full)}; they "
            "stay there, and --resume --ray continues once the disk has room for them twice",
            EXIT_FAILURE,
        ) from None
    shutil.rmtree(parts, ignore_errors=True)


def _reason(exc: OSError) -> str:
    """What the disk said ("No space left on device"), without Arrow's wording around it."""
    return os.strerror(exc.errno) if exc.errno else str(exc)


def _failure(exc: CompileError | ActorSetupError) -> str:
    """What the command says when an actor failed as a whole."""
    if isinstance(exc, CompileError):
        return compile_failure(exc)
    return str(exc).split("\n", 1)[0]  # Ray Data appends its note on retrying after a newline; ours is one line
