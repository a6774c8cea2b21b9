"""The `decodekit` commands and how they report errors.

This module imports no torch: each command imports what it needs when it runs, so
`decodekit --help` and `decodekit plugins` start quickly.
"""

from __future__ import annotations

import os
import re
import sys
import warnings
from collections.abc import Callable, Sequence
from enum import Enum, StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Protocol, cast

import typer
from typer.exceptions import TyperException

from decodekit_cli.bare_ray_flag import bare_ray_flag
from decodekit_cli.defaults import DEFAULT_CHAIN, DEFAULT_MAX_NEW_TOKENS, DEFAULT_MODEL
from decodekit_cli.errors import (
    EXIT_BROKEN_PIPE,
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    CliError,
    report_error,
    report_warning,
)
from decodekit_cli.torch_logs import torch_warnings_in_one_line

if TYPE_CHECKING:
    from decodekit.registry import Category

__all__ = ["app", "run"]

SAMPLING = "Sampling (choose --chain or the flags)"
BATCH = "Many prompts (--input FILE --output FILE)"
GRAMMAR = "Structured output (decodekit-grammar; one of them)"


class OnError(StrEnum):
    skip = "skip"
    fail = "fail"


class PluginKind(StrEnum):
    sampler = "sampler"
    cache = "cache"
    model = "model"
    strategy = "strategy"


class _CtrlCError(Exception):
    """Ctrl-C inside a command. typer turns a KeyboardInterrupt into a silent exit status 130; this
    passes through typer to `run`, which says so on stderr."""


class _BrokenPipeError(Exception):
    """stdout's reader went away (`decodekit ... | head`). click turns a BrokenPipeError into a silent
    exit status 1, a failure like any other; this passes through click to `run`, which exits as
    `yes | head` does."""


def _caused_by_ctrl_c(exc: BaseException) -> bool:
    """Whether a KeyboardInterrupt is behind `exc`: the registry reports Ctrl-C while it imports a
    plugin as that plugin's PluginError, raised from the KeyboardInterrupt."""
    cause = exc.__cause__
    while cause is not None:
        if isinstance(cause, KeyboardInterrupt):
            return True
        cause = cause.__cause__
    return False


