"""`decodekit generate`: sample text with `dk.stream`, stream it, report it as text or JSON.

Options are checked before torch is imported, so a bad flag fails at once.

Ctrl-C ends generation cleanly: what was generated so far is printed (or put in the JSON,
with `"interrupted": true`) and the exit status is 130.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import decodekit as dk
from decodekit_cli.acceptance import Acceptance
from decodekit_cli.errors import EXIT_INTERRUPTED, CliError, report_note
from decodekit_cli.json_output import print_json
from decodekit_cli.live_text import SampleWriter, TextOutput
from decodekit_cli.logprob_records import TokenTexts, prompt_records, token_records
from decodekit_cli.options import build_chain, check_stop, cli_hints, prompt_text, resolve_strategy
from decodekit_cli.result_fields import own_fields
from decodekit_cli.returned_sequences import hypotheses, plan_sequences
from decodekit_cli.sampling_options import SamplingOptions, eos_tokens

__all__ = [
    "GenerateRequest",
    "SampleResult",
    "SampleSink",
    "StreamResult",
    "run_generate",
    "stream_samples",
]


@dataclass(frozen=True)
class GenerateRequest:
    """The options of `decodekit generate`, as given."""

    prompt: str | None
    sampling: SamplingOptions
    num_samples: int | None  # -n N; None: not given (the model's own num_return_sequences, else 1)
    json_output: bool
    echo: bool
    strategy: str | None = None
    prompt_logprobs: int | None = None  # --prompt-logprobs N, reported in the JSON document
    logprobs: int | None = None  # --logprobs N: the generated tokens', reported in the JSON document


class SampleSink(Protocol):
    """Where the sampling helpers show each sample as it grows (a `SampleWriter`, or nothing)."""

    def text(self, row: int, delta: str) -> None: ...

    def finish(self, row: int) -> None: ...


class _NoSink:
    """`--json`: the samples are shown once, in the document."""

    def text(self, row: int, delta: str) -> None:
        pass

    def finish(self, row: int) -> None:
        pass


@dataclass
class SampleResult:
    """One sample: its tokens, its text (None without a tokenizer) and why it ended."""

    tokens: list[int] = field(default_factory=list)
    text: str | None = None
    finish_reason: str | None = None  # "stop", "length", or None when interrupted first
    stopped_by: int | str | None = None
    seconds: float = 0.0  # from the start until this sample ended
    logprobs: list[dict[str, Any]] | None = None  # per token, when asked (see logprob_records)
    score: float | None = None  # a beam's: its sum of log-probabilities / length ** length_penalty
    fields: dict[str, Any] = field(default_factory=dict)  # its row's entries of the strategy's own (result_fields)
    seed: int | None = None  # its own, when it is one of several samples (a batch record's too)


@dataclass
class StreamResult:
    samples: list[SampleResult]
    seconds: float
    interrupted: bool
    acceptance: Acceptance | None = None  # a speculative strategy's
    prompt_logprobs: list[dict[str, Any] | None] | None = None  # the prompt's (the samples share it), when asked

    @property
    def num_tokens(self) -> int:
        return sum(len(s.tokens) for s in self.samples)


def _rate(tokens: int, seconds: float) -> float:
    return tokens / seconds if seconds > 0 else 0.0


def stream_samples(
    model: Any,
    prompts: list[list[int]],
    options: dict[str, Any],
    sink: SampleSink,
    on_token: Callable[[int, float], None],
    hypotheses: int = 1,
) -> StreamResult:
    """Run `dk.stream(model, prompts, **options)` (copies of one prompt); Ctrl-C ends it early, keeping the samples.
    hypotheses: the sequences the strategy returns for its one copy (`Sequences.hypotheses`), shown after it."""
    import torch

    has_text = getattr(model, "tokenizer", None) is not None
    texts = TokenTexts(getattr(model, "tokenizer", None))  # each logprob's token's, and its top's
    logprobs = options.get("logprobs") is not None
    samples = [SampleResult(text="" if has_text else None, logprobs=[] if logprobs else None) for _ in prompts]
    start = time.perf_counter()
    total = 0
    interrupted = False
    events = dk.stream(model, prompts, **options)
    try:
        with torch.inference_mode():
            for ev in events:
                sample = samples[ev.row]
                sample.tokens.append(ev.token)
                if sample.logprobs is not None and ev.logprobs is not None:
                    sample.logprobs += token_records([ev.token], [ev.logprobs], texts)
                total += 1
                if ev.text is not None:
                    sample.text = (sample.text or "") + ev.text
                    sink.text(ev.row, ev.text)
                else:  # no tokenizer: show the token ids
                    sink.text(ev.row, f"{ev.token} ")
                if ev.finish_reason is not None:
                    sample.finish_reason, sample.stopped_by = ev.finish_reason, ev.stopped_by
                    sample.seconds = time.perf_counter() - start
                    sink.finish(ev.row)
                on_token(total, time.perf_counter() - start)
    except KeyboardInterrupt:
        interrupted = True
    seconds = time.perf_counter() - start
    if not interrupted:
        _ended_without_tokens(samples, events.result)
    for sample in samples:
        if sample.finish_reason is None:
            sample.seconds = seconds
    own = own_fields(events.result)  # interrupted: no result, no fields
    samples = [replace(sample, fields=own[r] if r < len(own) else {}) for r, sample in enumerate(samples)]
    if not interrupted and hypotheses > 1:  # a plugin's result may have `scores` without being asked for them
        samples = _with_hypotheses(samples, events.result, sink, texts)
    scored = None if events.result is None else _prompt_records(events.result, texts)
    return StreamResult(samples, seconds, interrupted, _acceptance(events.result), scored)


def _acceptance(result: object) -> Acceptance | None:
    """Speculative decoding's, once it is done: properties of its result, not fields (another strategy's field named
    `acceptance_rate` is not one: result_fields leaves it out); None for another strategy, or no result."""
    if not all(isinstance(getattr(type(result), name, None), property) for name in Acceptance.names):
        return None
    rate, length = (getattr(result, name) for name in Acceptance.names)
    return Acceptance(_number(rate), _number(length))


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _with_hypotheses(
    samples: list[SampleResult], result: Any, sink: SampleSink, texts: TokenTexts
) -> list[SampleResult]:
    """A beam search's samples: the streamed best hypothesis, then the others it returned, best first (each shown
    once the search is done), each with its score. Another strategy's samples are as streamed."""
    scores = getattr(result, "scores", None)
    if not scores or len(samples) != 1:  # not a beam search (a beam search decodes one copy of the prompt)
        return samples
    best = replace(samples[0], score=scores[0][0])
    others = [  # the row's fields, which every hypothesis of it shares
        SampleResult(**h, seconds=best.seconds, fields=best.fields)
        for h in hypotheses(result, 0, best.logprobs is not None, texts)[1:]
    ]
    for row, sample in enumerate(others, 1):
        sink.text(row, sample.text if sample.text is not None else "".join(f"{token} " for token in sample.tokens))
        sink.finish(row)
    return [best, *others]


