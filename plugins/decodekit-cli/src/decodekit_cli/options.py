"""Turning the options of `generate` and `explain` into a chain, a model and a cache name.

Everything here is checked before a model is loaded, so a bad flag fails at once; only
building the chain imports torch (through the sampler plugins).
"""

from __future__ import annotations

import inspect
import json
import os
import re
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from decodekit.errors import ChainSpecError, CompileError, ContextLengthError, DecodekitError, did_you_mean
from decodekit.plugins import get_registry, load_model
from decodekit.registry import CATEGORIES
from decodekit.standard_plugins import STANDARD_PLUGINS, failed_to_load, installed_but, switched_off
from decodekit_cli.defaults import DEFAULT_CHAIN, DEFAULT_MODEL
from decodekit_cli.errors import EXIT_FAILURE, CliError, report_warning
from decodekit_cli.install_hints import install_hint

if TYPE_CHECKING:
    from decodekit.chain import Chain

__all__ = [
    "FLAT_STAGES",
    "build_chain",
    "chain_text",
    "check_installed",
    "check_replace_unknown",
    "check_stop",
    "cli_hints",
    "compile_failure",
    "encode_prompt",
    "flags_over",
    "is_spec",
    "load_named_model",
    "prompt_text",
    "resolve_cache",
    "resolve_strategy",
    "spec_text",
    "standard_words",
]

# The flat flags in the order Hugging Face applies them: (flag, sampler, its parameter).
FLAT_STAGES = (
    ("--repetition-penalty", "repetition_penalty", "penalty"),
    ("--temperature", "temperature", "value"),
    ("--top-k", "top_k", "k"),
    ("--top-p", "top_p", "p"),
)


def chain_text(chain: str | None, flags: Mapping[str, float | int | None], default: str | None = None) -> str:
    """The chain string from `--chain`; else the model's own chain (`default`: the `chain` of a model's
    `generation_defaults`) with the flat flags set over it; else the chain the flags build; else decodekit's default
    chain."""
    given = [flag for flag, _, _ in FLAT_STAGES if flags.get(flag) is not None]
    if (k := flags.get("--top-k")) is not None and k < 1:
        raise CliError(
            f"--top-k {k}: keeps the k most likely tokens, k >= 1; to turn top-k off (vLLM's -1, llama.cpp's 0), "
            "leave --top-k out"
        )
    if chain is not None and given:
        raise CliError(
            f"--chain cannot be combined with {', '.join(given)}; put those stages in the chain, "
            f'e.g. --chain "temperature(0.8) | top_p(0.9)"'
        )
    if chain is not None:
        return spec_text(chain, "--chain") if is_spec(chain) else chain
    if default is not None:
        return flags_over(default, flags) if given else default
    if given:
        return " | ".join(f"{name}({param}={flags[flag]!r})" for flag, name, param in FLAT_STAGES if flag in given)
    return DEFAULT_CHAIN


def flags_over(chain: str, flags: Mapping[str, float | int | None]) -> str:
    """`chain` (a model's own) with the flat flags set over it one option at a time, as transformers'
    `generate(temperature=...)` and vLLM override a checkpoint's settings: a stage the chain has takes the flag's
    value; a stage it lacks goes where the flags' order puts it among the flat stages the chain has (after the
    nearest one before it in that order, else before the nearest one after it), else just before the selector."""
    from decodekit.chain import Chain

    spec = Chain.parse(chain).to_spec()
    order = [name for _, name, _ in FLAT_STAGES]
    for flag, name, param in FLAT_STAGES:
        value = flags.get(flag)
        if value is None:
            continue
        stages = [stage for stage in spec[:-1] if stage["name"] == name]
        for stage in stages:
            stage["params"][param] = value
        if stages:
            continue
        rank = order.index(name)
        names = [stage["name"] for stage in spec[:-1]]
        before = [i + 1 for i, n in enumerate(names) if n in order[:rank]]
        after = [i for i, n in enumerate(names) if n in order[rank + 1 :]]
        at = before[-1] if before else after[0] if after else len(spec) - 1
        spec.insert(at, {"name": name, "params": {param: value}})
    return str(Chain.from_spec(spec))


def is_spec(chain: str) -> bool:
    """Whether chain text is a JSON chain spec (a list, or an object from_spec refuses), not a chain string."""
    return chain.lstrip().startswith(("[", "{"))


def spec_text(spec: str | list[Any] | dict[str, Any], name: str) -> str:
    """A JSON chain spec (what `Chain.from_spec` takes: its JSON text, or in an `--input` line the list
    itself) as the chain string it stands for, which every path that reads a chain (grammar options,
    batch settings, records) takes; a bad one is a `CliError` naming `name` (`--chain`, a line's `chain`)."""
    from decodekit.chain import Chain

    text = spec if isinstance(spec, str) else json.dumps(spec)  # one form, so one error for either
    try:
        return str(Chain.from_spec(text))
    except ChainSpecError as exc:
        raise CliError(f"{name} {text!r}: {exc}") from None