class _Commands(typer.core.TyperGroup):
    """The command group; Ctrl-C in any command (while a model loads, a plugin imports) is `_CtrlCError`."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt as exc:
            raise _CtrlCError() from exc
        except BrokenPipeError as exc:
            raise _BrokenPipeError() from exc
        except Exception as exc:
            if _caused_by_ctrl_c(exc):
                raise _CtrlCError() from exc
            raise


app = typer.Typer(
    name="decodekit",
    cls=_Commands,
    help="Sample from autoregressive language models with composable, plugin-provided samplers.",
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def integer(least: int | None = None) -> dict[str, Any]:
    """An integer option's arguments to `typer.Option`: its value is digits with an optional sign, at least `least`
    (typer reads through pydantic, which takes "2.0" as 2; a parser replaces that reading, and its `min` check)."""

    def parse(text: str | int) -> int:
        if isinstance(text, int):  # the option's default
            return text
        if not re.fullmatch(r"[+-]?[0-9]+", text.strip()) or (least is not None and int(text) < least):
            raise ValueError(f"allowed: an integer{'' if least is None else f' >= {least}'}")
        return int(text)

    return {"parser": parse, "min": least}  # min: the help's "[x>=1]"


def parse_seed(text: str | int) -> int:
    """`--seed`: an integer in dk.generate's range, so that -1 (llama.cpp's "a random seed") is not a fixed one."""
    if isinstance(text, str) and (not re.fullmatch(r"[+-]?[0-9]+", text.strip()) or not 0 <= int(text) < 2**64):
        raise ValueError(
            "allowed: an integer, 0 <= seed < 2**64; leave --seed out for a fresh seed each run (llama.cpp's -1)"
        )
    return int(text)


# Options shared by `generate` and `explain`.
ModelOption = Annotated[
    str | None,
    typer.Option(
        "--model",
        "-m",
        help=f"Registered model name, or prefix:argument (e.g. hf:/path); parameters in brackets: 'name(n_layer=3)'. "
        f"Default: {DEFAULT_MODEL}.",
    ),
]
ChainOption = Annotated[
    str | None,
    typer.Option(
        "--chain",
        "-c",
        help='Sampler chain, e.g. "repetition_penalty(1.1) | temperature(0.8) | top_p(0.9)". '
        "A final selector (sample, greedy) is optional; sample is the default. "
        'Or a JSON chain spec: \'[{"name": "top_k", "params": {"k": 40}}]\'.',
        rich_help_panel=SAMPLING,
    ),
]
TemperatureOption = Annotated[
    float | None, typer.Option("--temperature", help="Divide logits by T (0: greedy).", rich_help_panel=SAMPLING)
]
TopKOption = Annotated[
    int | None, typer.Option("--top-k", **integer(), help="Keep the k most likely tokens.", rich_help_panel=SAMPLING)
]
TopPOption = Annotated[
    float | None,
    typer.Option("--top-p", help="Keep the smallest set of tokens with probability >= p.", rich_help_panel=SAMPLING),
]
RepetitionPenaltyOption = Annotated[
    float | None,
    typer.Option(
        "--repetition-penalty", help="Penalise tokens already in the context (1: none).", rich_help_panel=SAMPLING
    ),
]
SeedOption = Annotated[
    int | None,
    typer.Option("--seed", "-s", parser=parse_seed, min=0, help="Random seed; the same seed gives the same text."),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")]
CacheOption = Annotated[
    str | None,
    typer.Option(
        "--cache",
        help="KV-cache backend: none (recompute every step), dense, gqa, or any installed backend. "
        "Default: dense when installed, else none (with a note saying how to install dense).",
    ),
]
IgnoreEosOption = Annotated[
    bool,
    typer.Option(
        "--ignore-eos",
        help="Go on past the model's end-of-sequence token (an hf: model's stop_tokens). Default: a sample "
        "ends at it, as transformers' generate() does.",
    ),
]
ReplaceUnknownOption = Annotated[
    bool,
    typer.Option(
        "--replace-unknown",
        help="Map prompt characters the tokenizer does not know to its replacement (errors='replace') "
        "instead of failing.",
    ),
]
# generate's and explain's: a grammar stage first in the chain (grammar_options.grammar_stage)
JsonSchemaOption = Annotated[
    Path | None,
    typer.Option("--json-schema", help="Generate JSON valid under this JSON Schema file.", rich_help_panel=GRAMMAR),
]
RegexOption = Annotated[
    str | None, typer.Option("--regex", help="Generate text this regular expression matches.", rich_help_panel=GRAMMAR)
]
GrammarOption = Annotated[
    Path | None,
    typer.Option(
        "--grammar",
        help="Generate a sentence of this grammar file: GBNF (llama.cpp's) for a .gbnf file, else Lark.",
        rich_help_panel=GRAMMAR,
    ),
]

FLAGS_HELP = (
    "The sampling flags build the chain in Hugging Face's order: repetition_penalty, temperature, "
    f"top_k, top_p, then sample. With neither --chain nor flags the chain is the model's own (an hf: checkpoint's "
    f"generation_config; the flags set over it one by one) or else `{DEFAULT_CHAIN} | sample`."
)


def _version(value: bool) -> None:
    if value:
        from decodekit import __version__

        typer.echo(f"decodekit {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Show the version and exit."),
    ] = False,
) -> None:
    """Sample from autoregressive language models with composable, plugin-provided samplers."""


@app.command(help="Generate text from a prompt, streaming it as it is sampled.\n\n" + FLAGS_HELP)
def generate(
    prompt: Annotated[
        str | None,
        typer.Argument(
            help="Text to continue; '-' reads it from stdin (one trailing newline dropped). Default: a newline.",
            show_default=False,
        ),
    ] = None,
    model: ModelOption = None,
    chain: ChainOption = None,
    temperature: TemperatureOption = None,
    top_k: TopKOption = None,
    top_p: TopPOption = None,
    repetition_penalty: RepetitionPenaltyOption = None,
    max_new_tokens: Annotated[
        int | None,
        typer.Option(
            "--max-new-tokens",
            **integer(least=0),
            help="Tokens to generate per sample. Default: the model's own (an hf: checkpoint's generation config), "
            f"else {DEFAULT_MAX_NEW_TOKENS}.",
            show_default=False,
        ),
    ] = None,
    seed: SeedOption = None,
    cache: CacheOption = None,
    strategy: Annotated[
        str | None,
        typer.Option(
            "--strategy",
            help='Decode strategy and its parameters, e.g. "beam(num_beams=4)" (decodekit samplers lists them). '
            "Default: sample, which streams; the others print each sample when it is done.",
        ),
    ] = None,
    num_samples: Annotated[
        int | None,
        typer.Option(
            "--num-samples",
            "-n",
            **integer(least=1),
            help="Samples of the same prompt, each with its own seed; under beam search its N best beams "
            "(num_return_sequences=N, N <= num_beams); with --input, every line's (a line's own n wins). "
            "Default: the model's own num_return_sequences, else 1.",
            show_default=False,
        ),
    ] = None,
    stop: Annotated[
        list[str] | None, typer.Option("--stop", help="Stop a sample when its text contains this (repeatable).")
    ] = None,
    include_stop: Annotated[
        bool,
        typer.Option(
            "--include-stop",
            help="Keep the stop string, or the stop token's text (none for a special token such as EOS), that "
            "ended a sample at the end of its text (vLLM's include_stop_str_in_output). Default: the text ends "
            "before it.",
        ),
    ] = False,
    json_output: JsonOption = False,
    prompt_logprobs: Annotated[
        int | None,
        typer.Option(
            "--prompt-logprobs",
            **integer(least=0),
            metavar="N",
            help="Put in the --json document each prompt token's log-probability under the model, its rank and the "
            "N most likely tokens (vLLM's prompt_logprobs); with --max-new-tokens 0, scoring alone. With --input: "
            "in every record (a line's own prompt_logprobs overrides it).",
        ),
    ] = None,
    logprobs: Annotated[
        int | None,
        typer.Option(
            "--logprobs",
            **integer(least=0),
            metavar="N",
            help="Put in the --json document each generated token's log-probability under the model and after the "
            "chain, each with the N most likely tokens (vLLM's logprobs). With --input: in every record (a line's "
            "own logprobs overrides it).",
        ),
    ] = None,
    json_schema: JsonSchemaOption = None,
    regex: RegexOption = None,
    grammar_file: GrammarOption = None,
    echo: Annotated[bool, typer.Option("--echo/--no-echo", help="Print the prompt before the generated text.")] = True,
    threads: Annotated[
        int | None,
        typer.Option(
            "--threads",
            **integer(least=1),
            help="CPU threads for torch, at most the CPUs this process can use. Default: 1 for models under "
            "20M parameters (their per-token work is too small to split, and a busy second core stalls every "
            "step), else torch's default.",
        ),
    ] = None,
    compile: Annotated[
        bool,
        typer.Option(
            "--compile",
            help="Run the model's forward and the chain's step under torch.compile: the same tokens, each step "
            "faster, but every run compiles first (tens of seconds; seconds with inductor's cache on disk): for "
            "long jobs.",
        ),
    ] = False,
    replace_unknown: ReplaceUnknownOption = False,
    ignore_eos: IgnoreEosOption = False,
    input_file: Annotated[
        str | None,
        typer.Option(
            "--input",
            help="JSONL of prompts, one object per line: prompt (text) or prompt_token_ids (token ids), and "
            "optionally id, seed, max_new_tokens, chain, logprobs, prompt_logprobs, and one of json_schema, regex, "
            "grammar; '-' reads them from stdin. Needs --output; the options give the defaults.",
            rich_help_panel=BATCH,
        ),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            help="JSONL of records, one per input line (a result or an error), written as they finish.",
            rich_help_panel=BATCH,
        ),
    ] = None,
    batch_size: Annotated[
        int,
        typer.Option(
            "--batch-size",
            **integer(least=1),
            help="Sequences generated together (a line of n samples counts n).",
            rich_help_panel=BATCH,
        ),
    ] = 8,
    resume: Annotated[
        bool,
        typer.Option("--resume", help="Continue --output: only the lines it has no record for.", rich_help_panel=BATCH),
    ] = False,
    on_error: Annotated[
        OnError,
        typer.Option(
            "--on-error",
            help="A bad input line: write an error record for it (skip) or stop before generating (fail).",
            rich_help_panel=BATCH,
        ),
    ] = OnError.fail,
    ray: Annotated[
        str | None,
        typer.Option(
            "--ray",
            metavar="[ADDRESS]",
            help="Run the job on Ray (decodekit-ray): alone, a Ray started here (or $RAY_ADDRESS); auto, the "
            "cluster `ray start` runs here; HOST:PORT or ray://HOST:10001, a remote one.",
            rich_help_panel=BATCH,
        ),
    ] = None,
    ray_actors: Annotated[
        int | None,
        typer.Option(
            "--ray-actors",
            **integer(least=1),
            help="Ray actors, each with a model (default: all that fit).",
            rich_help_panel=BATCH,
        ),
    ] = None,
    ray_actor_cpus: Annotated[
        float, typer.Option("--ray-actor-cpus", min=0, help="CPUs each Ray actor holds.", rich_help_panel=BATCH)
    ] = 1.0,
    ray_actor_gpus: Annotated[
        float, typer.Option("--ray-actor-gpus", min=0, help="GPUs each Ray actor holds.", rich_help_panel=BATCH)
    ] = 0.0,
) -> None:
    from decodekit_cli.grammar_options import grammar_stage  # a grammar stage first in the chain
    from decodekit_cli.sampling_options import SamplingOptions

    sampling = SamplingOptions(
        model=model,
        chain=chain,
        flags=_flags(temperature, top_k, top_p, repetition_penalty),
        max_new_tokens=DEFAULT_MAX_NEW_TOKENS if max_new_tokens is None else max_new_tokens,
        length_given=max_new_tokens is not None,
        seed=seed,
        cache=cache,
        stop=tuple(stop or ()),
        include_stop=include_stop,
        threads=threads,
        replace_unknown=replace_unknown,
        compile=compile,
        ignore_eos=ignore_eos,
        grammar=grammar_stage(json_schema, regex, grammar_file),
    )
    from decodekit_cli.batch_command import batch_request, ray_request, run_batch

    if input_file is not None or output is not None or ray is not None:
        given = {
            "PROMPT": prompt is not None,
            "--json": json_output,
            "--no-echo": not echo,  # records hold the prompt and the text apart: nothing is echoed
        }
        batch = batch_request(
            input_file,
            output,
            given,
            sampling,
            batch_size=batch_size,
            resume=resume,
            on_error=on_error.value,
            strategy=strategy,
            ray=ray_request(ray, ray_actors, ray_actor_cpus, ray_actor_gpus),
            logprobs=logprobs,
            prompt_logprobs=prompt_logprobs,
            n=num_samples,
        )
        raise typer.Exit(run_batch(batch))
    from decodekit_cli.generate_command import GenerateRequest, run_generate

    # Without --input a batch option would be ignored: `--resume` would start over, silently.
    batch_only = {"--batch-size": batch_size != 8, "--resume": resume, "--on-error": on_error is not OnError.fail}
    if stray := [name for name, is_given in batch_only.items() if is_given]:
        raise CliError(f"{', '.join(stray)}: a batch job's option; allowed: with --input FILE --output FILE")
    if json_output and not echo:  # the document holds the prompt and the text apart: nothing is echoed
        raise CliError("--no-echo does nothing with --json (its document holds the prompt and the text apart)")
    ray_request(None, ray_actors, ray_actor_cpus, ray_actor_gpus)  # an actor size without --ray is an error
    request = GenerateRequest(
        prompt=prompt,
        sampling=sampling,
        num_samples=num_samples,
        json_output=json_output,
        echo=echo,
        strategy=strategy,
        prompt_logprobs=prompt_logprobs,
        logprobs=logprobs,
    )
    raise typer.Exit(run_generate(request))


@app.command(
    help="Show how each stage of a chain reshapes the next-token distribution, step by step.\n\n"
    "For every generated step: the tokens that survive each stage (finite logits), the entropy "
    "in nats, and the most likely candidates with their probabilities. " + FLAGS_HELP
)
def explain(
    prompt: Annotated[
        str, typer.Argument(help="Text to continue; '-' reads it from stdin (one trailing newline dropped).")
    ],
    model: ModelOption = None,
    chain: ChainOption = None,
    temperature: TemperatureOption = None,
    top_k: TopKOption = None,
    top_p: TopPOption = None,
    repetition_penalty: RepetitionPenaltyOption = None,
    steps: Annotated[int, typer.Option("--steps", **integer(least=1), help="Tokens to generate and explain.")] = 5,
    top: Annotated[int, typer.Option("--top", **integer(least=1), help="Candidates to show per stage.")] = 5,
    seed: SeedOption = None,
    cache: CacheOption = None,
    replace_unknown: ReplaceUnknownOption = False,
    ignore_eos: IgnoreEosOption = False,
    plot: Annotated[
        Path | None,
        typer.Option("--plot", help="Write a PNG: top-candidate probabilities after each stage at --plot-step."),
    ] = None,
    plot_step: Annotated[int, typer.Option("--plot-step", **integer(least=0), help="The step --plot draws.")] = 0,
    json_output: JsonOption = False,
    json_schema: JsonSchemaOption = None,
    regex: RegexOption = None,
    grammar_file: GrammarOption = None,
) -> None:
    from decodekit_cli.explain_command import ExplainRequest, run_explain
    from decodekit_cli.grammar_options import grammar_stage
    from decodekit_cli.sampling_options import SamplingOptions

    sampling = SamplingOptions(
        model=model,
        chain=chain,
        flags=_flags(temperature, top_k, top_p, repetition_penalty),
        max_new_tokens=steps,  # explain's steps are its new tokens
        seed=seed,
        cache=cache,
        stop=(),
        replace_unknown=replace_unknown,
        ignore_eos=ignore_eos,
        grammar=grammar_stage(json_schema, regex, grammar_file),
    )
    request = ExplainRequest(prompt, sampling, top=top, plot=plot, plot_step=plot_step, json_output=json_output)
    raise typer.Exit(run_explain(request))


@app.command(
    help="List the installed plugin distributions, what each registers, plugins that failed and names registered twice."
)
def plugins(
    json_output: JsonOption = False,
    check: Annotated[
        bool,
        typer.Option(
            "--check", help="Also import every implementation registered by path; exit status 1 if anything is broken."
        ),
    ] = False,
) -> None:
    from decodekit_cli.json_output import print_json
    from decodekit_cli.listing import plugins_report, render_plugins

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # load failures are part of the listing
        report = plugins_report(check=check)
    if json_output:
        print_json(report)
    else:
        render_plugins(report)
    if check and (report["failures"] or report["conflicts"] or report["broken"]):
        raise typer.Exit(1)


@app.command(
    help="List every registered sampler with its parameters, bounds and defaults, then the cache backends, "
    "the decode strategies and the models; with NAMES, only those."
)
def samplers(
    names: Annotated[
        list[str] | None,
        typer.Argument(
            help="Show only these samplers, cache backends, strategies or models (default: all).", show_default=False
        ),
    ] = None,
    json_output: JsonOption = False,
) -> None:
    from decodekit_cli.listing import samplers_report

    _print_listing(samplers_report(names or ()), json_output)


ListedNames = Annotated[
    list[str] | None, typer.Argument(help="Show only these, by name (default: all).", show_default=False)
]


@app.command(help="List the cache backends (--cache) and their parameters; with NAMES, only those.")
def caches(names: ListedNames = None, json_output: JsonOption = False) -> None:
    _list_section("cache backend", names or [], json_output)


@app.command(help="List the strategies (--strategy) and their parameters; with NAMES, only those.")
def strategies(names: ListedNames = None, json_output: JsonOption = False) -> None:
    _list_section("strategy", names or [], json_output)


@app.command(help="List the models (--model) and their parameters; with NAMES, only those.")
def models(names: ListedNames = None, json_output: JsonOption = False) -> None:
    _list_section("model", names or [], json_output)


def _list_section(category: Category, names: list[str], json_output: bool) -> None:
    """One section of `decodekit samplers`' listing."""
    from decodekit_cli.listing import section_report

    _print_listing(section_report(category, names), json_output)


