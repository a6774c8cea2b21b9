"""The registry: registrations checked when made, hooks all-or-nothing, a failed plugin alone,
cache backends and strategies with parameter models, and the string form of a cache backend."""

from __future__ import annotations

import functools
import os
import re
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from decodekit_beam.search import beam_search
from decodekit_cli.listing import check_imports, plugins_report, samplers_report
from pydantic import BaseModel, Field

import decodekit as dk
from decodekit.cache import PreallocatedKVCache
from decodekit.registry import Registry, without_entry_point
from decodekit.stage import ProcessorBase
from tinymodels import tiny_gpt

ROOT = Path(__file__).resolve().parents[1]  # the checkout decodekit was installed from (`make install-dev`)


class Shift(ProcessorBase[dk.NoParams]):
    name = "shift"

    def __call__(self, logits: torch.Tensor, ctx: dk.DecodeContext) -> torch.Tensor:
        return logits + 1.0


TOY_MODEL = SimpleNamespace(
    spec=dk.ModelSpec(1, 1, 1, 8, 10, 8)
)  # what the toy loaders return: load_model reads its spec


class CappedParams(dk.Params):
    size: int = Field(..., ge=1, le=1024, description="tokens kept per row")
    sinks: int = Field(default=0, ge=0, description="first tokens always kept")


class CappedCache(PreallocatedKVCache):
    """A test backend with parameters: a gqa-like cache whose capacity is `size` (whatever the spec asks)."""

    def __init__(self, spec: dk.CacheSpec, params: CappedParams) -> None:
        super().__init__(spec)
        self.params = params


class Plugin:
    """A plugin whose hooks are given as functions of `register`."""

    def __init__(self, **hooks: Callable[[Any], None]) -> None:
        for name, hook in hooks.items():
            setattr(self, name, dk.hookimpl(specname=name)(hook))


@pytest.fixture
def registered() -> Iterator[Callable[..., Plugin]]:
    """`registered(name, **hooks)`: register a plugin in code for the test, removed afterwards."""
    plugins: list[Plugin] = []

    def register(name: str, **hooks: Callable[[Any], None]) -> Plugin:
        plugin = Plugin(**hooks)
        dk.register_plugin(plugin, name=name)
        plugins.append(plugin)
        return plugin

    yield register
    for plugin in plugins:
        dk.unregister_plugin(plugin)


def _capped(register: Any) -> None:
    register("capped", CappedCache, CappedParams, "keeps at most size tokens")


@pytest.mark.parametrize(
    ("args", "kwargs", "reason"),
    [
        ((None, Shift), {}, "name None is a NoneType; allowed: a string"),
        (("two words", Shift), {}, "name 'two words' is invalid; allowed: a Python identifier"),
        (("top-k", Shift), {}, "name 'top-k' is invalid"),
        (("shift", 42), {}, r"impl 42 \(int\) is invalid; allowed: a callable or an import path"),
        (("shift", "no_colon_path"), {}, "impl 'no_colon_path' is invalid"),
        (("shift", Shift, "CappedParams"), {}, "params 'CappedParams' is invalid; allowed: None or a decodekit.Params"),
        (("shift", Shift, BaseModel), {}, "params .*BaseModel.* is invalid"),
        (("shift", Shift, None, 3), {}, "description 3 is a int; allowed: a string"),
        (("shift", Shift), {"kind": "transformer"}, "kind='transformer' is invalid; allowed: 'processor', 'selector'"),
        (("shift", Shift), {"colour": "red"}, "unknown keyword colour=...; allowed keywords: kind"),
        (("shift", Shift, CappedParams), {}, "its class takes NoParams, its registration CappedParams"),
        (
            ("shift", Shift),
            {"kind": "selector"},
            "its class is a processor, its registration a selector; allowed: the same kind: register it with "
            "kind='processor' or subclass SelectorBase",
        ),
        (("shift",), {}, "TypeError"),
    ],
)
def test_a_bad_registration_fails_its_plugin_alone(args: tuple[Any, ...], kwargs: dict[str, Any], reason: str) -> None:
    def hook(register: Any) -> None:
        register("fine", "decodekit.sample:Sample", kind="selector")  # dropped too: all or nothing
        register(*args, **kwargs)

    with pytest.raises(dk.PluginError, match=reason):
        dk.register_plugin(Plugin(register_samplers=hook), name="bad-plugin")
    registry = dk.get_registry()  # not poisoned: the plugin was not kept
    assert "fine" not in registry.samplers and "bad-plugin" not in registry.plugins
    assert dk.create("temperature", 0.5).params.value == 0.5