def build_chain(text: str, chain: str | None = None) -> Chain:
    """Parse a chain string (`chain_text`'s); `chain`: the `--chain` given, named where it is a file. A bad stage or
    value raises a `DecodekitError`."""
    from decodekit.chain import Chain

    try:
        return Chain.parse(text)
    except ChainSpecError as exc:
        if chain is not None and os.path.isfile(chain):  # `--chain spec.json`: a file where its text goes
            raise CliError(
                f'{exc}; {chain!r} is a file, and --chain takes its text: --chain "$(cat {chain})"'
            ) from None
        raise


def check_installed(model: str | None, chain: str | None, flags: Mapping[str, float | int | None]) -> None:
    """Report every missing piece of a standard setup in one error: the model (the default or a standard one), the
    chain's samplers."""
    registry = get_registry()
    # A name two plugins register is installed but unusable: the lookup's own error says so.
    conflicted = {(c.category, c.name) for c in registry.conflicts}
    missing: list[str] = []
    dists: list[str] = []
    name = DEFAULT_MODEL if model is None else re.split(r"[(:]", model, maxsplit=1)[0]  # "hf(dtype=...):DIR"
    if name in STANDARD_PLUGINS and name not in registry.models and ("model", name) not in conflicted:
        installed = ", ".join(sorted(registry.models)) or "none"
        which, given = (
            ("the default model", "no --model given") if model is None else ("the model", f"--model {model!r}")
        )
        missing.append(f"{which} {name!r} ({given}; available models: {installed})")
        dists.append(STANDARD_PLUGINS[name])
    text = chain_text(chain, flags)
    from decodekit.chain import parse_chain_string

    try:
        names = [name for name, _, _ in parse_chain_string(text)]
    except DecodekitError:
        names = []  # a syntax error: Chain.parse reports it
    registered = {n for c in CATEGORIES for n in registry.section(c)}  # `beam` in a chain: Chain.parse says what it is
    absent = [n for n in names if n not in registered and n in STANDARD_PLUGINS and ("sampler", n) not in conflicted]
    if absent:
        which = "the default chain" if chain is None and text == DEFAULT_CHAIN else "the chain"
        missing.append(f"{which} {text!r} needs {', '.join(absent)}")
        dists += [STANDARD_PLUGINS[n] for n in absent]
    if missing:
        model_too = "--model and " if len(missing) > 1 else ""  # the model is missing as well as samplers
        alternative = f"; or give {model_too}a --chain of installed samplers" if names and absent else ""
        lead, fix = _standing(dists, "Install: ")  # fix: how to install, enable or repair them
        raise CliError(f"{lead}: {'; '.join(missing)}. {fix}{alternative}")


def _standing(dists: list[str], install: str) -> tuple[str, str]:
    """Why standard distributions' names are missing ("not installed", "installed but disabled", "installed but
    failed to load", or several: "not installed or disabled"), and what to do (`install` leads the pip install)."""
    failures = get_registry().failures
    absent = [d for d in dists if switched_off([d]) is None and failed_to_load([d], failures) is None]
    ways = {
        "not installed": absent and f"{install}{install_hint(absent)}",
        "disabled": switched_off(dists),
        "failed to load": failed_to_load(dists, failures),
    }
    said = " or ".join(way for way, fix in ways.items() if fix)
    return said if absent else f"installed but {said}", "; ".join(fix for fix in ways.values() if fix)


def load_named_model(name: str) -> Any:
    """`dk.load_model(name)`; a loader that fails for another reason is reported in one line (status 1)."""
    try:
        return load_model(name)
    except DecodekitError:
        raise
    except Exception as exc:
        raise CliError(f"cannot load model {name!r}: {type(exc).__name__}: {exc}", exit_code=1) from None


def resolve_cache(name: str | None) -> str:
    """`--cache` checked against the registry (a name or "name(args)"); default: dense when installed, else none
    (the same tokens, so the command still runs, with a note on stderr: it is many times slower)."""
    caches = get_registry().caches
    if name is None:
        if "dense" in caches:
            return "dense"
        said, fix = _standing([STANDARD_PLUGINS["dense"]], "to install it: ")
        report_warning(
            f"no --cache given, and the default, dense, is {said}: running without a cache (as --cache none: "
            f"the same tokens, many times slower); {fix}"
        )
        return "none"
    if name == "none":
        return name
    from decodekit.chain_string import parse_stage
    from decodekit.plugins import cache_factory

    backend = parse_stage(name, what="--cache").name
    if backend not in caches:
        names = ["none", *sorted(caches)]
        if backend in STANDARD_PLUGINS:  # not unknown: say what keeps it out
            raise CliError(f"--cache {name!r}: {standard_words(backend, 'cache backend')}; allowed: {', '.join(names)}")
        raise CliError(
            f"--cache {name!r}: unknown cache backend; allowed: {', '.join(names)}{did_you_mean(backend, names)}"
        )
    cache_factory(name)  # checks the parameters before the model loads
    return name


def standard_words(name: str, category: str = "") -> str:
    """Why a standard name is missing, as the registry says it (installed but disabled, installed but failed to
    load), or that it is not installed and how to install it; `category` leads it ("strategy 'beam' is ...")."""
    dist = STANDARD_PLUGINS[name]
    state = installed_but(dist, get_registry().failures) or f"not installed; {install_hint([dist])}"
    return f"{category} {name!r} is {state}".lstrip()