def _print_listing(report: dict[str, Any], json_output: bool) -> None:
    from decodekit_cli.json_output import print_json
    from decodekit_cli.listing import render_samplers

    if json_output:
        print_json(report)
    else:
        render_samplers(report)


cache_app = typer.Typer(
    help="KV-cache tools: calibrate a model's attention windows (decodekit caches lists the backends).",
    no_args_is_help=True,
)
app.add_typer(cache_app, name="cache")


@cache_app.command(
    help="Measure each head's mean attention weight a(d) at distance d on held-out text, fit "
    "a(d) ≈ C·d^-γ (or an exponential, whichever fits the layer's mean better), and derive each layer's "
    "window D_f: the longest distance at which one of its heads' fits still gives a key 1/T. "
    '--json prints the calibration window(size="auto") reads: an hf: model\'s calibration.json beside its '
    "weights; a model loader of your own passes the file's path as ModelSpec(calibration=...)."
)
def calibrate(
    model: ModelOption = None,
    text: Annotated[
        Path | None, typer.Option("--text", help="Held-out UTF-8 text (default: the shipped Hamlet).")
    ] = None,
    sinks: Annotated[int, typer.Option("--sinks", **integer(), help="Leading positions reported apart as sinks.")] = 4,
    windows: Annotated[
        int | None,
        typer.Option("--windows", **integer(), help="Measure at most this many contexts, spread over the text."),
    ] = None,
    json_output: JsonOption = False,
    plot: Annotated[Path | None, typer.Option("--plot", help="Draw a(d), the fits and D_f to a PNG.")] = None,
) -> None:
    from decodekit_cli.calibrate_command import CalibrateRequest, run_calibrate

    request = CalibrateRequest(model or DEFAULT_MODEL, text, sinks, windows, json_output, plot)
    raise typer.Exit(run_calibrate(request))


