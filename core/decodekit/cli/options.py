"""Turning the options of `generate` and `explain` into a chain, a model and a cache name.

Everything here is checked before a model is loaded, so a bad flag fails at once; only
building the chain imports torch (through the sampler plugins).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from decodekit.cli.defaults import DEFAULT_CHAIN, DEFAULT_MODEL
from decodekit.cli.errors import CliError
from decodekit.errors import DecodekitError
from decodekit.plugins import STANDARD_PLUGINS, get_registry, load_model

if TYPE_CHECKING:
    from decodekit.chain import Chain

__all__ = [
    "FLAT_STAGES",
    "build_chain",
    "chain_text",
    "load_named_model",
    "model_name",
    "prompt_text",
    "resolve_cache",
    "resolve_strategy",
]

# The flat flags in the order Hugging Face applies them: (flag, sampler, its parameter).
FLAT_STAGES = (
    ("--repetition-penalty", "repetition_penalty", "penalty"),
    ("--temperature", "temperature", "value"),
    ("--top-k", "top_k", "k"),
    ("--top-p", "top_p", "p"),
)


def chain_text(chain: str | None, flags: Mapping[str, float | int | None]) -> str:
    """The chain string from `--chain`, or built from the flat flags, or the default chain."""
    given = [flag for flag, _, _ in FLAT_STAGES if flags.get(flag) is not None]
    if chain is not None and given:
        raise CliError(
            f"--chain cannot be combined with {', '.join(given)}; put those stages in the chain, "
            f'e.g. --chain "temperature(0.8) | top_p(0.9)"'
        )
    if chain is not None:
        return chain
    if given:
        return " | ".join(f"{name}({param}={flags[flag]!r})" for flag, name, param in FLAT_STAGES if flag in given)
    return DEFAULT_CHAIN


def build_chain(chain: str | None, flags: Mapping[str, float | int | None]) -> Chain:
    """Parse the chain the options describe; a bad stage or value raises a `DecodekitError`."""
    text = chain_text(chain, flags)
    from decodekit.chain import Chain

    return Chain.parse(text)


def model_name(name: str | None) -> str:
    """`--model`, or the default model when it is installed."""
    if name is not None:
        return name
    models = get_registry().models
    if DEFAULT_MODEL in models:
        return DEFAULT_MODEL
    raise CliError(
        f"no --model given and the default model {DEFAULT_MODEL!r} is not installed "
        f"(pip install {STANDARD_PLUGINS[DEFAULT_MODEL]}); installed models: {', '.join(sorted(models)) or 'none'}"
    )


def load_named_model(name: str) -> Any:
    """`dk.load_model(name)`; a loader that fails for another reason is reported in one line (status 1)."""
    try:
        return load_model(name)
    except DecodekitError:
        raise
    except Exception as exc:
        raise CliError(f"cannot load model {name!r}: {type(exc).__name__}: {exc}", exit_code=1) from None


def resolve_cache(name: str | None) -> str:
    """`--cache` checked against the registry (a name or "name(args)"); default: dense when installed, else none."""
    caches = get_registry().caches
    if name is None:
        return "dense" if "dense" in caches else "none"
    if name == "none":
        return name
    from decodekit.chain_string import parse_stage
    from decodekit.plugins import cache_factory

    backend = parse_stage(name, what="--cache").name
    if backend not in caches:
        hint = f"; pip install {STANDARD_PLUGINS[backend]}" if backend in STANDARD_PLUGINS else ""
        allowed = ", ".join(["none", *sorted(caches)])
        raise CliError(f"--cache {name!r}: unknown cache backend; allowed: {allowed}{hint}")
    cache_factory(name)  # checks the parameters before the model loads
    return name


def resolve_strategy(text: str | None) -> str:
    """`--strategy` checked against the registry, its own parameters included; default: sample."""
    if text is None:
        return "sample"
    from decodekit.strategies import strategy_params

    strategy_params(text)
    return text


def prompt_text(prompt: str | None) -> str:
    """The prompt argument; '-' reads stdin, and no prompt means a newline (the start of a text)."""
    if prompt is None:
        return "\n"
    if prompt == "-":
        return sys.stdin.read()
    return prompt
