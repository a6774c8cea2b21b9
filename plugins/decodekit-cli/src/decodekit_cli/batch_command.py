"""`decodekit generate --input prompts.jsonl --output results.jsonl`: many prompts, one record each.

Before any model work: the options, the output path (a directory, a missing folder, a file that
cannot be written), the lock on the output and, with `--resume`, the settings it was written
with. Then every line is checked against the model as `dk.decode` would check it; with
`--on-error fail` (the default) any bad line stops the run before generation, all of them
reported; with `skip` each gets an error record. The job then runs here (`batch_job`) or, with
`--ray`, on a Ray cluster (the `decodekit-ray` distribution).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType

from decodekit_cli.batch_decode import check_lines
from decodekit_cli.batch_input import file_digest, input_lines, input_path, is_stdin, read_input
from decodekit_cli.batch_job import BatchJob, line_of, plural, run_local
from decodekit_cli.batch_output import OutputLock, check_output, existing_records
from decodekit_cli.batch_records import Record
from decodekit_cli.batch_settings import BatchSettings
from decodekit_cli.canonical import canonical_model, canonical_stage
from decodekit_cli.errors import CliError, report_error, report_warning
from decodekit_cli.install_hints import install_hint
from decodekit_cli.options import check_stop, resolve_strategy
from decodekit_cli.returned_sequences import plan_sequences
from decodekit_cli.sampling_options import SamplingOptions, eos_tokens

__all__ = ["BatchRequest", "RayRequest", "batch_request", "ray_request", "run_batch"]


@dataclass(frozen=True)
class RayRequest:
    """`--ray [ADDRESS]` and the sizes of its actors, as given."""

    address: str  # "local": start Ray here (or join $RAY_ADDRESS)
    actors: int | None = None  # default: as many as the cluster's CPUs (or GPUs) fit
    actor_cpus: float = 1.0
    actor_gpus: float = 0.0


def ray_request(address: str | None, actors: int | None, actor_cpus: float, actor_gpus: float) -> RayRequest | None:
    """The Ray options, or None without `--ray` (then an actor size given is an error)."""
    if address is None:
        sizes = {"--ray-actors": actors is not None, "--ray-actor-cpus": actor_cpus != 1}
        sizes["--ray-actor-gpus"] = actor_gpus != 0
        given = [name for name, is_given in sizes.items() if is_given]
        if given:
            raise CliError(f"{', '.join(given)} size the actors of --ray; add --ray [ADDRESS] or remove them")
        return None
    return RayRequest(address, actors, actor_cpus, actor_gpus)


@dataclass(frozen=True)
class BatchRequest:
    """The options of `decodekit generate --input`, as given."""

    input: Path
    output: Path
    sampling: SamplingOptions  # each line's defaults
    batch_size: int
    resume: bool
    on_error: str
    strategy: str | None = None  # every line decoded with it (None: not given, the model's own or sample)
    ray: RayRequest | None = None
    logprobs: int | None = None  # every line's default (a line's own overrides it)
    prompt_logprobs: int | None = None
    n: int | None = None  # -n: every line's default sequences (None: not given, the model's own or one)


def batch_request(
    input_file: str | None,
    output: Path | None,
    exclusive: dict[str, bool],
    sampling: SamplingOptions,
    *,
    batch_size: int,
    resume: bool,
    on_error: str,
    strategy: str | None = None,
    ray: RayRequest | None = None,
    logprobs: int | None = None,
    prompt_logprobs: int | None = None,
    n: int | None = None,
) -> BatchRequest:
    """Check that the batch options go together; `exclusive`: options that make no sense with --input."""
    if input_file is None and output is None:  # only --ray: it runs a batch job, not one prompt
        raise CliError("--ray: a batch job's option; allowed: with --input FILE --output FILE")
    if input_file is None or output is None:
        raise CliError(f"{'--output' if output is None else '--input'} is missing; --input and --output go together")
    given = [name for name, is_given in exclusive.items() if is_given]
    if given:
        raise CliError(f"--input cannot be combined with {', '.join(given)}; each line of the file is one prompt")
    if ray is not None and is_stdin(input_path(input_file)):
        raise CliError(
            "--input '-' (stdin) cannot be combined with --ray: every Ray worker reads the input file "
            "itself; allowed: a file path every node can read, e.g. --input prompts.jsonl"
        )
    return BatchRequest(
        input=input_path(input_file),
        output=output,
        sampling=sampling,
        batch_size=batch_size,
        resume=resume,
        on_error=on_error,
        strategy=None if strategy is None else resolve_strategy(strategy),
        n=n,
        ray=ray,
        logprobs=logprobs,
        prompt_logprobs=prompt_logprobs,
    )


def run_batch(request: BatchRequest) -> int:
    """Run the command; return its exit status."""
    sampling = request.sampling
    name, cache = sampling.check()
    name = canonical_model(name)  # `hf:ckpt` resumed elsewhere loaded another ckpt; `hf(dtype=auto)` is `hf`
    check_stop(sampling.stop)
    settings = BatchSettings(
        model=name,
        chain=sampling.chain_text(),
        max_new_tokens=sampling.max_new_tokens,
        seed=sampling.seed,
        cache=cache,
        stop=sampling.stop,
        include_stop=sampling.include_stop,
        strategy=canonical_stage("strategy", request.strategy or "sample"),  # a draft's path as the model's: absolute
        replace_unknown=sampling.replace_unknown,
        ignore_eos=sampling.ignore_eos,
        threads=sampling.threads,
        compile=sampling.compile,
        logprobs=request.logprobs,
        prompt_logprobs=request.prompt_logprobs,
        n=request.n,  # the model's own count replaces it below where -n is not given
    )
    ray = _ray_plugin() if request.ray is not None else None
    check_output(request.output, request.input, resume=request.resume, ray=request.ray is not None)
    data = read_input(request.input)
    digest = file_digest(data)
    recorded = settings.recorded(digest)  # parses the default chain: a bad --chain fails here
    with OutputLock.acquire(request.output) as lock:
        model = None
        own_needed = request.strategy is None or not sampling.length_given or not sampling.stop or request.n is None
        if sampling.chain is None or own_needed:
            model = sampling.load_model(name)  # it may offer its own (a checkpoint's), which the settings record
            # no prompt length: each line has its own
            counted = request.n is not None or _counts_sequences(request.strategy)  # a model's count replaces neither
            own = sampling.model_settings(model, request.strategy, samples_given=counted)
            settings = replace(
                settings,
                chain=settings.chain if own.chain is None else own.chain,
                strategy=settings.strategy if own.strategy is None else canonical_stage("strategy", own.strategy),
                max_new_tokens=own.sampling.max_new_tokens,
                max_length=own.max_length,
                stop=own.sampling.stop,  # a checkpoint's stop_strings without --stop
                n=request.n if own.num_samples is None else own.num_samples,  # a checkpoint's num_return_sequences
                chain_over=None if own.chain is None else sampling,
            )
            recorded = settings.recorded(digest)
        n = settings.n
        asked = f"-n {n}" if request.n is not None else f"the model's own num_return_sequences={n} (-n replaces it)"
        plan_sequences(settings.strategy, n or 1, None if n is None else asked)  # -n beside beam's own count
        eos_refusal = lock.check_resume(recorded) if request.resume else None
        model = sampling.load_model(name) if model is None else model
        if eos_refusal is not None and eos_tokens(model, ignore_eos=False):
            raise CliError(eos_refusal)
        checked = check_lines(model, settings, input_lines(data))
        done = existing_records(request.output) if request.resume else {}
        # A bad line the output already holds a record for is done: neither reported again nor a reason to stop.
        _report_bad_lines(request, [item for item in checked if isinstance(item, dict) and item["line"] not in done])
        lock.record(recorded)
        todo = [item for item in checked if line_of(item) not in done]
        job = BatchJob(
            input=request.input,
            output=request.output,
            settings=settings,
            todo=todo,
            already_done=len(done),
            reorder=bool(todo and done) and line_of(todo[0]) < max(done),  # a gap before a record already there
            batch_size=request.batch_size,
            on_error=request.on_error,
        )
        if ray is not None and request.ray is not None:
            return int(ray.run_job(job, ray.RayOptions(**vars(request.ray))))
        return run_local(model, job)


def _counts_sequences(strategy: str | None) -> bool:
    """Whether `--strategy` names its own num_return_sequences."""
    from decodekit.chain_string import parse_stage

    return strategy is not None and "num_return_sequences" in parse_stage(strategy, what="--strategy").kwargs


def _report_bad_lines(request: BatchRequest, errors: list[Record]) -> None:
    """Every bad line, each on its line of stderr; with --on-error fail, then stop."""
    where = f"--input {request.input.name}"
    for record in errors:
        message = f"{where} line {record['line']}: {record['error']['message']}"
        if request.on_error == "fail":
            report_error(message)
        else:
            report_warning(message + "; an error record is written")
    if errors and request.on_error == "fail":
        raise CliError(
            f"{where}: {plural(len(errors), 'bad line')}, nothing generated "
            "(--on-error skip writes an error record for each and generates the rest)"
        )


def _ray_plugin() -> ModuleType:
    """`decodekit_ray.job` (run_job, RayOptions), imported only for --ray, before the model loads:
    Ray is a large dependency most runs never need."""
    try:
        return importlib.import_module("decodekit_ray.job")
    except ImportError as exc:
        if exc.name not in ("decodekit_ray", "ray"):
            raise
        missing = "decodekit-ray" if exc.name == "decodekit_ray" else "ray[data] (a dependency of decodekit-ray)"
        raise CliError(f"--ray needs {missing}; install: {install_hint(['decodekit-ray'])}") from None