@app.command(
    "new-plugin",
    help="Write a complete plugin distribution to start from: pyproject with the entry point, a parameter "
    "model, a working example, a README and tests that run the conformance kit. It passes "
    "`pip install -e 'DIR\\[test]' && pytest DIR` as written.",  # \\[: not rich markup
)
def new_plugin(
    name: Annotated[str, typer.Argument(help="The name it registers (lowercase, digits, _): softcap, my_cache.")],
    kind: Annotated[
        PluginKind,
        typer.Option(
            "--kind",
            help="What the plugin provides. sampler: a processor; a selector is a sampler registered with "
            "kind='selector' (docs/plugins.md).",
        ),
    ] = PluginKind.sampler,
    directory: Annotated[
        Path | None, typer.Option("--dir", help="Where to write it. Default: ./decodekit-NAME.", show_default=False)
    ] = None,
    force: Annotated[
        bool,
        typer.Option("--force", help="Write it even if NAME is registered or its distribution installed already."),
    ] = False,
) -> None:
    from decodekit_cli.new_plugin import write_plugin

    raise typer.Exit(write_plugin(name, kind.value, directory, force=force))


def _flags(
    temperature: float | None, top_k: int | None, top_p: float | None, repetition_penalty: float | None
) -> dict[str, float | int | None]:
    """The flat sampling flags by option name (the chain builder knows their order)."""
    return {
        "--repetition-penalty": repetition_penalty,
        "--temperature": temperature,
        "--top-k": top_k,
        "--top-p": top_p,
    }