def _ended_without_tokens(samples: list[SampleResult], result: Any) -> None:
    """A sample that had no token to stream (--max-new-tokens 0) ended all the same: the finished
    result says why ("length"); its finish_reason is None only when Ctrl-C ended the run."""
    reasons = getattr(result, "finish_reasons", None) or []  # a strategy's own result type may have none
    stopped = getattr(result, "stopped_by", None) or [None] * len(reasons)
    for sample, reason, stopped_by in zip(samples, reasons, stopped):
        if sample.finish_reason is None:
            sample.finish_reason, sample.stopped_by = reason, stopped_by


def _status_line(tokens: int, seconds: float, num_samples: int, acceptance: Acceptance | None = None) -> str:
    rows = f" ({num_samples} samples)" if num_samples > 1 else ""
    accepted = f" · {acceptance.shown()}" if acceptance is not None else ""
    return f"{tokens} tokens{rows} · {seconds:.1f} s · {_rate(tokens, seconds):.1f} tokens/s{accepted}"


def _json_document(
    request: GenerateRequest, model: str, prompt: str, chain: dk.Chain, cache: str, result: StreamResult
) -> dict[str, Any]:
    return {
        "model": model,
        "prompt": prompt,
        "chain": str(chain),
        "chain_spec": chain.to_spec(),
        "cache": cache,
        "strategy": request.strategy,  # run_generate has set the one it ran
        "seed": request.sampling.seed,
        "max_new_tokens": request.sampling.max_new_tokens,
        "stop": list(request.sampling.stop),
        "include_stop": request.sampling.include_stop,
        "ignore_eos": request.sampling.ignore_eos,
        "samples": [
            {
                "text": s.text,
                "tokens": s.tokens,
                "finish_reason": s.finish_reason,
                "stopped_by": s.stopped_by,
                "tokens_per_second": round(_rate(len(s.tokens), s.seconds), 2),
                **({} if request.logprobs is None else {"logprobs": s.logprobs}),
                **({} if s.score is None else {"score": s.score}),
                **({} if s.seed is None else {"seed": s.seed}),
                **s.fields,
            }
            for s in result.samples
        ],
        "tokens_per_second": round(_rate(result.num_tokens, result.seconds), 2),
        "seconds": round(result.seconds, 4),
        "interrupted": result.interrupted,
        **({} if result.acceptance is None else result.acceptance.records()),
        **({} if result.prompt_logprobs is None else {"prompt_logprobs": result.prompt_logprobs}),
    }