def resolve_strategy(text: str | None) -> str:
    """`--strategy` checked against the registry, its own parameters included; default: sample."""
    if text is None:
        return "sample"
    from decodekit.chain_string import parse_stage
    from decodekit.strategies import strategy_params

    strategies = get_registry().strategies
    name = parse_stage(text, what="--strategy").name
    if name not in strategies and name in STANDARD_PLUGINS:
        allowed = ", ".join(sorted(strategies))
        raise CliError(f"--strategy {text!r}: {standard_words(name, 'strategy')}; allowed: {allowed}")
    strategy_params(text)  # its own parameters, checked before the model loads
    return text


def prompt_text(prompt: str | None) -> str:
    """The prompt argument; '-' reads stdin, and no prompt means a newline (the start of a text).

    From stdin one trailing newline is dropped: `echo`, here-strings and editors add it, and a
    prompt ending in a newline steers the model to a new line (as `$(...)` drops it in a shell).
    Windows line ends (`\r\n`) are read as newlines, as `open()` reads text files.
    """
    if prompt is None:
        return "\n"
    if prompt == "-":
        if sys.stdin.isatty():  # a terminal waits for typed text: say so, not a silent wait
            print("reading the prompt from standard input; end it with Ctrl-D", file=sys.stderr)
        text = sys.stdin.read().replace("\r\n", "\n")  # POSIX stdin keeps the "\r" of a file saved on Windows
        text = text[:-1] if text.endswith("\n") else text
        if not text:
            raise CliError(
                "PROMPT '-': stdin holds no text (one trailing newline is dropped); allowed: text of at least one token"
            )
        return text
    return prompt


@contextmanager
def cli_hints(length_option: str = "--max-new-tokens") -> Iterator[None]:
    """Say how to do on the command line what a library error suggests; `length_option`: the command's
    option for the library's `max_new_tokens` (explain's is --steps)."""
    try:
        yield
    except ContextLengthError as exc:
        message = str(exc).replace("max_new_tokens=", f"{length_option} ").replace("max_new_tokens", length_option)
        raise CliError(cache_flag(message)) from None
    except CompileError as exc:
        raise CliError(compile_failure(exc), exit_code=EXIT_FAILURE) from None


def cache_flag(message: str) -> str:
    """A library message's `cache='...'` in the flag's spelling: `--cache '...'` (`--cache none`)."""
    message = message.replace("cache='none'", "--cache none")
    return re.sub(r"\bcache='([^']*)'", r"--cache '\1'", message)


def compile_failure(exc: CompileError) -> str:
    """`--compile` failed: what torch's compiler could not do, and the way around it."""
    return f"--compile: torch.compile failed on {exc.what}: {exc.reason}; run without --compile (the same output)"


def check_stop(stop: tuple[str, ...]) -> None:
    if "" in stop:
        raise CliError("--stop '': an empty stop string would end every sample at once; allowed: non-empty text")


def _takes_errors(tokenizer: Any) -> bool:
    return "errors" in inspect.signature(tokenizer.encode).parameters


def check_replace_unknown(model: Any) -> None:
    """`--replace-unknown` needs a tokenizer whose `encode` takes `errors=`: checked once for a job, where every
    line would fail alike (a model without a tokenizer is refused where its prompt is encoded)."""
    tokenizer = getattr(model, "tokenizer", None)
    if tokenizer is not None and not _takes_errors(tokenizer):
        raise CliError(
            "--replace-unknown: the model's tokenizer has no errors= option; allowed: leave --replace-unknown out "
            "(the tokenizer then encodes characters it does not know its own way, or names them)"
        )


def encode_prompt(model: Any, prompt: str, replace_unknown: bool) -> list[int]:
    """The prompt as the model's tokenizer encodes it; `--replace-unknown` passes `errors="replace"`.

    A model without a tokenizer cannot take one: token ids come as an --input line's `prompt_token_ids`.
    """
    tokenizer = getattr(model, "tokenizer", None)
    if tokenizer is None:
        raise CliError(
            "the model has no tokenizer, and the command line takes text prompts; allowed: a model with one "
            "(hf:DIR: a directory with its tokenizer files), or token ids: an --input line's "
            '"prompt_token_ids": [1, 2, 3], or dk.generate(model, [[1, 2, 3]]) from Python'
        )
    accepts_errors = _takes_errors(tokenizer)
    if replace_unknown:
        check_replace_unknown(model)
    try:
        ids: list[int] = tokenizer.encode(prompt, errors="replace") if replace_unknown else tokenizer.encode(prompt)
    except DecodekitError as exc:
        hint = " (on the command line: --replace-unknown)" if accepts_errors else ""
        raise CliError(f"{exc}{hint}") from None
    except Exception as exc:  # a third-party tokenizer's own error: still one line, no traceback
        raise CliError(f"the model's tokenizer cannot encode the prompt: {type(exc).__name__}: {exc}") from None
    return ids
