"""Decode strategies by name: `dk.decode`, `dk.validate`, and the binding of a strategy's options into the shared
`DecodeRequest` and its own parameters (docs/strategies.md, "Adding a strategy from a plugin")."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from torch import Tensor

from decodekit.chain_string import parse_stage
from decodekit.engine import Decoding, Policy
from decodekit.errors import ParameterError, did_you_mean
from decodekit.model import Model
from decodekit.params import Params
from decodekit.plugins import bind_arguments, get_registry, sampler_call
from decodekit.prompts import Prompts
from decodekit.registry import Registry
from decodekit.request import DecodeOptions, DecodeRequest, decode_request
from decodekit.results import Generation, TokenEvent

__all__ = ["SHARED_OPTIONS", "EventStream", "Strategy", "decode", "run_decode", "strategy_params", "validate"]

SHARED_OPTIONS = tuple(DecodeOptions.__annotations__)
"""The options `dk.decode` turns into the `DecodeRequest` (every other one is the strategy's)."""


@dataclass(frozen=True)
class Strategy:
    """A registered strategy with its parameters checked."""

    name: str
    policy: Policy
    params: Params


def decode(model: Model, prompts: Prompts, *, strategy: str = "sample", **options: Any) -> Generation:
    """Decode with the registered strategy `strategy` ("sample", "beam(num_beams=4)", ...); options: `dk.stream`'s."""
    return run_decode(model, prompts, strategy, options)


def validate(model: Model, prompts: Prompts, *, strategy: str = "sample", **options: Any) -> DecodeRequest:
    """Check a decode as `dk.decode` would (every option, the strategy's rows, the cache and the model's
    context included) without decoding: the strategy's policy runs until its first model call, then
    stops. A batch job checks every line before any model work. Returns the checked request."""
    request, bound = bind(model, prompts, strategy, options)
    checking = _Checking(replace(request, model=_Unrunnable(request.model)), bound.name, events=False)
    with contextlib.suppress(_ModelCalled):  # the strategy's own policy: its rows, lookahead, cache needs and checks
        for _ in checking.run(bound.policy, bound.params, per_round=False):
            pass
    return request


class _ModelCalled(BaseException):
    """Stops a policy at its first model call (`validate`); a BaseException, so no policy's handler catches it."""


def _model_called(*args: Any, **kwargs: Any) -> Tensor:
    raise _ModelCalled


class _Checking(Decoding):
    """A decoding of an `_Unrunnable` model: its policy stops at its first model call, everything checked before it."""

    def runs(self, model: Model) -> Callable[..., Tensor]:  # a policy's own forwards, a draft model's too
        return _model_called


class _Unrunnable:
    """A model as a checking policy sees it: everything it has, but calling it stops the policy."""

    def __init__(self, model: Model) -> None:
        self._model = model

    def __getattr__(self, name: str) -> Any:
        return _model_called if name == "forward" else getattr(self._model, name)

    __call__ = staticmethod(_model_called)


def run_decode(model: Model, prompts: Prompts, strategy: str, options: Mapping[str, Any], what: str = "") -> Generation:
    """`dk.decode` for an entry point named `what` in its errors ("generate", "beam_search"): run to the end."""
    request, bound = bind(model, prompts, strategy, options, what)
    d = Decoding(request, bound.name, events=False)
    for _ in d.run(bound.policy, bound.params, per_round=False):
        pass
    return d.generation()


def bind(
    model: Model, prompts: Prompts, strategy: str, options: Mapping[str, Any], what: str = ""
) -> tuple[DecodeRequest, Strategy]:
    """The checked request and strategy of one call; errors name `what` (default: the strategy)."""
    own = {k: v for k, v in options.items() if k not in SHARED_OPTIONS}
    bound = resolve_strategy(strategy, own, what)
    shared = {k: v for k, v in options.items() if k in SHARED_OPTIONS}
    return decode_request(model, prompts, **shared), bound


class EventStream(Iterator[TokenEvent]):
    """What `dk.stream` returns: the events as the strategy settles them; once they are all out,
    `result` is the whole `Generation` (with a strategy's own fields, e.g. speculative's acceptance)."""

    def __init__(self, decoding: Decoding, strategy: Strategy) -> None:
        self._decoding: Decoding | None = decoding
        self._events = decoding.run(strategy.policy, strategy.params, per_round=True)
        self.result: Generation | None = None

    def __next__(self) -> TokenEvent:
        try:
            return next(self._events)
        except StopIteration:
            if self._decoding is not None:  # None once closed
                self.result = self._decoding.generation()
            raise

    def close(self) -> None:
        """End the decode here, as a generator's `close` (a client that went away): its cache and rows are freed
        now, not when the last reference to this stream goes; `next` then raises StopIteration, `result` None."""
        self._events.close()
        self._decoding = None


def strategy_params(strategy: str, /, **options: Any) -> Params:
    """The strategy's own options, checked: `strategy_params("beam(num_beams=4)", length_penalty=0.5)`."""
    return resolve_strategy(strategy, options).params


def resolve_strategy(strategy: str, own: Mapping[str, Any], what: str = "") -> Strategy:
    """The registered strategy named by `strategy` ("beam" or "beam(num_beams=4)") with `own` options; without
    them, resolved once per text and registry (`Registry.built`)."""
    registry = get_registry()
    if own or not isinstance(strategy, str):
        return _resolved(registry, strategy, own, what)
    return registry.built(("strategy", strategy), lambda: _resolved(registry, strategy, own, what))


def _where_it_goes(registry: Registry, key: str, value: Any, names: list[str]) -> str:
    """Where an option of another library's call goes here (vLLM's and transformers' `temperature`, `top_p`, `n`),
    or the closest allowed name to a misspelt one."""
    if key in _ELSEWHERE:
        return f"; {_ELSEWHERE[key]}"
    if key in registry.samplers:
        return _stage_hint(key, value)
    return did_you_mean(key, names)


def _stage_hint(name: str, value: Any) -> str:
    """The chain stage a sampler's value given as a keyword stands for; where the sampler takes no such value
    (llama.cpp's `logit_bias` pairs), why, rather than a chain that fails in its turn."""
    try:
        sampler_call(name, (value,), {})
    except ParameterError as exc:
        return f"; a sampler is a stage of the chain: chain='{name}(...)', where {exc}"
    return f"; a sampler is a stage of the chain: chain='{name}({value!r})'"


_PADDED = "prompts are padded here: give each one's ids unpadded (a list of lists), not a padded batch"
_N = "for n samples of each prompt, repeat it n times and seed the copies with decodekit.context.row_seeds"
# vLLM's, transformers' and llama.cpp's options that are here under another name or elsewhere: a close name would
# mislead (`min_tokens` was "did you mean 'max_new_tokens'?", `do_sample` "'compile'?", `pad_token_id` "'stop_tokens'?",
# llama.cpp's `mirostat=2` "chain='mirostat(2)'", its mode read as mirostat's tau).
_ELSEWHERE = {
    "strategy": "a strategy is chosen with dk.decode(model, prompts, strategy=...)",
    "n": _N,
    "num_return_sequences": _N,
    "do_sample": "a chain samples (do_sample=True) unless it ends in another selector; do_sample=False: chain='greedy'",
    "attention_mask": _PADDED,
    "pad_token_id": _PADDED,
    "stop": "did you mean 'stop_strings'?",
    "min_tokens": "vLLM's min_tokens is a stage of the chain: chain='min_new_tokens(n, [eos ids])'",
    "ignore_eos": "a row stops only at the stop_tokens given: leave the eos out of them",
    "max_length": "max_new_tokens counts the new tokens alone (max_length less the prompt's)",
    "num_beams": "beam search is a strategy: dk.decode(model, prompts, strategy='beam', num_beams=...)",
    "generation_config": "decodekit_hf.generation_options(config) gives it as dk.decode's keywords (docs/hf.md)",
    "typical_p": "a sampler is a stage of the chain: chain='typical(mass)'",
    "n_predict": "llama.cpp's n_predict is max_new_tokens",
    "n_probs": "llama.cpp's n_probs is logprobs=n: the model's top n (raw_top); post_sampling_probs: processed_top",
    "samplers": "llama.cpp's samplers are the chain's stages in that order (docs/samplers.md, llama.cpp)",
    "repeat_penalty": "llama.cpp's repeat_penalty is a stage of the chain: chain='repetition_penalty(r, 64)'",
    "repeat_last_n": "llama.cpp's repeat_last_n is the penalty stage's window: chain='repetition_penalty(r, n)'",
    "mirostat": "llama.cpp's mirostat 1 is chain='temperature(t) | mirostat(tau, eta)', 2 chain='temperature(t) | "
    "mirostat_v2(tau, eta)'",
}


def _resolved(registry: Registry, strategy: str, own: Mapping[str, Any], what: str) -> Strategy:
    name, args, kwargs = parse_stage(strategy, what="strategy")
    entry = registry.lookup("strategy", name)
    owner = what or f"strategy {name}"
    for key in own:
        if key in kwargs:
            raise ParameterError(f"{owner}: parameter {key} given both in {strategy!r} and by keyword")
        if key not in entry.params_model.model_fields:
            names = [*entry.params_model.model_fields, *SHARED_OPTIONS]
            raise ParameterError(
                f"{owner}: unknown parameter {key}={own[key]!r}; allowed parameters: {', '.join(names)}"
                + _where_it_goes(registry, key, own[key], names)
            )
    params = bind_arguments(owner, entry.params_model, tuple(args), {**kwargs, **own})
    return Strategy(name, entry.load(), params)