def _each_text_once() -> Callable[..., None]:
    """`warnings.showwarning` for one command: each text once (a batch job's decodes may warn alike, one a batch, and
    the `catch_warnings` around them resets Python's own once per place; a Ray job says each text once too)."""
    shown: set[str] = set()

    def show(
        message: Warning | str, category: type[Warning], filename: str, lineno: int, file: Any = None, line: Any = None
    ) -> None:
        if str(message) not in shown:
            shown.add(str(message))
            report_warning(str(message))

    return show


class _UsageError(Protocol):
    exit_code: int
    ctx: Any  # the click context of the command, when known

    def format_message(self) -> str: ...


def _usage_message(usage: _UsageError) -> str:
    """A usage error in one line, pointing at the command's help."""
    ctx = getattr(usage, "ctx", None)
    if ctx is None:
        return usage.format_message()
    # A group run without a command (`decodekit cache`): its help is printed already, and its
    # message is empty (typer's own handler shows nothing for it either, by the class name).
    if type(usage).__name__ == "NoArgsIsHelpError":
        return f"'{ctx.command_path}' needs a command; allowed: {', '.join(ctx.command.list_commands(ctx))}"
    message = _other_flag_message(usage) or _bad_value_message(usage) or usage.format_message()
    return f"{message} (see '{ctx.command_path} --help')"


