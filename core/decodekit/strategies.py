"""`dk.decode`: run a registered decode strategy by name, its options checked once.

A strategy is `impl(request: DecodeRequest, params) -> Generation` (see `decodekit.hookspecs`):
the options every strategy shares become the `DecodeRequest`, the others are checked against
the strategy's parameter model. The core registers "sample" (`dk.generate`) and "beam"
(`dk.beam_search`).
"""

from __future__ import annotations

from typing import Any

from decodekit.chain_string import parse_stage
from decodekit.errors import ParameterError
from decodekit.params import Params
from decodekit.plugins import bind_arguments, get_registry
from decodekit.prompts import Prompts
from decodekit.registry import Entry
from decodekit.request import DecodeOptions, DecodeRequest, decode_request
from decodekit.results import Generation

__all__ = ["SHARED_OPTIONS", "decode", "sample_strategy", "strategy_params"]

SHARED_OPTIONS = tuple(DecodeOptions.__annotations__)
"""The options `dk.decode` turns into the `DecodeRequest` (every other one is the strategy's)."""


def decode(model: Any, prompts: Prompts, *, strategy: str = "sample", **options: Any) -> Generation:
    """Decode with the registered strategy `strategy`, e.g. "sample", "beam" or "beam(num_beams=4)".

    Shared options (`DecodeOptions`: chain, max_new_tokens, cache, stop_tokens, stop_strings,
    seed, logprobs, compile) are checked as `dk.generate` checks them; the others against the
    strategy's parameters, which may also be given in the string form.
    """
    own = {k: v for k, v in options.items() if k not in SHARED_OPTIONS}
    entry, params = _strategy(strategy, own)
    shared = {k: v for k, v in options.items() if k in SHARED_OPTIONS}
    request = decode_request(model, prompts, **shared)
    result: Generation = entry.load()(request, params)
    return result


def strategy_params(strategy: str, /, **options: Any) -> Params:
    """The strategy's own options, checked: `strategy_params("beam(num_beams=4)", length_penalty=0.5)`."""
    return _strategy(strategy, options)[1]


def _strategy(strategy: str, own: dict[str, Any]) -> tuple[Entry, Params]:
    name, args, kwargs = parse_stage(strategy, what="strategy")
    entry = get_registry().lookup("strategy", name)
    for key in own:
        if key in kwargs:
            raise ParameterError(f"strategy {name}: parameter {key} given both in {strategy!r} and by keyword")
        if key not in entry.params_model.model_fields:
            allowed = ", ".join([*entry.params_model.model_fields, *SHARED_OPTIONS])
            raise ParameterError(
                f"strategy {name}: unknown parameter {key}={own[key]!r}; allowed parameters: {allowed}"
            )
    return entry, bind_arguments(f"strategy {name}", entry.params_model, tuple(args), {**kwargs, **own})


def sample_strategy(request: DecodeRequest, params: Params) -> Generation:
    """The "sample" strategy: one token per step from the chain's selector (`dk.generate`)."""
    from decodekit.loop import generate_request

    return generate_request(request)
