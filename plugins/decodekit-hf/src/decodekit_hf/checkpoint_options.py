"""`generation_options(source)`: everything a checkpoint's `GenerationConfig` makes transformers' `generate()` do,
as the keyword arguments of `dk.decode`: the strategy and its parameters, the chain, the length and the stops.

`generation_chain` gives the chain of a config that samples or is greedy; here beam search (`num_beams > 1`) and
classifier-free guidance (`guidance_scale`) become the `beam` and `cfg` strategies, whose chain is the config's
without that option (beam search uses only the chain's processors, as `_beam_search` runs the logits processors).
The length is transformers 5's `_prepare_generated_length`: `max_new_tokens`, else `max_length` minus the prompt;
a config that sets neither leaves it to the caller (`generate()`'s `max_length=20` applies only when unset
everywhere, as a default of transformers' own, not the checkpoint's).
"""

from __future__ import annotations

import copy
from collections.abc import Collection
from typing import Any

from decodekit.errors import ParameterError
from decodekit.strategies import strategy_params
from decodekit_hf.generation_config import _chain, _config_of, _filled, _vocab_size, sets_sampling, token_ids

__all__ = ["generation_defaults", "generation_options", "max_new_tokens_of"]


def generation_options(source: Any, *, prompt_length: int | None = None) -> dict[str, Any]:
    """The keyword arguments of `dk.decode(model, prompts, **options)` that do what `generate()` does with
    `source`'s generation config (source as for `generation_chain`).

    Keys: `strategy` ("sample", "beam" or "cfg") and its parameters (beam: `num_beams`, `length_penalty`,
    `early_stopping`, `num_return_sequences`; cfg: `scale`), `chain`, `max_new_tokens` (only where the config sets
    `max_new_tokens`, or `max_length`, which counts the prompt and so needs `prompt_length`), `stop_tokens` (the
    config's `eos_token_id`) and `stop_strings` (its `stop_strings`), each only where the config gives one.
    Raises `ParameterError` naming an option that has no decodekit form."""
    config = _config_of(source)
    filled = _filled(config)
    strategy, params, chain = _decoding(filled, prompt_length, _vocab_size(source))
    if strategy != "beam" and filled.num_return_sequences > 1:  # beam returns them; a sampler draws one per prompt
        raise _refused(
            "num_return_sequences",
            filled.num_return_sequences,
            "a decode draws one sample per prompt",
            "each prompt repeated that many times (on the command line -n N)",
        )
    if strategy == "beam":
        params["num_return_sequences"] = int(filled.num_return_sequences)
    out: dict[str, Any] = {"strategy": strategy, **_checked(strategy, params), "chain": chain}
    new = max_new_tokens_of(config, prompt_length)
    if new is not None:
        out["max_new_tokens"] = new
    # As HFModel.stop_tokens: an id outside the vocabulary never ends generate()'s rows (nor may it be a stop token)
    if eos := token_ids(filled, "eos_token_id", _vocab_size(source)):
        out["stop_tokens"] = eos
    if stops := _stop_strings(filled):
        out["stop_strings"] = stops
    return out


def generation_defaults(source: Any, prompt_length: int | None, keys: Collection[str]) -> dict[str, Any]:
    """The part of `generation_options` a command line takes for the options among `keys` it is not given
    (`HFModel.generation_defaults`), each key only where the config sets it: `chain` (where it sets a sampling
    option), `strategy` (a strategy string with its parameters where it is not `sample`, such as
    `beam(num_beams=4, length_penalty=1.0, early_stopping=False)`), `num_return_sequences` (where it is above 1: the
    sequences `generate()` returns per prompt, samples or beams; the command line's `-n`), `max_new_tokens` (or
    `max_length`, what the config's `max_length` leaves an empty prompt, where it counts the prompt and
    `prompt_length` is None) and `stop_strings`.

    Only the keys asked are worked out: an option given on the command line never meets the refusal of the
    config's own (`min_length` without a prompt length, beam sampling, a prompt past `max_length`)."""
    config = _config_of(source)
    filled = _filled(config)
    out: dict[str, Any] = {}
    if "chain" in keys and sets_sampling(config):  # a config without one leaves the caller's default chain
        out["chain"] = _decoding(filled, prompt_length, _vocab_size(source))[2]
    strategy, params = _strategy(filled) if "strategy" in keys else ("sample", {})
    params = _checked(strategy, params) if strategy != "sample" else params
    if strategy != "sample":
        out["strategy"] = f"{strategy}({', '.join(f'{name}={value!r}' for name, value in params.items())})"
    if "num_return_sequences" in keys and filled.num_return_sequences > 1:
        out["num_return_sequences"] = int(filled.num_return_sequences)
    if "max_new_tokens" in keys:
        new = max_new_tokens_of(config, prompt_length)
        if new is not None:
            out["max_new_tokens"] = new
        elif prompt_length is None and (total := max_new_tokens_of(config, 0)) is not None:
            out["max_length"] = total  # a max_length counts the prompt: what it leaves an empty one
    if "stop_strings" in keys and (stops := _stop_strings(filled)):
        out["stop_strings"] = stops
    return out