def _other_flag_message(usage: _UsageError) -> str | None:
    """llama.cpp's sampling flag given to a command that samples (one with --chain): what gives it here, in place of
    click's guess at a close name; None for any other usage error."""
    from decodekit_cli.other_flags import other_flag_hint

    flag, command = getattr(usage, "option_name", None), getattr(getattr(usage, "ctx", None), "command", None)
    samples = any("--chain" in getattr(param, "opts", ()) for param in getattr(command, "params", ()))
    hint = other_flag_hint(flag) if type(usage).__name__ == "NoSuchOption" and samples and flag else None
    return None if hint is None else f"No such option: {flag}; {hint}"


def _bad_value_message(usage: _UsageError) -> str | None:
    """An option value typer refused through pydantic: its message gives neither the value nor, for a
    choice, the close one, and says "Value error, "; None for any other usage error."""
    from pydantic import ValidationError

    from decodekit.errors import did_you_mean

    cause, param = getattr(usage, "__cause__", None), getattr(usage, "param", None)
    opts: list[str] = getattr(param, "opts", None) or []
    if not isinstance(cause, ValidationError) or not opts:
        return None
    error = cause.errors()[0]
    value, message = str(error.get("input")), error["msg"].removeprefix("Value error, ").rstrip(".")
    choices = getattr(getattr(param, "type_descriptor", None), "annotation", None)  # the option's Enum, if any
    if isinstance(choices, type) and issubclass(choices, Enum):
        message += did_you_mean(value, [c.value for c in choices])
    shown = "" if repr(value) in message else f"{value!r}: "
    option = " / ".join(repr(o) for o in opts)  # "'--seed' / '-s'", as click names it
    return f"Invalid value for {option}: {shown}{message}"


