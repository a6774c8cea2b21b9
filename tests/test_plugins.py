"""Plugin discovery: entry points, failure isolation, strict mode, allowlist, name conflicts."""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_runner import run_cli
from decodekit_cli.plugin_template import files_for
from uninstalled import uninstall

import decodekit as dk
import decodekit.plugins
from decodekit.stage import ProcessorBase

STANDARD_SAMPLER_DISTS = {
    "greedy": "decodekit-greedy",
    "temperature": "decodekit-temperature",
    "top_k": "decodekit-top-k",
    "top_p": "decodekit-top-p",
    "repetition_penalty": "decodekit-repetition-penalty",
}


def fake_distribution(site: Path, dist: str, module: str, body: str) -> None:
    """Lay out an installed distribution (dist-info + module) with one `decodekit` entry point."""
    (site / f"{module}.py").write_text(textwrap.dedent(body))
    info = site / f"{dist.replace('-', '_')}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[decodekit]\n{module} = {module}\n")


REGISTERS_SAMPLER = """
    import decodekit as dk
    from decodekit.stage import ProcessorBase

    class Shift(ProcessorBase[dk.NoParams]):
        name = "{name}"

        def __call__(self, logits, ctx):
            return logits + 1.0

    @dk.hookimpl
    def register_samplers(register):
        register("{name}", Shift, description="adds one")
"""


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A directory on sys.path acting as site-packages; the registry is rebuilt around the test."""
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    yield tmp_path
    monkeypatch.undo()
    for mod in [m for m in sys.modules if m.startswith("fake_")]:
        del sys.modules[mod]
    dk.reload_plugins()


def test_standard_plugins_are_discovered_through_entry_points() -> None:
    registry = dk.reload_plugins()
    for name, dist in STANDARD_SAMPLER_DISTS.items():
        if name in registry.samplers:
            assert registry.samplers[name].distribution == dist
    assert registry.samplers["sample"].distribution == "decodekit"
    assert {"dense", "gqa"} <= set(registry.caches)
    info = registry.plugins["decodekit-cache-gqa"]
    assert info.cache_backends == ["gqa"] and info.version == "0.1.0"


def test_each_distributions_version_is_its_packages_version() -> None:
    """A version is written once, as `__version__`; pyproject.toml reads it (`dynamic`), so the two cannot part."""
    repo = Path(__file__).resolve().parents[1]
    projects = [repo / "pyproject.toml", *sorted((repo / "plugins").glob("*/pyproject.toml"))]
    checked = 0
    for project in projects:
        text = project.read_text()
        if 'dynamic = ["version"]' not in text:
            assert "\nversion = " in text, f"{project}: no version"
            continue
        package = text.split('version = {attr = "')[1].split(".__version__")[0]
        distribution = text.split('name = "')[1].split('"')[0]
        assert importlib.metadata.version(distribution) == importlib.import_module(package).__version__
        checked += 1
    assert checked == 22


def test_a_plugin_that_fails_to_import_is_reported_and_the_rest_work(site: Path) -> None:
    fake_distribution(site, "fake-broken", "fake_broken", "raise RuntimeError('boom: missing dependency')\n")
    fake_distribution(site, "fake-good", "fake_good", REGISTERS_SAMPLER.format(name="fake_shift"))
    with pytest.warns(RuntimeWarning, match="fake-broken 1.0 .*boom"):
        registry = dk.reload_plugins()
    [failure] = [f for f in registry.failures if f.distribution == "fake-broken"]
    assert failure.version == "1.0" and "RuntimeError: boom: missing dependency" in failure.error
    assert "fake_shift" in registry.samplers  # the others keep working
    assert "dense" in registry.caches


def test_a_plugin_whose_hook_raises_is_isolated(site: Path) -> None:
    body = """
        import decodekit as dk

        @dk.hookimpl
        def register_samplers(register):
            raise ValueError("bad registration")
    """
    fake_distribution(site, "fake-hookfail", "fake_hookfail", body)
    with pytest.warns(RuntimeWarning, match="fake-hookfail"):
        registry = dk.reload_plugins()
    assert any("bad registration" in f.error for f in registry.failures)
    assert "sample" in registry.samplers


@pytest.mark.parametrize(
    "body",
    [
        "raise KeyboardInterrupt\n",  # Ctrl-C while the plugin imports
        "import decodekit as dk\n\n@dk.hookimpl\ndef register_samplers(register):\n    raise KeyboardInterrupt\n",
    ],
    ids=["import", "hook"],
)
def test_ctrl_c_while_plugins_load_interrupts_the_caller(site: Path, body: str) -> None:
    """A plugin's failure is its own, but Ctrl-C is the user's: it was recorded as the plugin's failure and the
    command went on (a batch job's Ctrl-C during a lazy import became one failed line, not an interruption)."""
    fake_distribution(site, "fake-interrupted", "fake_interrupted", body)
    with pytest.raises(KeyboardInterrupt):
        dk.reload_plugins()


def test_ctrl_c_while_a_stage_imports_interrupts_the_caller(site: Path) -> None:
    (site / "fake_slow_stage.py").write_text("raise KeyboardInterrupt\n")
    fake_distribution(
        site,
        "fake-lazy",
        "fake_lazy",
        """
        import decodekit as dk

        @dk.hookimpl
        def register_samplers(register):
            register("fake_lazy", "fake_slow_stage:Stage", dk.NoParams, kind="processor")
        """,
    )
    entry = dk.reload_plugins().samplers["fake_lazy"]
    with pytest.raises(KeyboardInterrupt):
        entry.load()


def test_strict_mode_makes_a_failure_fatal(site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_distribution(site, "fake-broken", "fake_broken", "raise ImportError('no module named torchvision')\n")
    monkeypatch.setenv("DECODEKIT_STRICT_PLUGINS", "1")
    with pytest.raises(dk.PluginError, match="fake-broken 1.0 .*torchvision.*DECODEKIT_STRICT_PLUGINS"):
        dk.reload_plugins()


def test_allowlist_filters_before_import(site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    marker = site / "imported.txt"
    body = f"open({str(marker)!r}, 'w').write('imported')\n" + textwrap.dedent(
        REGISTERS_SAMPLER.format(name="fake_loud")
    )
    fake_distribution(site, "fake-loud", "fake_loud", body)
    monkeypatch.setenv("DECODEKIT_LOAD_PLUGINS", "decodekit-cache-dense")
    registry = dk.reload_plugins()
    assert not marker.exists(), "a distribution outside the allowlist was imported"
    assert set(registry.caches) == {"dense"}
    assert set(registry.samplers) == {"sample"}  # the core's own registrations always load
    monkeypatch.setenv("DECODEKIT_LOAD_PLUGINS", "")
    assert set(dk.reload_plugins().caches) == set()
    monkeypatch.setenv("DECODEKIT_LOAD_PLUGINS", "fake_loud")  # names are normalised (PEP 503)
    assert "fake_loud" in dk.reload_plugins().samplers and marker.exists()


def test_a_name_two_distributions_register_is_unusable_and_the_error_says_how_to_choose(
    site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_distribution(site, "fake-one", "fake_one", REGISTERS_SAMPLER.format(name="fake_dup"))
    fake_distribution(site, "fake-two", "fake_two", REGISTERS_SAMPLER.format(name="fake_dup"))
    with pytest.warns(RuntimeWarning, match="'fake_dup' is registered by 2 distributions: fake-one and fake-two"):
        registry = dk.reload_plugins()
    assert "fake_dup" not in registry.samplers and "temperature" in registry.samplers
    with pytest.raises(dk.PluginError, match="fake-one and fake-two.*DECODEKIT_DISABLE_PLUGINS=fake-two"):
        dk.create("fake_dup")
    assert dk.Chain.parse("temperature(0.5)").processors  # everything else keeps working
    monkeypatch.setenv("DECODEKIT_DISABLE_PLUGINS", " fake-two ")
    registry = dk.reload_plugins()
    assert registry.samplers["fake_dup"].distribution == "fake-one" and not registry.conflicts


def test_a_plugin_cannot_silently_replace_a_core_sampler(site: Path) -> None:
    fake_distribution(site, "fake-sample", "fake_sample", REGISTERS_SAMPLER.format(name="sample"))
    with pytest.warns(RuntimeWarning, match="'sample' is registered by 2 distributions: decodekit and fake-sample"):
        dk.reload_plugins()
    with pytest.raises(dk.PluginError, match="decodekit and fake-sample"):
        dk.create("sample")
    assert type(dk.Chain().selector).__name__ == "Sample"  # the default selector needs no registry


def test_strict_mode_makes_a_conflict_fatal(site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_distribution(site, "fake-one", "fake_one", REGISTERS_SAMPLER.format(name="fake_dup"))
    fake_distribution(site, "fake-two", "fake_two", REGISTERS_SAMPLER.format(name="fake_dup"))
    monkeypatch.setenv("DECODEKIT_STRICT_PLUGINS", "1")
    with pytest.raises(dk.PluginError, match="fake-one and fake-two.*DECODEKIT_STRICT_PLUGINS"):
        dk.reload_plugins()


def test_allowlist_entries_are_stripped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DECODEKIT_LOAD_PLUGINS", " decodekit-cache-dense , decodekit-cache-gqa,")
    try:
        assert set(dk.reload_plugins().caches) == {"dense", "gqa"}
    finally:
        monkeypatch.delenv("DECODEKIT_LOAD_PLUGINS")
        dk.reload_plugins()


@pytest.mark.parametrize(
    ("variable", "named", "works", "caches"),
    [  # a typo once loaded the core alone (LOAD), or disabled nothing (DISABLE), silently
        ("DECODEKIT_LOAD_PLUGINS", "decodekit-cache-dense", "decodekit, decodekit-cache-dense", {"dense"}),
        ("DECODEKIT_DISABLE_PLUGINS", "decodekit-cache-gqa", "decodekit-cache-gqa", None),
    ],
)
def test_a_list_naming_no_installed_distribution_is_refused(
    monkeypatch: pytest.MonkeyPatch, variable: str, named: str, works: str, caches: set[str] | None
) -> None:
    monkeypatch.setenv(variable, f"{named}, Not_Installed")
    try:
        with pytest.raises(dk.UnknownNameError) as err:
            dk.reload_plugins()
        message = str(err.value)
        assert message.startswith(
            f"{variable} names 'not-installed', which is no installed plugin distribution; "
            "allowed: a comma-separated list of decodekit, "
        ), message
        assert f", {named}, " in message and message.endswith(" (empty: none)")
        monkeypatch.setenv(variable, works)  # the core may be named
        loaded = set(dk.reload_plugins().caches)
        if caches is not None:
            assert loaded == caches
        else:
            assert "gqa" not in loaded and "dense" in loaded
    finally:
        monkeypatch.delenv(variable)
        dk.reload_plugins()


def test_unknown_names_list_what_is_installed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DECODEKIT_LOAD_PLUGINS", "")  # the core alone: the others installed, left out
    uninstall(monkeypatch, "decodekit-top-k", "decodekit-cache-gqa")
    with pytest.raises(dk.UnknownNameError) as err:
        dk.Chain.parse("top_k(50) | sample")
    assert "installed: sample" in str(err.value)
    assert "; decodekit-top-k registers it: pip install decodekit-top-k (" in str(err.value)  # a standard name
    with pytest.raises(
        dk.UnknownNameError, match="cache backend 'gqa' is not installed; installed: none; decodekit-cache-gqa reg"
    ):
        dk.create_cache("gqa", dk.CacheSpec(1, 1, 1, 1, 1, 1))
    with pytest.raises(dk.UnknownNameError, match="did you mean 'sample'"):
        dk.create("sampel")


@pytest.mark.parametrize(
    ("variable", "value", "said"),
    [
        ("DECODEKIT_DISABLE_PLUGINS", "{dist}", "DECODEKIT_DISABLE_PLUGINS lists {dist}; remove it from {variable}"),
        ("DECODEKIT_LOAD_PLUGINS", "", "DECODEKIT_LOAD_PLUGINS does not list {dist}; add it to {variable} (or unset "),
    ],
)
def test_a_standard_name_installed_but_left_out_says_how_to_enable_it(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, said: str
) -> None:
    """A sampler, cache backend or strategy left out by either variable was "not installed", with a pip install
    that would change nothing: the words name the variable and what to change in it."""
    spec = dk.CacheSpec(1, 1, 1, 1, 1, 1)
    cases: list[tuple[str, str, Any]] = [
        ("sampler 'top_p'", "decodekit-top-p", lambda: dk.create("top_p", 0.9)),
        ("cache backend 'gqa'", "decodekit-cache-gqa", lambda: dk.create_cache("gqa", spec)),
        ("strategy 'beam'", "decodekit-beam", lambda: decodekit.plugins.get_registry().lookup("strategy", "beam")),
    ]
    for what, dist, use in cases:
        monkeypatch.setenv(variable, value.format(dist=dist))
        monkeypatch.setattr(decodekit.plugins, "_registry", None)  # rebuilt from the variable on first use
        with pytest.raises(dk.UnknownNameError) as err:
            use()
        message = str(err.value)
        assert message.startswith(f"{what} is installed but disabled: {said.format(dist=dist, variable=variable)}")
        assert message.endswith(" to enable it") and "pip install" not in message


def test_every_name_a_plugin_of_the_checkout_registers_is_a_standard_name() -> None:
    """`STANDARD_PLUGINS` is how a missing name is known to be a standard one: it lacked 30 (min_p, dry, h2o, ...), so
    each of those, disabled, was an "unknown sampler" with a close name, not installed but disabled."""
    from decodekit.standard_plugins import STANDARD_PLUGINS

    root = Path(__file__).resolve().parents[1]
    registered = {
        name: dist
        for dist, info in decodekit.plugins.get_registry().plugins.items()
        if (root / "plugins" / dist / "pyproject.toml").exists()
        for name in [*info.samplers, *info.cache_backends, *info.models, *info.strategies]
    }
    assert {n: d for n, d in registered.items() if STANDARD_PLUGINS.get(n) != d} == {}


def test_a_sampler_of_a_disabled_plugin_beyond_the_defaults_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DECODEKIT_DISABLE_PLUGINS", "decodekit-penalties")
    monkeypatch.setattr(decodekit.plugins, "_registry", None)  # rebuilt from the variable on first use
    with pytest.raises(dk.UnknownNameError, match=r"^sampler 'frequency_penalty' is installed but disabled: "):
        dk.Chain.parse("frequency_penalty(0.5)")


def test_register_plugin_in_code() -> None:
    class MyPlugin:
        @dk.hookimpl
        def register_samplers(self, register: object) -> None:
            from decodekit.stage import ProcessorBase

            class Half(ProcessorBase[dk.NoParams]):
                name = "half"

                def __call__(self, logits, ctx):  # type: ignore[no-untyped-def]
                    return logits / 2

            register("half", Half, description="halves logits")  # type: ignore[operator]

    plugin = MyPlugin()
    dk.register_plugin(plugin, name="my-plugin")
    try:
        assert dk.get_registry().samplers["half"].distribution == "my-plugin"
        assert repr(dk.Chain.parse("half | sample")) == "Chain('half | sample')"
    finally:
        dk.unregister_plugin(plugin)
    assert "half" not in dk.get_registry().samplers


def test_a_hook_misspelt_or_not_marked_is_an_error_not_silence() -> None:
    class Misspelt:
        @dk.hookimpl
        def register_sampler(self, register: object) -> None: ...

    class Unmarked:
        def register_samplers(self, register: object) -> None: ...

    # each registered nothing and said nothing
    with pytest.raises(
        dk.PluginError, match=r"unknown hook 'register_sampler'; .*; did you mean 'register_samplers'\?$"
    ):
        dk.register_plugin(Misspelt())
    with pytest.raises(
        dk.PluginError, match=r"register_samplers is not marked @decodekit.hookimpl, so it is never called"
    ):
        dk.register_plugin(Unmarked())
    assert not any(p in dk.get_registry().plugins for p in ("Misspelt", "Unmarked"))


def test_a_processor_function_registered_as_itself_says_what_impl_is() -> None:
    def ban(logits: object, ctx: object) -> object:
        return logits

    class Direct:
        @dk.hookimpl
        def register_samplers(self, register: Any) -> None:
            register("ban", ban)  # create() called ban(params): a TypeError about a missing 'ctx'

    with pytest.raises(
        dk.PluginError,
        match=r"sampler 'ban' from Direct: ban\(logits.*, ctx.*\) .*is called as impl\(params\) .*"
        r"allowed: a ProcessorBase or SelectorBase subclass, or a function returning one",
    ):
        dk.register_plugin(Direct())
    assert "ban" not in dk.get_registry().samplers


def test_a_sampler_function_returning_a_plain_function_is_refused_at_create() -> None:
    """A factory that returns a processor function, not a stage: before, dk.create returned it, and Chain.parse or
    dk.generate(chain="ban") failed with "AttributeError: 'function' object has no attribute 'name'"."""

    def ban(logits: object, ctx: object) -> object:
        return logits

    class Factory:
        @dk.hookimpl
        def register_samplers(self, register: Any) -> None:
            register("ban", lambda params: ban)

    plugin = Factory()
    dk.register_plugin(plugin)
    try:
        said = (
            r"^sampler 'ban' from Factory: impl\(params\) returned the function ban, not a stage; allowed: a "
            r"ProcessorBase or SelectorBase instance \(a processor function goes in a dk.Chain as it is, "
            r"unregistered\)$"
        )
        for make in (lambda: dk.create("ban"), lambda: dk.Chain.parse("ban | sample")):
            with pytest.raises(dk.PluginError, match=said):
                make()
    finally:
        dk.unregister_plugin(plugin)


def test_a_second_plugin_object_of_the_same_name_is_refused_saying_so() -> None:
    """A notebook cell that defines and registers a plugin, run twice: before, pluggy's "ValueError: Plugin name
    already registered: Twice:register_plugin=<...>" followed by the repr of every loaded plugin."""
    Twice = registering_mine("twice")  # labelled by its class's name, "Plugin"
    first = Twice()
    dk.register_plugin(first)
    try:
        with pytest.raises(dk.PluginError) as refused:
            dk.register_plugin(Twice())
        assert str(refused.value) == (
            "plugin 'Plugin' is already registered from code, by another object; allowed: a name of its own, "
            "dk.register_plugin(plugin, name=...), or dk.unregister_plugin('Plugin') first"
        )
        dk.register_plugin(first)  # the same object again: nothing to do
        dk.unregister_plugin("Plugin")  # by its name: the cell run again holds only the second object
        assert "twice" not in dk.get_registry().samplers
        dk.register_plugin(Twice())
        assert "twice" in dk.get_registry().samplers
    finally:
        dk.unregister_plugin("Plugin")


def test_unregistering_a_name_never_registered_names_those_that_are() -> None:
    with pytest.raises(dk.PluginError) as refused:
        dk.unregister_plugin("Nowhere")
    assert str(refused.value).startswith("dk.unregister_plugin: no plugin 'Nowhere' registered from code; allowed: ")


def test_a_plugin_class_registered_in_place_of_an_object_says_to_make_one() -> None:
    """`dk.register_plugin(P)` for `dk.register_plugin(P())`: before, "TypeError: P.register_samplers() missing 1
    required positional argument: 'register'" (the object was missing, not the register)."""
    from decodekit.stage import ProcessorBase

    class P:
        @dk.hookimpl
        def register_samplers(self, register: Any) -> None:
            register("mine", ProcessorBase)

    with pytest.raises(dk.PluginError) as refused:
        dk.register_plugin(P)
    assert str(refused.value) == "plugin 'P' is a class, whose hooks need an object; allowed: dk.register_plugin(P())"
    assert "P" not in dk.get_registry().plugins


def test_an_object_with_no_hooks_is_refused_not_registered_in_silence() -> None:
    """`dk.register_plugin(ban)`, the processor function itself: before, nothing was registered and nothing said."""

    def ban(logits: object, ctx: object) -> object:
        return logits

    with pytest.raises(dk.PluginError) as refused:
        dk.register_plugin(ban)
    assert str(refused.value) == (
        "plugin 'ban' has no hook, so it registers nothing; allowed: a module or object with @decodekit.hookimpl "
        "functions named register_samplers, register_cache_backends, register_models or register_strategies "
        "(a processor function goes in a dk.Chain as it is, unregistered)"
    )
    assert "ban" not in dk.get_registry().plugins


class Mine(ProcessorBase[dk.NoParams]):
    def __call__(self, logits: Any, ctx: Any) -> Any:
        return logits


def registering_mine(name: str) -> type:
    """A plugin class whose objects register `Mine` as the sampler `name`."""

    class Plugin:
        @dk.hookimpl
        def register_samplers(self, register: Any) -> None:
            register(name, Mine)

    return Plugin


def test_an_in_code_plugin_taking_a_name_says_it_is_not_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    Plugin = registering_mine("top_k")
    # it said the name was "unusable until one is chosen", but top_k went on working
    with pytest.raises(
        dk.PluginError,
        match=r"^sampler name 'top_k' is registered by 2 distributions: decodekit-top-k and mine; mine is not kept, "
        r"so the name stays decodekit-top-k's \(use another name, or DECODEKIT_DISABLE_PLUGINS=decodekit-top-k to take "
        r"it\)$",
    ):
        dk.register_plugin(Plugin(), name="mine")
    assert dk.create("top_k", k=2).__class__.__name__ == "TopK"
    monkeypatch.setenv("DECODEKIT_DISABLE_PLUGINS", "decodekit-top-k")
    plugin = Plugin()
    dk.register_plugin(plugin, name="mine")  # the advice works
    try:
        assert isinstance(dk.create("top_k"), Mine)
    finally:
        dk.unregister_plugin(plugin)
        monkeypatch.delenv("DECODEKIT_DISABLE_PLUGINS")
        dk.reload_plugins()


@pytest.mark.slow
def test_broken_distribution_installed_with_pip(tmp_path: Path) -> None:
    """A real, pip-installed broken plugin in a separate target directory; a fresh interpreter reports it."""
    src = tmp_path / "src"
    for path, text in files_for("sampler", "broken").items():  # what `decodekit new-plugin broken` writes
        (src / path).parent.mkdir(parents=True, exist_ok=True)
        (src / path).write_text(text)
    (src / "src" / "decodekit_broken" / "plugin.py").write_text("import a_module_that_does_not_exist\n")
    target = tmp_path / "target"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(target),
            str(src),
        ],
        check=True,
        capture_output=True,
    )
    probe = (
        "import json, warnings, decodekit as dk\n"
        "warnings.simplefilter('ignore')\n"
        "r = dk.get_registry()\n"
        "print(json.dumps({'failures': [[f.distribution, f.version, f.error] for f in r.failures],"
        " 'samplers': sorted(r.samplers)}))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(target)}
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    report = json.loads(out.stdout)
    assert report["failures"] == [
        ["decodekit-broken", "0.1.0", "ModuleNotFoundError: No module named 'a_module_that_does_not_exist'"]
    ]
    assert "sample" in report["samplers"]
    strict = subprocess.run(
        [sys.executable, "-c", probe], env={**env, "DECODEKIT_STRICT_PLUGINS": "1"}, capture_output=True, text=True
    )
    assert strict.returncode != 0 and "decodekit-broken 0.1.0" in strict.stderr


_BASE_EXCEPTIONS = {
    "import SystemExit": "raise SystemExit(3)\n",
    "hook SystemExit": """
        import decodekit as dk

        @dk.hookimpl
        def register_samplers(register):
            raise SystemExit("bye")
    """,
    "registration GeneratorExit": """
        import decodekit as dk

        class Loud:
            def __call__(self, logits, ctx):
                return logits

            @property
            def params_model(self):
                raise GeneratorExit("from a property the registration reads")

        @dk.hookimpl
        def register_samplers(register):
            register("loud", Loud())
    """,
}


@pytest.mark.parametrize("case", list(_BASE_EXCEPTIONS))
def test_a_plugin_raising_a_base_exception_leaves_everything_else_working(site: Path, case: str) -> None:
    """SystemExit from a plugin made every command exit silently (KeyboardInterrupt goes through: Ctrl-C is the
    user's, `test_ctrl_c_while_plugins_load_interrupts_the_caller`)."""
    fake_distribution(site, "fake-exits", "fake_exits", _BASE_EXCEPTIONS[case])
    fake_distribution(site, "fake-good", "fake_good", REGISTERS_SAMPLER.format(name="fake_shift"))
    with pytest.warns(RuntimeWarning, match="fake-exits"):
        registry = dk.reload_plugins()
    [failure] = [f for f in registry.failures if f.distribution == "fake-exits"]
    assert failure.error.split(":")[0] in ("SystemExit", "GeneratorExit")
    assert "fake_shift" in registry.samplers and "dense" in registry.caches
    listed = run_cli(["plugins"], fresh_plugins=True)  # a command, as a new process runs it
    assert listed.returncode == 0 and "fake-exits" in listed.stdout + listed.stderr, listed.stderr
    env = {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    imported = subprocess.run([sys.executable, "-c", "import decodekit"], env=env, capture_output=True, timeout=60)
    assert imported.returncode == 0


def test_the_default_cache_not_installed_says_what_to_install_or_to_ask_for_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before: "unknown cache backend 'dense'; installed: ...; also accepted: none", naming a cache the caller never
    asked for and not what to install."""
    from decodekit.testing.tiny_lm import TinyLM

    uninstall(monkeypatch, "decodekit-cache-dense")
    model = TinyLM(64)
    with pytest.raises(dk.UnknownNameError) as err:
        dk.generate(model, [[1, 2]], max_new_tokens=2, seed=0)
    message = str(err.value)
    assert "the default cache backend 'dense'" in message and "pip install decodekit-cache-dense" in message
    assert "cache='none'" in message
    none = dk.generate(model, [[1, 2]], max_new_tokens=2, seed=0, cache="none")  # as the error says
    assert len(none.tokens[0]) == 2


def test_the_default_cache_disabled_says_how_to_enable_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Installed but switched off: the variable to change, not a pip install that would change nothing."""
    from decodekit.testing.tiny_lm import TinyLM

    monkeypatch.setenv("DECODEKIT_DISABLE_PLUGINS", "decodekit-cache-dense")
    monkeypatch.setattr(decodekit.plugins, "_registry", None)
    with pytest.raises(dk.UnknownNameError) as err:
        dk.generate(TinyLM(64), [[1, 2]], max_new_tokens=2, seed=0)
    message = str(err.value)
    assert "the default cache backend 'dense' is disabled" in message and "pip install" not in message
    assert "remove it from DECODEKIT_DISABLE_PLUGINS to enable it" in message and "cache='none'" in message


def test_an_in_code_plugin_taking_a_name_another_in_code_plugin_has_is_told_to_unregister_that_one() -> None:
    """Two plugins registered from code (a notebook's cells) registering one sampler name: the second's refusal said
    DECODEKIT_DISABLE_PLUGINS=first, an environment variable for what `dk.unregister_plugin('first')` undoes."""
    Plugin = registering_mine("shift_mine")
    first, second = Plugin(), Plugin()
    dk.register_plugin(first, name="first")
    try:
        with pytest.raises(dk.PluginError) as err:
            dk.register_plugin(second, name="second")
        assert str(err.value) == (
            "sampler name 'shift_mine' is registered by 2 distributions: first and second; second is not kept, so the "
            "name stays first's (use another name, or dk.unregister_plugin('first') to take it)"
        )
        dk.unregister_plugin("first")  # the advice works
        dk.register_plugin(second, name="second")
        assert dk.get_registry().samplers["shift_mine"].distribution == "second"
    finally:
        for name in ("first", "second"):
            if name in [n for _, n in dk.plugins._code_plugins]:
                dk.unregister_plugin(name)


def test_a_cache_backend_that_cannot_take_its_parameters_says_what_impl_is() -> None:
    """A cache class whose `__init__` takes the spec alone: before, every use raised `TypeError: OnlySpec.__init__()
    takes 2 positional arguments but 3 were given`, a traceback on the command line."""

    class OnlySpec(dk.PreallocatedKVCache):
        def __init__(self, spec: dk.CacheSpec) -> None:
            super().__init__(spec)

    class Direct:
        @dk.hookimpl
        def register_cache_backends(self, register: Any) -> None:
            register("only_spec", OnlySpec)

    with pytest.raises(dk.PluginError) as refused:
        dk.register_plugin(Direct())
    assert str(refused.value).endswith(
        "cache backend 'only_spec' from Direct: OnlySpec(spec: 'dk.CacheSpec') -> 'None' is called as impl(spec, "
        "params) and returns the cache; allowed: a class or function taking (spec, params=None)"
    )
    assert "only_spec" not in dk.get_registry().caches


def _load(params: dk.Params) -> None:  # a model loader without the argument
    """Never called."""


def _policy(decoding: dk.Decoding) -> None:  # a strategy without its parameters
    """Never called."""


@pytest.mark.parametrize(
    ("hook", "impl", "says"),
    [
        (
            "register_models",
            _load,
            "model 'short' from Direct: _load(params: 'dk.Params') -> 'None' is called as "
            "impl(argument, params) and returns the model; allowed: a function taking (argument, params)",
        ),
        (
            "register_strategies",
            _policy,
            "strategy 'short' from Direct: _policy(decoding: 'dk.Decoding') -> 'None' is "
            "called as policy(decoding, params); allowed: a function taking (decoding, params)",
        ),
    ],
)
def test_a_model_or_strategy_that_cannot_take_its_call_says_what_impl_is(hook: str, impl: object, says: str) -> None:
    """As a cache backend's: before, dk.load_model or dk.decode raised `TypeError: _load() takes 1 positional argument
    but 2 were given` from inside decodekit, a traceback in Python and an "unexpected TypeError" on the command line."""

    class Direct:
        pass

    setattr(Direct, hook, dk.hookimpl(specname=hook)(lambda self, register: register("short", impl)))
    with pytest.raises(dk.PluginError) as refused:
        dk.register_plugin(Direct())
    assert str(refused.value).endswith(says)
    assert "short" not in dk.get_registry().models and "short" not in dk.get_registry().strategies
