"""`decodekit generate --input prompts.jsonl --output results.jsonl`: many prompts, in batches.

Consecutive prompts with the same chain and `max_new_tokens` are generated together, up to
`--batch-size` at a time. Results are appended in input order as soon as a row and every row
before it in its batch have finished, one JSON line each, flushed: an interrupted run keeps
every line it wrote, and `--resume` skips the ids already there.

Each prompt gets its own seed: the line's `seed`, else the stream that row `line - 1` of one
batch of the whole file would get from `--seed`. Batch-invariant seeding then makes a result
independent of `--batch-size`, of which other prompts share its batch, and of resuming.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeRemainingColumn,
)
from rich.text import Text

import decodekit as dk
from decodekit_cli.batch_input import Pending, PromptLine, done_ids, read_prompts
from decodekit_cli.errors import EXIT_INTERRUPTED, CliError, report_warning
from decodekit_cli.options import build_chain, chain_text, check_stop, prompt_rows, resolve_strategy
from decodekit_cli.sampling_options import SamplingOptions

__all__ = ["BatchRequest", "batch_request", "run_batch"]


@dataclass(frozen=True)
class BatchRequest:
    """The options of `decodekit generate --input`, as given."""

    input: Path
    output: Path
    sampling: SamplingOptions  # each line's defaults
    batch_size: int
    resume: bool
    on_error: str
    strategy: str = "sample"  # every line decoded with it


def batch_request(
    input_file: Path | None,
    output: Path | None,
    exclusive: dict[str, bool],
    sampling: SamplingOptions,
    *,
    batch_size: int,
    resume: bool,
    on_error: str,
    strategy: str | None = None,
) -> BatchRequest:
    """Check that the batch options go together; `exclusive`: options that make no sense with --input."""
    if input_file is None or output is None:
        raise CliError(f"{'--output' if output is None else '--input'} is missing; --input and --output go together")
    given = [name for name, is_given in exclusive.items() if is_given]
    if given:
        raise CliError(f"--input cannot be combined with {', '.join(given)}; each line of the file is one prompt")
    return BatchRequest(
        input=input_file,
        output=output,
        sampling=sampling,
        batch_size=batch_size,
        resume=resume,
        on_error=on_error,
        strategy=resolve_strategy(strategy),
    )


class _TokensPerSecond(ProgressColumn):
    def render(self, task: Task) -> Text:
        elapsed = task.elapsed or 0.0
        rate = task.fields.get("tokens", 0) / elapsed if elapsed > 0 else 0.0
        return Text(f"{rate:,.0f} tokens/s", style="progress.data.speed")


def _row_seeds(seed: int | None, count: int) -> list[int]:
    """The seed of each row of one batch of `count` rows, as the decode loop derives them (fresh
    ones without `--seed`); each result records its seed, so any result can be reproduced."""
    from decodekit.context import row_generators

    return [g.initial_seed() for g in row_generators(seed, count)]


def _batches(pending: list[Pending], size: int) -> Iterator[list[Pending]]:
    """Runs of consecutive prompts sharing chain and length, `size` at most."""
    for _, group in itertools.groupby(pending, key=lambda p: (p.chain, p.max_new_tokens)):
        rows = list(group)
        for i in range(0, len(rows), size):
            yield rows[i : i + size]


def _result(p: Pending, seed: int, tokens: list[int], text: list[str] | None, end: Any) -> dict[str, Any]:
    reason, stopped_by = end
    return {
        "id": p.id,
        "prompt": p.prompt,
        "text": "".join(text) if text is not None else None,
        "tokens": tokens,
        "finish_reason": reason,
        "stopped_by": stopped_by,
        "seed": seed,
        "chain": p.chain,
        "max_new_tokens": p.max_new_tokens,
    }


def _run_batch(
    model: Any,
    batch: list[Pending],
    seeds: list[int],
    request: BatchRequest,
    cache: str,
    out: IO[str],
    progress: Any,
) -> None:
    """Generate one batch, appending each row's result once it and the rows before it have ended."""
    n = len(batch)
    tokens: list[list[int]] = [[] for _ in range(n)]
    texts: list[list[str] | None] = [[] if getattr(model, "tokenizer", None) else None for _ in range(n)]
    ends: list[Any] = [None] * n
    written = 0
    events = dk.stream(
        model,
        prompt_rows([p.ids for p in batch]),
        strategy=request.strategy,
        chain=build_chain(batch[0].chain, {}),
        max_new_tokens=batch[0].max_new_tokens,
        cache=cache,
        stop_strings=request.sampling.stop,
        seed=seeds,
    )
    task = progress.task_ids[0]

    def write_finished() -> None:  # in input order: a row waits for the rows before it
        nonlocal written
        while written < n and ends[written] is not None:
            i = written
            out.write(json.dumps(_result(batch[i], seeds[i], tokens[i], texts[i], ends[i])) + "\n")
            out.flush()  # a line is whole once written: an interruption loses nothing written
            written += 1
            progress.advance(task)

    for ev in events:
        tokens[ev.row].append(ev.token)
        row_text = texts[ev.row]
        if ev.text is not None and row_text is not None:
            row_text.append(ev.text)
        progress.update(task, tokens=progress.tasks[0].fields["tokens"] + 1)
        if ev.finish_reason is not None:
            ends[ev.row] = (ev.finish_reason, ev.stopped_by)
        write_finished()
    ends[:] = [end or ("length", None) for end in ends]  # max_new_tokens=0: the loop yields nothing
    write_finished()