def _quiet_after_broken_pipe() -> int:
    """Python's advice for SIGPIPE (`signal` docs): what is still to be written, and its flush at
    exit, goes to devnull; the status is the one shells report for a process SIGPIPE ended."""
    for stream in (sys.stdout, sys.stderr):  # either may be the closed pipe (`2>&1 | head`)
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, stream.fileno())
            os.close(devnull)
        except (AttributeError, OSError, ValueError):  # a stream without a file descriptor (a test's StringIO)
            pass
    return EXIT_BROKEN_PIPE


def run(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status. Errors are one line on stderr, never a traceback."""
    from decodekit.errors import DecodekitError
    from decodekit.param_types import json_words

    args = bare_ray_flag(list(sys.argv[1:] if argv is None else argv) or ["--help"])
    previous = warnings.showwarning
    warnings.showwarning = _each_text_once()
    try:  # its users write JSON lines, JSON specs and chain strings: its errors say null, true, false
        with torch_warnings_in_one_line(), json_words():
            status = typer.main.get_command(app).main(args=args, prog_name="decodekit", standalone_mode=False)
        sys.stdout.flush()  # here, not at exit, where a closed pipe is "Exception ignored" and status 120
    except (_BrokenPipeError, BrokenPipeError):
        return _quiet_after_broken_pipe()
    except SystemExit as exc:  # rich's own answer to a closed pipe (typer's help): exit status 1
        if isinstance(exc.__context__, BrokenPipeError):
            return _quiet_after_broken_pipe()
        raise
    except TyperException as exc:  # the usage errors of the click typer vendors
        usage = cast(_UsageError, exc)
        report_error(_usage_message(usage))
        return usage.exit_code
    except (typer.Abort, KeyboardInterrupt, _CtrlCError):  # Ctrl-C outside generation
        report_error("interrupted")
        return EXIT_INTERRUPTED
    except CliError as exc:
        report_error(str(exc))
        return exc.exit_code
    except DecodekitError as exc:
        report_error(str(exc))
        return EXIT_USAGE
    except Exception as exc:  # a bug, or a plugin's: still one line, unless asked for the traceback
        if os.environ.get("DECODEKIT_DEBUG"):
            raise
        report_error(f"unexpected {type(exc).__name__}: {exc} (DECODEKIT_DEBUG=1 shows the traceback)")
        return EXIT_FAILURE
    finally:
        warnings.showwarning = previous
    return status if isinstance(status, int) else 0