def _prompt_records(result: dk.Generation, texts: TokenTexts) -> list[dict[str, Any] | None] | None:
    """`--prompt-logprobs`, of the first sample (all share the prompt)."""
    if result.prompt_logprobs is None:
        return None
    return prompt_records(result.prompt_tokens[0], result.prompt_logprobs[0], texts)


def run_generate(request: GenerateRequest) -> int:
    """Run the command; return its exit status."""
    sampling = request.sampling.seeded()
    check_stop(sampling.stop)
    for flag, n in (("--logprobs", request.logprobs), ("--prompt-logprobs", request.prompt_logprobs)):
        if n is not None and not request.json_output:
            raise CliError(f"{flag} {n}: reported in the JSON document; add --json")
    strategy = resolve_strategy(request.strategy)  # before check(), whose note on the cache would precede its error
    asked = None if request.num_samples is None else f"-n {request.num_samples}"
    plan_sequences(strategy, request.num_samples or 1, asked)  # -n past num_beams fails before the model loads
    name, cache = sampling.check()
    chain = build_chain(sampling.chain_text(), sampling.chain)  # a bad chain or flag fails before the model loads
    prompt = prompt_text(request.prompt)
    model = sampling.load_model(name)
    from decodekit.context import row_seeds  # torch is loaded by now
    from decodekit.engine import PREALLOCATED_COLUMNS, check_rows

    encoded = sampling.encode(model, prompt)
    prompt = sampling.seen_prompt(model, prompt, encoded)
    length = len(encoded)
    own = sampling.model_settings(model, request.strategy, length, samples_given=asked is not None)
    chain = chain if own.chain is None else build_chain(own.chain)
    strategy, sampling = own.strategy or strategy, own.sampling
    if own.num_samples is not None:  # the checkpoint's num_return_sequences: as if -n N were given
        asked = f"the model's own num_return_sequences={own.num_samples} (-n replaces it)"
    plan = plan_sequences(strategy, own.num_samples or request.num_samples or 1, asked, own.num_samples is not None)
    strategy = plan.strategy
    shown = plan.copies * plan.hypotheses  # the sequences shown: samples, or beams
    request = replace(request, sampling=sampling, strategy=strategy, num_samples=shown)  # as the JSON records
    # Sized before anything holds a sample: -n far past the memory hung (or overflowed) building the lists.
    columns = len(encoded) + min(sampling.max_new_tokens, PREALLOCATED_COLUMNS)
    check_rows("generate", "--num-samples", plan.copies, plan.copies, columns, model)
    seeds = row_seeds(sampling.seed, 1, plan.copies)  # the copies', as a batch job's line 1 seeds its `n` samples
    options = {
        "strategy": strategy,
        "chain": chain,
        "max_new_tokens": sampling.max_new_tokens,
        "cache": cache,
        "stop_strings": sampling.stop,
        "include_stop_str_in_output": sampling.include_stop,
        "stop_tokens": eos_tokens(model, sampling.ignore_eos),
        "seed": seeds,
        "compile": sampling.compile,
        "prompt_logprobs": request.prompt_logprobs,
        "logprobs": request.logprobs,
    }

    with TextOutput(text=not request.json_output) as out, cli_hints():
        writer = None if request.json_output else SampleWriter(out, shown, prompt if request.echo else "")
        sink: SampleSink = writer if writer is not None else _NoSink()

        def on_token(tokens: int, seconds: float) -> None:
            out.status(_status_line(tokens, seconds, shown))

        if sampling.compile:  # the first tokens wait for torch's compiler: say why nothing shows yet
            out.status("compiling the model and the chain (--compile) ...")
        result = stream_samples(model, [encoded] * plan.copies, options, sink, on_token, plan.hypotheses)
        if plan.copies > 1 and seeds is not None:
            for sample, seed in zip(result.samples, seeds):
                sample.seed = seed
        if writer is not None:
            writer.close(len(result.samples))  # a beam search interrupted, or of no steps: one sample
    if plan.hypotheses > 1 and not result.interrupted and sampling.max_new_tokens > 0 and len(result.samples) < shown:
        report_note(
            f"the beam search found {len(result.samples)} of the {shown} hypotheses asked: the chain removes every "
            "other continuation (a chain that keeps more tokens, such as --chain greedy, lets it find them)"
        )

    if request.json_output:
        print_json(_json_document(request, name, prompt, chain, cache, result))
    if out.show_status:
        out.console.print(
            _status_line(result.num_tokens, result.seconds, shown, result.acceptance),
            style="dim",
            highlight=False,
        )
    if result.interrupted:
        out.console.print(f"decodekit: interrupted after {result.num_tokens} tokens", highlight=False)
        return EXIT_INTERRUPTED
    return 0