def test_an_installed_bad_plugin_is_listed_with_its_reason_and_the_rest_work(
    registered: Callable[..., Plugin], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same bad plugin met while building the registry (as an installed one is): a warning,
    a failure in `decodekit plugins`, its other hooks kept, everything else working."""
    registered("good", register_cache_backends=_capped)

    def half_then_raise(register: Any) -> None:
        register("shift", Shift)
        raise RuntimeError("boom after one registration")

    plugin = Plugin(register_samplers=half_then_raise, register_cache_backends=_capped)
    monkeypatch.setattr("decodekit.plugins._code_plugins", [*dk.plugins._code_plugins, (plugin, "bad")])
    with pytest.warns(RuntimeWarning) as warned:
        registry = dk.reload_plugins()
    messages = [str(w.message) for w in warned]
    assert len(messages) == 2
    assert re.search(r"plugin bad .*hook register_samplers.*boom after one registration", messages[0])
    assert "cache backend name 'capped' is registered by 2 distributions: good and bad" in messages[1]
    assert "shift" not in registry.samplers  # the raising hook's registration is dropped
    assert registry.plugins["bad"].samplers == []
    report = plugins_report()
    [failure] = [f for f in report["failures"] if f["distribution"] == "bad"]
    assert failure["hook"] == "register_samplers" and "RuntimeError: boom" in failure["error"]
    # its cache hook succeeded but names the same backend as "good": that name is unusable
    [conflict] = report["conflicts"]
    assert conflict["name"] == "capped" and conflict["distributions"] == ["good", "bad"]
    with pytest.raises(dk.PluginError, match="good and bad.*DECODEKIT_DISABLE_PLUGINS=bad"):
        dk.create_cache("capped(size=4)", dk.CacheSpec(1, 1, 1, 1, 1, 1))
    assert dk.create_cache("gqa", dk.CacheSpec(1, 1, 1, 1, 1, 1)).capacity == 1  # type: ignore[attr-defined]  # a GQACache
    monkeypatch.undo()
    dk.reload_plugins()


def reload_failing(
    monkeypatch: pytest.MonkeyPatch, label: str, while_loaded: Callable[[], None] = lambda: None
) -> tuple[Registry, str]:
    """Reload the plugins with what `monkeypatch` set (`while_loaded` runs then), then as they were: the registry
    and the one warning that names `label`."""
    try:
        with pytest.warns(RuntimeWarning) as warned:
            registry = dk.reload_plugins()
        while_loaded()
    finally:
        monkeypatch.undo()
        dk.reload_plugins()
    [message] = [str(w.message) for w in warned if label in str(w.message)]
    return registry, message


class CappedPlugin:
    """A plugin class, whose hook needs an object: `module:CappedPlugin` named in place of an object of it."""

    @dk.hookimpl
    def register_cache_backends(self, register: Any) -> None:
        _capped(register)


def test_a_plugin_class_in_place_of_its_object_fails_saying_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """An entry point or DECODEKIT_EXTRA_PLUGINS naming the class failed with pluggy's call of its unbound hook:
    `TypeError: CappedPlugin.register_cache_backends() missing 1 required positional argument: 'register'`."""
    monkeypatch.setattr("decodekit.plugins._code_plugins", [*dk.plugins._code_plugins, (CappedPlugin, "classy")])
    registry, message = reload_failing(monkeypatch, "classy")
    assert message.endswith(
        "plugin classy (in code) (entry point 'register_plugin') failed to load: PluginError: CappedPlugin is a "
        "class, whose hooks need an object; allowed: a module-level plugin = CappedPlugin(), named 'module:plugin'"
    )
    assert "capped" not in registry.caches


def test_check_imports_every_path_and_reports_broken_ones(registered: Callable[..., Plugin]) -> None:
    def hook(register: Any) -> None:
        register("ghost", "decodekit_no_such_module.cache:Ghost", description="missing module")
        register("phantom", "decodekit.cache:NoSuchClass", description="missing attribute")

    registered("haunted", register_cache_backends=hook)
    imported, broken_rows = check_imports(dk.get_registry())
    broken = {b["name"]: b for b in broken_rows}
    assert set(broken) == {"ghost", "phantom"}  # every standard plugin's path imports
    assert broken["ghost"]["distribution"] == "haunted"
    assert "ModuleNotFoundError: No module named 'decodekit_no_such_module'" in broken["ghost"]["error"]
    assert "AttributeError" in broken["phantom"]["error"]
    assert {"category": "cache backend", "name": "gqa", "distribution": "decodekit-cache-gqa"}.items() <= next(
        row for row in imported if row["name"] == "gqa"
    ).items()
    assert plugins_report(check=True)["broken"][0]["impl"] == "decodekit_no_such_module.cache:Ghost"


def test_cache_backend_parameters_in_every_form(registered: Callable[..., Plugin]) -> None:
    registered("capped-plugin", register_cache_backends=_capped)
    spec = dk.CacheSpec(1, 2, 1, 4, 1, 8)
    for cache in (
        dk.create_cache("capped(size=16, sinks=4)", spec),
        dk.create_cache("capped(16, 4)", spec),
        dk.create_cache("capped", spec, size=16, sinks=4),
        dk.create_cache("capped(16)", spec, sinks=4),
    ):
        assert isinstance(cache, CappedCache) and cache.params == CappedParams(size=16, sinks=4)
    with pytest.raises(
        dk.ParameterError, match=r"cache capped: size=0 is invalid: .*allowed: an integer 1 <= size <= 1024"
    ):
        dk.create_cache("capped(size=0)", spec)
    with pytest.raises(dk.ParameterError, match="missing required parameter size"):
        dk.create_cache("capped", spec)
    with pytest.raises(dk.ParameterError, match="unknown parameter window=3; allowed parameters: size, sinks"):
        dk.create_cache("capped(size=3, window=3)", spec)
    with pytest.raises(dk.ParameterError, match="parameter size given both"):
        dk.create_cache("capped(size=3)", spec, size=4)
    with pytest.raises(
        dk.ChainSpecError,
        match=r"cache 'capped\(size=3': at position 13: expected ',' or '\)' to close the '\(' at position 6",
    ):
        dk.create_cache("capped(size=3", spec)
    [listed] = [c for c in samplers_report()["cache_backends"] if c["name"] == "capped"]
    assert [(p["name"], p["allowed"], p["required"]) for p in listed["params"]] == [
        ("size", "an integer 1 <= size <= 1024", True),
        ("sinks", "an integer 0 <= sinks", False),
    ]


def test_a_sampler_takes_one_stage_in_its_string_form_as_a_cache_does() -> None:
    """`dk.create("top_k(5)")` is `dk.create("top_k", k=5)`, as `create_cache("window(size=128)")` is."""
    for stage in (dk.create("top_k(5)"), dk.create("top_k(k=5)"), dk.create(" top_k( 5 ) ")):
        assert type(stage) is type(dk.create("top_k", k=5)) and stage.params == dk.create("top_k", k=5).params
    assert dk.create("temperature(value=0.5)").params.value == 0.5
    assert dk.create("greedy").params == dk.create("greedy()").params
    with pytest.raises(dk.ParameterError, match=r"sampler top_k: parameter k given both in 'top_k\(k=5\)' and by"):
        dk.create("top_k(k=5)", k=3)
    with pytest.raises(dk.ParameterError, match=r"sampler top_k: positional values given both in 'top_k\(5\)' and"):
        dk.create("top_k(5)", 3)
    with pytest.raises(dk.ParameterError, match="top_k: parameter k given both by position and by name"):
        dk.create("top_k(5)", k=3)
    with pytest.raises(dk.ChainSpecError, match=r"expected the end \(one name\(args\), no '\|'\)"):
        dk.create("top_k(5) | temperature(0.8)")
    with pytest.raises(dk.UnknownNameError, match="unknown sampler 'topk'.*did you mean 'top_k'"):
        dk.create("topk(5)")


def test_an_unknown_cache_lists_and_suggests_none_which_generate_accepts() -> None:
    model = tiny_gpt(2)
    for misspelt in ("nne", "nonee"):
        with pytest.raises(dk.UnknownNameError) as raised:
            dk.generate(model, [[1]], max_new_tokens=2, cache=misspelt)
        message = str(raised.value)
        installed = ", ".join(sorted(dk.get_registry().caches))  # dense, gqa, ... and any third-party backend
        assert message.startswith(f"unknown cache backend {misspelt!r}; installed: {installed};")
        assert "; also accepted: none; did you mean 'none'?" in message
    with pytest.raises(dk.ParameterError, match=r"cache='none\(1\)' is invalid: 'none' takes no parameters"):
        dk.generate(model, [[1]], max_new_tokens=2, cache="none(1)")
    with pytest.raises(dk.UnknownNameError) as raised:  # create_cache builds a cache: 'none' is none there
        dk.create_cache("nne", dk.CacheSpec(1, 1, 1, 1, 1, 1))
    assert "none" not in str(raised.value).partition(";")[2]


def test_a_model_takes_its_parameters_in_its_string_form_with_or_without_an_argument(
    registered: Callable[..., Plugin],
) -> None:
    """`load_model("name(size=16)")`, as `create_cache("window(size=16)")`: the one string the CLI's
    --model, Ray's workers and a speculative draft pass on; its argument, if any, after ':'."""
    loaded: list[tuple[str | None, CappedParams]] = []

    def load(argument: str | None, params: CappedParams) -> SimpleNamespace:
        loaded.append((argument, params))
        return TOY_MODEL

    registered("sized", register_models=lambda register: register("tiny-sized.v2", load, CappedParams))
    for name, params in [
        ("tiny-sized.v2(size=16, sinks=2)", {}),
        ("tiny-sized.v2(16, 2)", {}),
        (" tiny-sized.v2 ( 16 )", {"sinks": 2}),
        ("tiny-sized.v2", {"size": 16, "sinks": 2}),
    ]:
        dk.load_model(name, **params)
        assert loaded.pop() == (None, CappedParams(size=16, sinks=2))
    dk.load_model("tiny-sized.v2(size=16, sinks=2):/a(b):c")  # the argument is the loader's, ':' and '(' included
    assert loaded.pop() == ("/a(b):c", CappedParams(size=16, sinks=2))
    dk.load_model("tiny-sized.v2:/a(b)", size=3)
    assert loaded.pop() == ("/a(b)", CappedParams(size=3))
    dk.load_model("tiny-sized.v2(size=4):")
    assert loaded.pop() == ("", CappedParams(size=4))
    with pytest.raises(dk.ParameterError, match=r"model tiny-sized.v2: size=0 is invalid: .*1 <= size <= 1024"):
        dk.load_model("tiny-sized.v2(size=0)")
    with pytest.raises(dk.ParameterError, match=r"model tiny-sized.v2: parameter size given both in .* and by keyword"):
        dk.load_model("tiny-sized.v2(size=4)", size=5)
    with pytest.raises(dk.ChainSpecError, match=r"model 'tiny-sized.v2\(size=4\)x': at position 21: expected ':' or"):
        dk.load_model("tiny-sized.v2(size=4)x")
    with pytest.raises(dk.UnknownNameError, match="unknown model 'tiny-sized'; .*did you mean 'tiny-sized.v2'"):
        dk.load_model("tiny-sized(size=4)")
    assert not loaded


def test_generate_takes_a_cache_string_a_factory_or_a_partial(registered: Callable[..., Plugin]) -> None:
    registered("capped-plugin", register_cache_backends=_capped)
    model = tiny_gpt(2)
    made: list[dk.KVCache] = []

    def factory(spec: dk.CacheSpec, tag: str = "") -> dk.KVCache:
        made.append(dk.create_cache("gqa", spec))
        return made[-1]

    reference = dk.generate(model, [[1, 2, 3]], max_new_tokens=5, chain="greedy", cache="gqa").tokens
    for cache in ("capped(size=8)", factory, functools.partial(factory, tag="x")):
        assert dk.generate(model, [[1, 2, 3]], max_new_tokens=5, chain="greedy", cache=cache).tokens == reference
    assert len(made) == 2 and made[0].length == 3 + 4  # the factory's cache served the decode
    with pytest.raises(dk.ParameterError, match=r"cache capped: size=-1 is invalid"):
        dk.generate(model, [[1]], cache="capped(size=-1)")


def test_strategy_parameters_are_listed_and_checked_by_decode() -> None:
    [beam] = [s for s in samplers_report()["strategies"] if s["name"] == "beam"]
    assert [p["name"] for p in beam["params"]] == [
        "num_beams",
        "length_penalty",
        "early_stopping",
        "num_return_sequences",
    ]
    model = tiny_gpt(2)
    by_keyword = dk.decode(model, [[1, 2]], strategy="beam", num_beams=3, max_new_tokens=4)
    by_string = dk.decode(model, [[1, 2]], strategy="beam(num_beams=3)", max_new_tokens=4)
    assert by_keyword.tokens == by_string.tokens == beam_search(model, [[1, 2]], num_beams=3, max_new_tokens=4).tokens
    with pytest.raises(dk.ParameterError, match=r"strategy beam: num_beams=0 is invalid"):
        dk.decode(model, [[1]], strategy="beam", num_beams=0)
    with pytest.raises(dk.ParameterError, match="unknown parameter k=4; allowed parameters: num_beams, .*chain"):
        dk.decode(model, [[1]], strategy="beam", k=4)
    with pytest.raises(dk.ParameterError, match="strategy sample: unknown parameter num_beams=2"):
        dk.decode(model, [[1]], num_beams=2)


class EncodeOnly:
    def encode(self, text: str) -> list[int]:
        return [ord(c) % 50 for c in text]


def _with_tokenizer(tokenizer: object) -> SimpleNamespace:
    return SimpleNamespace(spec=TOY_MODEL.spec, tokenizer=tokenizer)


@pytest.mark.parametrize(
    ("model", "says"),
    [
        (None, "its loader returned None; allowed: a model, with a decodekit.ModelSpec `spec`"),
        (
            _with_tokenizer(EncodeOnly()),
            "its loader returned a model whose tokenizer EncodeOnly lacks encode or decode; allowed: a tokenizer with "
            "encode(text) -> list[int] and decode(ids) -> str, or tokenizer None",
        ),
    ],
)
def test_a_model_loader_that_returns_no_model_fails_naming_its_plugin(
    registered: Callable[..., Plugin], model: object, says: str
) -> None:
    """A loader returning None was, on the command line, "the model has no tokenizer"; a tokenizer without decode an
    "unexpected AttributeError"; in Python both surfaced far from the plugin at fault."""
    registered("loaders", register_models=lambda register: register("broken", lambda argument, params: model))
    with pytest.raises(dk.PluginError, match=re.escape(f"model 'broken' from loaders: {says}")):
        dk.load_model("broken")


def test_model_loaders_receive_validated_parameters(registered: Callable[..., Plugin]) -> None:
    class WidthParams(dk.Params):
        width: int = Field(default=8, ge=1, le=64)

    seen: list[tuple[str | None, WidthParams]] = []

    def loader(argument: str | None, params: WidthParams) -> SimpleNamespace:
        seen.append((argument, params))
        return TOY_MODEL

    registered("loaders", register_models=lambda register: register("toy-model.v2", loader, WidthParams, "a toy"))
    assert dk.load_model("toy-model.v2") is dk.load_model("toy-model.v2:extra", width=16) is TOY_MODEL
    assert seen == [(None, WidthParams()), ("extra", WidthParams(width=16))]
    with pytest.raises(dk.ParameterError, match=r"model toy-model.v2: width=65 is invalid"):
        dk.load_model("toy-model.v2", width=65)


def test_a_registry_with_failures_warns_once_per_build() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the standard plugins register cleanly
        registry = dk.reload_plugins()
    assert not registry.failures and not registry.conflicts


def test_the_registry_kit_checks_every_category(registered: Callable[..., Plugin]) -> None:
    from decodekit.testing.registry import check_bad_parameters, check_registered

    registered("capped-plugin", register_cache_backends=_capped)
    check_registered("capped", distribution="capped-plugin", category="cache backend")
    check_registered("beam", distribution="decodekit-beam", category="strategy")
    check_registered("top_k", distribution="decodekit-top-k", kind="processor")
    check_bad_parameters("capped", {"size": 2000}, ["size=2000", "1 <= size <= 1024"], category="cache backend")
    check_bad_parameters("beam", {"num_beams": 0}, ["num_beams=0", "1 <= num_beams"], category="strategy")
    with pytest.raises(AssertionError, match="registered by capped-plugin, expected someone-else"):
        check_registered("capped", distribution="someone-else", category="cache backend")
    with pytest.raises(AssertionError, match="no ParameterError"):
        check_bad_parameters("capped", {"size": 3}, ["size"], category="cache backend")


def test_the_registry_kit_checks_a_hook_imports_no_torch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from decodekit.testing.registry import check_hook_imports_no_torch

    assert check_hook_imports_no_torch("decodekit_top_k.plugin", "register_samplers") == [
        ("top_k", "decodekit_top_k.top_k:TopK")
    ]
    (tmp_path / "heavy_plugin.py").write_text("import torch\n\ndef register_samplers(register):\n    pass\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    with pytest.raises(AssertionError, match="heavy_plugin.register_samplers in a fresh interpreter: .*imported torch"):
        check_hook_imports_no_torch("heavy_plugin", "register_samplers")


@pytest.mark.parametrize("name", [5, None, ["top_k"], {"a": 1}])
def test_a_lookup_by_a_name_that_is_not_a_string_says_so(name: Any) -> None:
    with pytest.raises(dk.UnknownNameError, match=f"sampler name .* is a {type(name).__name__}; allowed: a string"):
        dk.create(name)
    with pytest.raises(dk.UnknownNameError, match="strategy name"):
        dk.get_registry().lookup("strategy", name)


def test_a_mistyped_parameter_name_gets_the_close_one() -> None:
    model = tiny_gpt(2)
    with pytest.raises(
        dk.ParameterError, match=r"unknown parameter val=2; allowed parameters: value; did you mean 'value'\?$"
    ):
        dk.create("temperature", val=2)
    with pytest.raises(dk.ParameterError, match=r"unknown parameter num_beam=2; .*; did you mean 'num_beams'\?$"):
        dk.decode(model, [[1]], strategy="beam(num_beam=2)")
    with pytest.raises(dk.ParameterError, match=r"unknown parameter num_beam=2; .*; did you mean 'num_beams'\?$"):
        dk.decode(model, [[1]], strategy="beam", num_beam=2)
    with pytest.raises(dk.ParameterError, match=r"unknown parameter zzz=2; allowed parameters: value$"):
        dk.create("temperature", zzz=2)  # nothing close: no suggestion


def test_the_close_name_is_found_whatever_the_case() -> None:
    with pytest.raises(dk.UnknownNameError, match="unknown sampler 'Top_K'; .*; did you mean 'top_k'\\?"):
        dk.create("Top_K", k=5)  # case-sensitive matching offered 'top_p'


def test_an_impl_path_that_does_not_import_says_what_to_fix(registered: Callable[..., Plugin]) -> None:
    registered("typo", register_samplers=lambda register: register("halve", "decodekit.sample:Sampel"))
    with pytest.raises(dk.PluginError) as err:
        dk.create("halve")
    assert str(err.value) == (
        "sampler 'halve' from typo: cannot import 'decodekit.sample:Sampel': AttributeError: module "
        "'decodekit.sample' has no attribute 'Sampel'; allowed: an import path 'package.module:attr' that imports "
        "in this environment (typo's register call names it)"
    )


def test_an_unknown_name_names_the_plugins_that_failed_to_load(monkeypatch: pytest.MonkeyPatch) -> None:
    """A plugin whose hook failed registered nothing: its name was 'unknown ... no installed plugin registers it',
    and in Python the warning that said why came once, at the first use of the registry."""

    def bad(register: Any) -> None:
        register("oops_shift", Shift, BaseModel)  # params not a decodekit.Params

    plugin = Plugin(register_samplers=bad)
    monkeypatch.setattr("decodekit.plugins._code_plugins", [*dk.plugins._code_plugins, (plugin, "oops")])
    with pytest.warns(RuntimeWarning):
        dk.reload_plugins()
    with pytest.raises(dk.UnknownNameError) as err:
        dk.create("oops_shift")
    assert str(err.value).endswith(
        "(no installed plugin distribution registers it; oops failed to load: `decodekit plugins` says why)"
    )
    monkeypatch.undo()
    dk.reload_plugins()


def test_an_unknown_name_names_a_distribution_without_an_entry_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plugin installed without `[project.entry-points.decodekit]` was found by nothing and named by nothing."""
    info = tmp_path / "decodekit_noentry-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: decodekit-noentry\nVersion: 0.1.0\nRequires-Dist: decodekit>=0.1\n"
        'Requires-Dist: pytest; extra == "test"\n'
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        dk.reload_plugins()
        with pytest.raises(dk.UnknownNameError) as err:
            dk.create("noentry")
    finally:
        monkeypatch.undo()
        dk.reload_plugins()
    assert str(err.value).endswith(
        "(no installed plugin distribution registers it; decodekit-noentry requires decodekit and declares no "
        "entry point: a plugin's pyproject.toml needs [project.entry-points.decodekit], then pip install it again)"
    )


def test_an_entry_point_naming_a_package_without_hooks_fails_saying_which_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ratio = "dk_ratio"` in place of `"dk_ratio.plugin"`: the plugin was listed as registering nothing, no warning,
    and its sampler's name was "unknown" with "no installed plugin distribution registers it"."""
    package = tmp_path / "dk_ratio"
    package.mkdir()
    (package / "__init__.py").write_text('"""A plugin whose hooks are in its plugin module."""\n')
    (package / "plugin.py").write_text(
        "from decodekit import hookimpl\n\n\n@hookimpl\ndef register_samplers(register):\n"
        '    register("keep_ratio", "decodekit.sample:Sample", kind="selector")\n'
    )
    info = tmp_path / "decodekit_ratio-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: decodekit-ratio\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text("[decodekit]\nratio = dk_ratio\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    def unknown() -> None:
        with pytest.raises(dk.UnknownNameError, match="decodekit-ratio failed to load: `decodekit plugins` says why"):
            dk.create("keep_ratio")

    _, message = reload_failing(monkeypatch, "decodekit-ratio", unknown)
    assert message.endswith(
        "plugin decodekit-ratio 0.1.0 (entry point 'ratio') failed to load: PluginError: dk_ratio is a package "
        "without a register_* hook, so it registers nothing; allowed: the module with the @decodekit.hookimpl "
        "functions (its modules: dk_ratio.plugin)"
    )


def test_a_distribution_whose_metadata_has_no_name_is_not_listed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A broken install (METADATA without a Name) requiring decodekit: importlib names it None, which sorted()
    refused, so every unknown name was a TypeError and `decodekit plugins` an 'unexpected' error."""
    for folder, name in (("decodekit_noentry-0.1.0.dist-info", "Name: decodekit-noentry\n"), ("broken.dist-info", "")):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "METADATA").write_text(
            f"Metadata-Version: 2.1\n{name}Version: 0.1.0\nRequires-Dist: decodekit\n"
        )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        dk.reload_plugins()
        with warnings.catch_warnings():  # from Python 3.12, `dist.name` warned: 'Implicit None on return values'
            warnings.simplefilter("error", DeprecationWarning)
            assert without_entry_point() == ["decodekit-noentry"]
        with pytest.raises(dk.UnknownNameError, match="decodekit-noentry requires decodekit and declares no entry"):
            dk.create("noentry")
    finally:
        monkeypatch.undo()
        dk.reload_plugins()


def test_only_a_distribution_that_looks_like_a_plugin_is_listed_without_an_entry_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every application that uses decodekit was listed by `decodekit plugins` as a plugin "without an entry
    point"; now only one named like a plugin, decodekit-* (setuptools writes no empty entry-point group to read)."""
    dists = {
        "my-app": ("Requires-Dist: decodekit>=0.1\n", None),  # uses decodekit, registers nothing: an application
        "decodekit-noentry": ("Requires-Dist: decodekit\n", None),
        "Decodekit_Underscored": ("Requires-Dist: decodekit\n", None),  # decodekit-underscored, as pip normalises it
        "decodekit-cmd": ("Requires-Dist: decodekit\n", "[console_scripts]\nx = decodekit_cmd:main\n"),
        "decodekit-found": ("Requires-Dist: decodekit\n", "[decodekit]\nfound = decodekit_found.plugin\n"),
        "decodekitchen": ("Requires-Dist: decodekit\n", None),  # not decodekit-*
        "decodekit-unrelated": ("", None),  # does not require decodekit
    }
    for name, (requires, entry_points) in dists.items():
        info = tmp_path / f"{name.replace('-', '_')}-0.1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1.0\n{requires}")
        if entry_points is not None:
            (info / "entry_points.txt").write_text(entry_points)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert without_entry_point() == ["Decodekit_Underscored", "decodekit-cmd", "decodekit-noentry"]
    finally:
        monkeypatch.undo()


def test_a_standard_plugins_implementation_that_fails_to_import_says_what_to_reinstall(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """decodekit-top-k registers top_k by its import path; its module failing at first use (a dependency removed, a
    broken install) said "allowed: an import path 'package.module:attr' that imports in this environment
    (decodekit-top-k's register call names it)", words for the plugin's author, not for whoever uses it."""
    entry = dk.plugins.get_registry().lookup("sampler", "top_k")
    assert entry.impl == "decodekit_top_k.top_k:TopK"  # registered by path: imported at first use
    monkeypatch.setitem(sys.modules, "decodekit_top_k.top_k", None)  # its import fails: ModuleNotFoundError
    with pytest.raises(dk.PluginError) as err:
        dk.create("top_k", 5)
    assert str(err.value) == (
        f"sampler 'top_k' is installed, but decodekit-top-k {entry.version} failed to import it "
        "('decodekit_top_k.top_k:TopK': ModuleNotFoundError: import of decodekit_top_k.top_k halted; None in "
        "sys.modules): a broken install or a missing dependency; reinstall it: pip install --force-reinstall "
        f"decodekit-top-k (from a checkout: pip install --force-reinstall {ROOT}/plugins/decodekit-top-k)"
    )


def _extra_failures(monkeypatch: pytest.MonkeyPatch, value: str) -> dict[str, str]:
    """Each failed DECODEKIT_EXTRA_PLUGINS entry's error, by its spec, with the variable set to `value`."""
    monkeypatch.setenv("DECODEKIT_EXTRA_PLUGINS", value)
    with pytest.warns(RuntimeWarning):
        return {f.distribution: f.error for f in dk.reload_plugins().failures}


def test_an_extra_plugin_that_is_not_on_sys_path_says_how_to_put_it_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`DECODEKIT_EXTRA_PLUGINS=my_plugin` with a my_plugin.py in the current folder said only "No module named
    'my_plugin'": a console script does not search the current folder, and nothing said so."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my_plugin.py").write_text("")
    (tmp_path / "needs_more.py").write_text("import no_such_dependency_of_it\n")
    failures = _extra_failures(monkeypatch, "my_plugin,needs_more")
    assert failures["my_plugin"] == (
        "PluginError: DECODEKIT_EXTRA_PLUGINS=my_plugin: module 'my_plugin' is not importable from sys.path "
        "(ModuleNotFoundError: No module named 'my_plugin'); allowed: importable modules, 'pkg.module' or "
        "'pkg.module:attr' (a console script such as decodekit does not search the current folder: for a "
        "my_plugin.py there, PYTHONPATH=. DECODEKIT_EXTRA_PLUGINS=my_plugin)"
    )
    monkeypatch.syspath_prepend(str(tmp_path))  # found, so the module it imports is the one to blame
    failures = _extra_failures(monkeypatch, "my_plugin,needs_more")
    assert "my_plugin" not in failures
    assert failures["needs_more"] == (
        "PluginError: DECODEKIT_EXTRA_PLUGINS=needs_more: module 'needs_more' failed to import: ModuleNotFoundError: "
        "No module named 'no_such_dependency_of_it'"
    )
    monkeypatch.undo()
    dk.reload_plugins()


def test_an_extra_plugin_spec_that_names_nothing_says_what_the_module_has(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: `spelt:Plugn` failed with Python's "AttributeError: module 'spelt' has no attribute 'Plugn'"
    alone; `spelt:` loaded the module as the plugin (its Plugin object never registered, silently); `:Plugin`
    said "ValueError: Empty module name"; a module raising on import showed its error with no word of the module."""
    (tmp_path / "spelt.py").write_text(
        "import decodekit\n\n\nclass MyPlugin:\n    @decodekit.hookimpl\n    def register_samplers(self, register):\n"
        "        pass\n\n\nPlugin = MyPlugin()\nother = MyPlugin()\nhelper = 3\n"
    )
    (tmp_path / "hooks_of_its_own.py").write_text("def register_models(register):\n    pass\n")
    (tmp_path / "explodes.py").write_text("raise ValueError('a bug at import')\n")
    (tmp_path / "hookless.py").write_text("helper = 3\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    specs = "spelt:Plugn,spelt:,:Plugin,spelt:Plugin.x,hooks_of_its_own:registr_models,explodes:Plugin,hookless:P"
    failures = _extra_failures(monkeypatch, specs)
    allowed = "allowed: 'pkg.module' or 'pkg.module:attr', comma-separated"
    assert failures == {
        "spelt:Plugn": "PluginError: DECODEKIT_EXTRA_PLUGINS=spelt:Plugn: module 'spelt' has no attribute "
        "'Plugn'; allowed: its plugin objects (with a register_* hook) spelt:Plugin, spelt:other; did you "
        "mean 'Plugin'?",
        "spelt:": f"PluginError: DECODEKIT_EXTRA_PLUGINS=spelt: is invalid: an empty attribute; {allowed}",
        ":Plugin": f"PluginError: DECODEKIT_EXTRA_PLUGINS=:Plugin is invalid: an empty module; {allowed}",
        "spelt:Plugin.x": "PluginError: DECODEKIT_EXTRA_PLUGINS=spelt:Plugin.x: spelt:Plugin has no "
        "attribute 'x'; allowed: its plugin objects (with a register_* hook) spelt:Plugin (itself)",
        "hooks_of_its_own:registr_models": "PluginError: DECODEKIT_EXTRA_PLUGINS=hooks_of_its_own:registr_models: "
        "module 'hooks_of_its_own' has no attribute 'registr_models'; allowed: its plugin objects (with a "
        "register_* hook) hooks_of_its_own (itself)",
        "explodes:Plugin": "PluginError: DECODEKIT_EXTRA_PLUGINS=explodes:Plugin: module 'explodes' failed to import: "
        "ValueError: a bug at import",
        "hookless:P": "PluginError: DECODEKIT_EXTRA_PLUGINS=hookless:P: module 'hookless' has no attribute 'P'; "
        "allowed: an object with a register_samplers, register_cache_backends, register_models or "
        "register_strategies hook, and hookless has none",
    }
    monkeypatch.setenv("DECODEKIT_STRICT_PLUGINS", "1")  # strict: the first one raised, in the same words
    with pytest.raises(dk.PluginError, match=r"DECODEKIT_EXTRA_PLUGINS=spelt:Plugn: module 'spelt' has no"):
        dk.reload_plugins()
    monkeypatch.undo()
    dk.reload_plugins()


def test_a_checkpoint_directory_given_as_the_model_says_to_name_its_loader(tmp_path: Path) -> None:
    """`dk.load_model("/models/llama")`, as transformers' from_pretrained takes it, said only "unknown model" and
    listed the models, not that a checkpoint folder goes after its loader's name."""
    with pytest.raises(dk.UnknownNameError) as refused:
        dk.load_model(str(tmp_path))
    assert str(refused.value) == (
        f"model {str(tmp_path)!r} is a directory, not a model name; allowed: the name of the model that loads it "
        f"before it, as 'hf:{tmp_path}' for a Hugging Face checkpoint"
    )
    with pytest.raises(dk.UnknownNameError, match=r"^unknown model 'no-such-folder'; installed: "):
        dk.load_model("no-such-folder")  # not a directory: the usual error