def max_new_tokens_of(source: Any, prompt_length: int | None = None) -> int | None:
    """The new tokens `generate()` stops at for this config: its `max_new_tokens`, else its `max_length` minus
    `prompt_length` (None without a prompt length: `max_length` counts the prompt), else None (the config sets no
    length; transformers' default `max_length=20` is not the checkpoint's)."""
    config = _config_of(source)
    if config.max_new_tokens is not None:
        return int(config.max_new_tokens)
    if config.max_length is None or prompt_length is None:
        return None
    if prompt_length >= config.max_length:  # generate() raises a ValueError here
        raise ParameterError(
            f"generation_options: the generation config's max_length={config.max_length} counts the prompt, and the "
            f"prompt has {prompt_length} tokens, so nothing is left to generate; allowed: a prompt shorter than "
            "max_length, or max_new_tokens=... (on the command line --max-new-tokens N)"
        )
    return int(config.max_length) - int(prompt_length)


def _decoding(c: Any, prompt_length: int | None, vocab_size: int | None) -> tuple[str, dict[str, Any], str]:
    """(strategy, its parameters, chain) of a filled config."""
    strategy, params = _strategy(c)
    unset: dict[str, dict[str, Any]] = {"beam": {"num_beams": 1}, "cfg": {"guidance_scale": None}}
    return strategy, params, _chain(_without(c, **unset.get(strategy, {})), prompt_length, vocab_size)


def _strategy(c: Any) -> tuple[str, dict[str, Any]]:
    """The strategy of a filled config and its parameters; the chain's options are not looked at."""
    for name in ("num_beams", "num_return_sequences"):  # generate() fails on 0 or less (a division, a repeat)
        value = getattr(c, name)
        if not isinstance(value, int) or value < 1:
            raise _refused(name, value, "transformers' generate() fails on it", "an integer >= 1")
    beams = c.num_beams > 1
    guided = c.guidance_scale is not None and c.guidance_scale != 1
    if beams and (c.do_sample or guided):  # beam sampling, guided beams: neither has a decodekit strategy
        why = "beam sampling (do_sample=true with beams)" if c.do_sample else "beam search with guidance_scale"
        raise _refused(
            "num_beams",
            c.num_beams,
            f"{why} has no decodekit form",
            "a strategy and a chain of your own (dk.decode(strategy=..., chain=...), on the command line --strategy "
            "and --chain)",
        )
    if beams:
        return "beam", {
            "num_beams": int(c.num_beams),
            "length_penalty": float(c.length_penalty),
            "early_stopping": c.early_stopping,
        }
    if guided:
        return "cfg", {"scale": float(c.guidance_scale)}
    return "sample", {}


_PARAMETER_OPTIONS = {"scale": "guidance_scale"}  # a strategy's parameter -> the config option it comes from


def _checked(strategy: str, params: dict[str, Any]) -> dict[str, Any]:
    """`params`, refused naming the config's option where the strategy refuses them (`guidance_scale=nan`)."""
    try:
        strategy_params(strategy, **params)
    except ParameterError as exc:
        name = next((p for p in params if f"{p}=" in str(exc)), None)
        if name is None:  # no one parameter named: the strategy's own words
            raise
        why, _, allowed = str(exc).partition("; allowed: ")
        raise _refused(_PARAMETER_OPTIONS.get(name, name), params[name], why, allowed) from None
    return params


def _stop_strings(c: Any) -> list[str] | None:
    """A filled config's `stop_strings` as a list (a config may hold one string), or None."""
    stops = c.stop_strings
    listed = [stops] if isinstance(stops, str) else stops
    if stops and not (isinstance(listed, (list, tuple)) and all(isinstance(s, str) for s in listed)):
        raise _refused("stop_strings", stops, "transformers' generate() fails on it", "a string or a list of strings")
    return list(listed) if stops else None


def _refused(name: str, value: Any, why: str, allowed: str) -> ParameterError:
    return ParameterError(f"generation_options: the generation config's {name}={value!r}: {why}; allowed: {allowed}")


def _without(c: Any, **unset: Any) -> Any:
    """A copy with `unset` set as is (`update` would validate the rest: num_return_sequences=2 without beams)."""
    other = copy.deepcopy(c)
    for name, value in unset.items():
        setattr(other, name, value)
    return other