def run_batch(request: BatchRequest) -> int:
    """Run the command; return its exit status."""
    sampling = request.sampling
    name, cache = sampling.check()
    check_stop(sampling.stop)
    if request.output.exists() and not request.resume and request.output.stat().st_size > 0:
        raise CliError(f"--output {str(request.output)!r} exists; --resume continues it (or remove it)")
    model = sampling.load_model(name)
    default_chain = chain_text(sampling.chain, sampling.flags)

    def check(line: PromptLine) -> tuple[str | list[int], str]:
        chain = line.chain if line.chain is not None else default_chain
        build_chain(chain, {})  # a bad chain fails here, with its line number
        return sampling.encode(model, line.prompt), chain

    pending = read_prompts(
        request.input,
        check=check,
        default_max_new_tokens=sampling.max_new_tokens,
        on_error=request.on_error,
        warn=report_warning,
    )
    seeds = dict(zip((p.line for p in pending), _row_seeds(sampling.seed, max((p.line for p in pending), default=0))))
    skip = done_ids(request.output) if request.resume else set()
    todo = [p for p in pending if p.id not in skip]

    console = Console(stderr=True)
    columns = (TextColumn("generating"), BarColumn(), MofNCompleteColumn(), TextColumn("prompts"))
    progress = Progress(
        *columns, _TokensPerSecond(), TimeRemainingColumn(), console=console, disable=not console.is_terminal
    )
    progress.add_task("generate", total=len(todo), tokens=0)
    import torch

    try:
        with progress, request.output.open("a") as out, torch.inference_mode():
            for batch in _batches(todo, request.batch_size):
                line_seeds = [p.seed if p.seed is not None else seeds[p.line] for p in batch]
                _run_batch(model, batch, line_seeds, request, cache, out, progress)
    except KeyboardInterrupt:
        done = int(progress.tasks[0].completed)
        console.print(f"decodekit: interrupted; {done} results written to {request.output} (--resume continues)")
        return EXIT_INTERRUPTED
    except dk.ContextLengthError as exc:
        raise CliError(f"{exc} (on the command line: --cache none)") from None
    skipped = f", {len(pending) - len(todo)} already there" if skip else ""
    console.print(f"{len(todo)} results written to {request.output}{skipped}", highlight=False)
    return 0
