"""What a request works out once rather than on every call (a chain string's stages, a cache backend's factory, a
strategy, a stage's name, a model's forward signature, its thread count): each kept thing must never outlive what it
was worked out from: a plugin registered or unregistered between two requests, a forward replaced, a model moved, a
stage that keeps state on itself."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch

import decodekit as dk
from decodekit import threads as threads_module
from decodekit.engine import Decoding
from decodekit.loop import sample_policy
from decodekit.params import Params
from decodekit.spec import CacheSpec
from decodekit.stage import ProcessorBase
from tinymodels import tiny_gpt


def _probe_plugin(label: str, seen: list[str]) -> object:
    """A plugin registering a sampler `probe`, a cache backend `probe_cache` and a strategy `probe_strategy`, each
    noting `label` in `seen` when used."""

    class Probe(ProcessorBase[dk.NoParams]):
        def __call__(self, logits: torch.Tensor, ctx: dk.DecodeContext) -> torch.Tensor:
            seen.append(f"{label} sampler")
            return logits

    def probe_cache(spec: CacheSpec, params: Params | None = None) -> dk.KVCache:
        seen.append(f"{label} cache")
        return dk.create_cache("dense", spec)

    def probe_strategy(d: Decoding, params: Params) -> Iterator[None]:
        seen.append(f"{label} strategy")
        return sample_policy(d, params)

    class Plugin:
        @dk.hookimpl
        def register_samplers(self, register: Any) -> None:
            register("probe", Probe)

        @dk.hookimpl
        def register_cache_backends(self, register: Any) -> None:
            register("probe_cache", probe_cache)

        @dk.hookimpl
        def register_strategies(self, register: Any) -> None:
            register("probe_strategy", probe_strategy)

    return Plugin()


def test_a_plugin_registered_between_two_requests_is_the_one_the_second_uses() -> None:
    """A chain string, a cache backend and a strategy are resolved once per registry: the names' new plugin serves
    the next request, and once it is unregistered the names are unknown again."""
    model, seen = tiny_gpt(n_layer=1), list[str]()
    for label in ("first", "second"):
        plugin = _probe_plugin(label, seen)
        dk.register_plugin(plugin, name=f"probe-{label}")
        try:
            dk.decode(model, [[1, 2]], strategy="probe_strategy", chain="probe", cache="probe_cache", max_new_tokens=1)
        finally:
            dk.unregister_plugin(plugin)
    assert seen == [f"{label} {what}" for label in ("first", "second") for what in ("strategy", "cache", "sampler")]
    for options in ({"chain": "probe"}, {"cache": "probe_cache"}, {"strategy": "probe_strategy"}):
        with pytest.raises(dk.UnknownNameError):
            dk.decode(model, [[1, 2]], max_new_tokens=1, **options)


class _Once(ProcessorBase[dk.NoParams]):
    """Keeps state on itself (against the rules, which put it in the context): lets its first step through, then
    leaves token 0 alone."""

    def __init__(self, params: dk.NoParams | None = None) -> None:
        super().__init__(params)
        self.steps = 0

    def __call__(self, logits: torch.Tensor, ctx: dk.DecodeContext) -> torch.Tensor:
        self.steps += 1
        return (
            logits
            if self.steps == 1
            else torch.full_like(logits, float("-inf")).index_fill(1, ctx.tokens[0, :1] * 0, 0.0)
        )


class _OncePlugin:
    @dk.hookimpl
    def register_samplers(self, register: Any) -> None:
        register("once", _Once)


def test_every_chain_of_a_string_gets_new_stages() -> None:
    """A string's stages are parsed and checked once, but a stage that keeps state on itself would carry it from
    one request into the next if its object were shared: every chain gets its own."""
    dk.register_plugin(_OncePlugin(), name="once-plugin")
    try:
        model = tiny_gpt(n_layer=1)
        first, second = (dk.generate(model, [[1, 2]], chain="once | greedy", max_new_tokens=1).tokens for _ in "ab")
        assert first == second and first != [[0]]
        a, b = dk.Chain.parse("once | greedy"), dk.Chain.parse("once | greedy")
        assert a == b and a.processors[0] is not b.processors[0]
    finally:
        dk.unregister_plugin("once-plugin")


def test_a_stage_class_registered_anew_is_named_by_the_registry_of_the_day() -> None:
    """A stage's name is read once per class and registry: the class registered under another name is named so."""
    for name in ("first_name", "second_name"):

        class Plugin:
            @dk.hookimpl
            def register_samplers(self, register: Any, name: str = name) -> None:
                register(name, _Once)

        dk.register_plugin(Plugin(), name=f"plugin-{name}")
        try:
            assert _Once().name == name
        finally:
            dk.unregister_plugin(f"plugin-{name}")


def test_a_forward_replaced_between_two_requests_is_checked_anew() -> None:
    """The forward's signature is read once per function: a forward that cannot take the call, set on the model
    or on its class after a request, is refused at the next, and the model's own is taken again once restored."""
    model = tiny_gpt(n_layer=1)
    dk.generate(model, [[1, 2]], max_new_tokens=1)
    model.forward = lambda input_ids: input_ids  # type: ignore[method-assign, assignment, misc]
    with pytest.raises(dk.ParameterError, match=r"its forward takes \(input_ids\)"):
        dk.generate(model, [[1, 2]], max_new_tokens=1)
    del model.forward
    dk.generate(model, [[1, 2]], max_new_tokens=1)

    class Replaced(type(model)):  # type: ignore[misc]
        pass

    model.__class__ = Replaced
    dk.generate(model, [[1, 2]], max_new_tokens=1)
    Replaced.forward = lambda self, input_ids, positions: input_ids  # type: ignore[method-assign, assignment, misc]
    with pytest.raises(dk.ParameterError, match=r"its forward takes \(input_ids, positions\)"):
        dk.generate(model, [[1, 2]], max_new_tokens=1)


def test_a_model_moved_whole_is_walked_anew_for_its_thread_count(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whether a model is small and on the CPU is read once per model and device: moved off the CPU, it no longer
    decodes on one thread."""
    monkeypatch.setattr(threads_module, "_STARTED_WITH", torch.get_num_threads())  # no count chosen
    model = tiny_gpt(n_layer=1)
    assert threads_module.decode_threads(model) == 1
    model.to("meta")
    assert threads_module.decode_threads(model) is None
