"""A refusal says what is allowed in the words the user wrote: JSON's null, true, false and objects on the command
line (JSON lines, JSON chain specs, chain strings), Python's None, True, False and dicts in Python; types as a user
writes values ("a list of 2 integers"), not Python's (`tuple[int, int]`); an integer as an integer (2.0 is not one);
and a standard plugin that is not installed, with the `pip install` that installs it, in Python as on the command
line."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import cli_testplugin
import pytest
from cli_runner import run_cli
from pydantic import Field
from uninstalled import uninstall

import decodekit as dk
import decodekit.plugins
from decodekit.param_types import json_words, type_text
from decodekit.params import validate_params

FLAGS = ["-m", cli_testplugin.MODEL_NAME, "--max-new-tokens", "4", "--seed", "3"]
PYTHON_WORDS = ("None", "True", "False", "dict", "tuple[", "list[", "int ", "float ")


def _cli(*args: str, **env: str) -> Any:
    environment = dict(os.environ, DECODEKIT_EXTRA_PLUGINS="cli_testplugin", **env)
    environment.pop("DECODEKIT_LOAD_PLUGINS", None)
    return run_cli(list(args), environment, fresh_plugins=True)


def _line_error(tmp_path: Path, line: dict[str, Any]) -> str:
    """The message of the error record `--on-error skip` writes for `line`."""
    source, output = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    source.write_text(json.dumps(line) + "\n")
    result = _cli("generate", *FLAGS, "--input", str(source), "--output", str(output), "--on-error", "skip")
    assert result.returncode == 0, result.stderr
    [record] = [json.loads(r) for r in output.read_text().splitlines()]
    return str(record["error"]["message"])


@pytest.mark.parametrize(
    ("field", "said"),
    [
        # "allowed: None or an integer, 0 <= logprobs <= 96": a JSON line writes null
        ({"logprobs": 1000}, "logprobs=1000 is invalid; allowed: an integer 0 <= logprobs <= 96, or null"),
        # "k=None ... allowed: int 1 <= k"
        (
            {"chain": [{"name": "top_k", "params": {"k": None}}]},
            "top_k: k=null is invalid: Input should be a valid integer; allowed: an integer 1 <= k",
        ),
        # "Input should be a valid dictionary; allowed: dict[int in [0, 2**63), float in [-100, 100]]"
        (
            {"chain": [{"name": "logit_bias", "params": {"bias": [1]}}]},
            "logit_bias: bias=[1] is invalid: Input should be an object; allowed: an object mapping integers in "
            "[0, 2**63) to numbers in [-100, 100]",
        ),
        # "include_prompt=None ... a valid boolean; allowed: bool"
        (
            {"chain": "frequency_penalty(0.5, include_prompt=None)"},
            "include_prompt=null is invalid: Input should be true or false; allowed: true or false",
        ),
        # "n=True": the line wrote true
        ({"n": True}, "n=true is invalid: Input should be a number, not a bool or a string"),
        # "biases.0.0=1 ...; allowed: biases: list[tuple[list[int in [0, 2**63)], float in [-10000, 10000]]]"
        (
            {"chain": [{"name": "sequence_bias", "params": {"biases": [[1, 2]]}}]},
            "allowed: biases: a list of pairs [a non-empty list of integers in [0, 2**63), a number in "
            "[-10000, 10000]], non-empty",
        ),
    ],
)
def test_a_json_lines_error_record_says_what_json_writes(tmp_path: Path, field: dict[str, Any], said: str) -> None:
    message = _line_error(tmp_path, {"prompt": "ROMEO"} | field)
    assert said in message
    assert not any(word in message for word in PYTHON_WORDS), message


def test_python_keeps_pythons_words() -> None:
    """dk.create and dk.generate are called with None, True and dicts: their refusals say so."""
    with pytest.raises(dk.ParameterError) as info:
        dk.create("repetition_penalty", 1.1, last_n=0)
    assert str(info.value).endswith("; allowed: an integer 1 <= last_n, or None")
    with pytest.raises(dk.ParameterError) as info:
        dk.create("logit_bias", bias=[1])
    assert str(info.value).endswith(
        "Input should be a valid dictionary; allowed: a dict mapping integers in [0, 2**63) to numbers in [-100, 100]"
    )
    with json_words(), pytest.raises(dk.ParameterError, match=r"last_n=0 is invalid.*, or null$"):
        dk.create("repetition_penalty", 1.1, last_n=0)  # the command line's words, in its block only
    with pytest.raises(dk.ParameterError, match=r"include_prompt=None is invalid.*; allowed: True or False$"):
        dk.create("frequency_penalty", 0.5, include_prompt=None)


TokenId = Annotated[int, Field(ge=0)]


@pytest.mark.parametrize(
    ("annotation", "python", "json_text"),
    [
        (tuple[int, int], "a list of 2 integers", "a list of 2 integers"),  # was "tuple[int, int]"
        (dict[str, Any], "a dict", "an object"),  # was "dict[str, Any]"
        (int | None, "an integer or None", "an integer or null"),
        (
            tuple[Annotated[tuple[TokenId, ...], Field(min_length=1)], ...],
            "a list of non-empty lists of integers ≥ 0",
            None,
        ),
        (list[Annotated[float, Field(gt=0, allow_inf_nan=False)]], "a list of finite numbers > 0", None),
        (tuple[tuple[TokenId, ...], float], "a pair [a list of integers ≥ 0, a number]", None),
        (bool | None, "True, False or None", "true, false or null"),
    ],
)
def test_types_read_as_what_a_user_writes(annotation: object, python: str, json_text: str | None) -> None:
    assert type_text(annotation) == python
    with json_words():
        assert type_text(annotation) == (json_text or python)


def test_samplers_shows_the_same_words_as_the_errors() -> None:
    result = _cli("samplers", "--json", "sequence_bias", "bad_words")
    assert result.returncode == 0, result.stderr
    params = {p["name"]: p for s in json.loads(result.stdout)["samplers"] for p in s["params"]}
    # the inner sequences' min_length=1 was left out: "list[list[int in [0, 2**63)]]"
    assert params["sequences"]["type"] == "a list of non-empty lists of integers in [0, 2**63)"
    assert params["biases"]["allowed"] == (
        "a list of pairs [a non-empty list of integers in [0, 2**63), a number in [-10000, 10000]], non-empty"
    )
    text = _cli("samplers", "repetition_penalty").stdout  # was "last_n  int | None  1 ≤ last_n  default None"
    assert "    last_n  an integer or null  1 ≤ last_n  default null\n" in text
    assert "    include_prompt  true or false  default true\n" in text


GENERATE, EXPLAIN, CALIBRATE = ("generate", "ROMEO"), ("explain", "ROMEO"), ("cache", "calibrate")
INTEGER_FLAGS = {  # each integer option: a command it belongs to, and the bound its refusal names
    "--max-new-tokens": (GENERATE, " >= 0"),
    "-n": (GENERATE, " >= 1"),
    "--logprobs": (GENERATE, " >= 0"),
    "--prompt-logprobs": (GENERATE, " >= 0"),
    "--threads": (GENERATE, " >= 1"),
    "--batch-size": (GENERATE, " >= 1"),
    "--ray-actors": (GENERATE, " >= 1"),
    "--top-k": (GENERATE, ""),
    "--seed": (GENERATE, ", 0 <= seed < 2**64; leave --seed out for a fresh seed each run (llama.cpp's -1)"),
    "--steps": (EXPLAIN, " >= 1"),
    "--top": (EXPLAIN, " >= 1"),
    "--plot-step": (EXPLAIN, " >= 0"),
    "--sinks": (CALIBRATE, ""),
    "--windows": (CALIBRATE, ""),
}


@pytest.mark.parametrize("value", ["2.0", "1e3"])
@pytest.mark.parametrize("flag", INTEGER_FLAGS)
def test_an_integer_flag_takes_an_integer(flag: str, value: str) -> None:
    """`--max-new-tokens 2.0` generated 2 tokens (typer's pydantic reads "2.0" as 2)."""
    command, bound = INTEGER_FLAGS[flag]
    result = _cli(*command, *FLAGS[:2], flag, value)
    assert result.returncode == 2
    assert f"'{flag}'" in result.stderr and f"'{value}': allowed: an integer{bound} (see" in result.stderr


@pytest.mark.parametrize("seed", ["-1", str(2**64)])
def test_a_seed_outside_dk_generates_range_is_refused(seed: str) -> None:
    """`--seed -1` (llama.cpp's "a random seed") and `--seed 2**64` ran, each as one fixed seed, where dk.generate and a
    batch line's "seed" refuse them."""
    for command in (GENERATE, EXPLAIN):
        result = _cli(*command, *FLAGS[:2], "--seed", seed)
        assert result.returncode == 2
        assert f"'--seed' / '-s': '{seed}': allowed: an integer, 0 <= seed < 2**64; leave --seed out" in result.stderr
    assert _cli(*GENERATE, *FLAGS[:2], "--seed", str(2**64 - 1)).returncode == 0


def test_an_integer_flag_still_takes_integers_and_its_bound() -> None:
    assert _cli("generate", "ROMEO", *FLAGS[:2], "--max-new-tokens", "+2", "--seed", "-0").returncode == 0
    below = _cli("explain", "ROMEO", *FLAGS[:2], "--steps", "0")
    assert below.returncode == 2 and "'--steps': '0': allowed: an integer >= 1" in below.stderr


def test_an_integer_parameter_takes_no_float() -> None:
    """`top_k(k=2.0)`, dk.create("top_k", k=2.0) and a JSON line's "max_new_tokens": 2.0 were read as 2: pydantic's lax
    reading. An integer parameter takes an integer, wherever it is written (one rule: JSON's 2.0 too)."""
    said = "k=2.0 is invalid: Input should be an integer (no decimal point or exponent); allowed: an integer 1 <= k"
    for run in (lambda: dk.create("top_k", k=2.0), lambda: dk.Chain.parse("top_k(k=2.0)")):
        with pytest.raises(dk.ParameterError, match=re.escape(said)):
            run()
    with pytest.raises(dk.ParameterError, match=r"sequences\.0\.1=1\.0 is invalid: Input should be an integer"):
        dk.create("bad_words", sequences=[[1, 1.0]])
    result = _cli("generate", "ROMEO", *FLAGS, "--chain", "top_k(k=2.0)")
    assert result.returncode == 2 and said in result.stderr
    assert dk.create("top_p", p=1).params.p == 1  # a float parameter still takes an integer


def test_a_json_lines_integer_field_takes_no_float(tmp_path: Path) -> None:
    message = _line_error(tmp_path, {"prompt": "ROMEO", "max_new_tokens": 2.0})
    assert "max_new_tokens=2.0 is invalid: Input should be an integer" in message


def test_a_standard_sampler_that_is_not_installed_says_how_to_install_it_in_python(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """dk.generate(model, "x", chain="top_p(p=0.9)") without decodekit-top-p said "unknown sampler 'top_p'; ...; did
    you mean 'top_k'?"; the command line said `pip install decodekit-top-p`. Then Python's folder was relative ("in
    its folder: pip install plugins/decodekit-top-p"), the command line's the checkout's own."""
    model = cli_testplugin.load_model()
    uninstall(monkeypatch, "decodekit-top-p")
    with pytest.raises(dk.UnknownNameError) as info:
        dk.generate(model, "ROMEO", chain="top_p(p=0.9)", max_new_tokens=2)
    message = str(info.value)
    assert "sampler 'top_p' is not installed;" in message and "did you mean" not in message
    root = Path(__file__).resolve().parents[1]  # the checkout decodekit was installed from (`make install-dev`)
    hint = f"pip install decodekit-top-p (from a checkout: pip install {root}/plugins/decodekit-top-p)"  # as the CLI
    assert f"decodekit-top-p registers it: {hint}" in message


def test_a_standard_sampler_that_is_disabled_says_how_to_enable_it_in_python_and_on_the_command_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Disabled by DECODEKIT_DISABLE_PLUGINS, decodekit-top-p was "not installed", with a pip install of what is
    installed."""
    model = cli_testplugin.load_model()
    monkeypatch.setenv("DECODEKIT_DISABLE_PLUGINS", "decodekit-top-p")  # installed, but not in the registry
    monkeypatch.setattr(decodekit.plugins, "_registry", None)  # rebuilt from the variable on first use
    with pytest.raises(dk.UnknownNameError) as info:
        dk.generate(model, "ROMEO", chain="top_p(p=0.9)", max_new_tokens=2)
    words = "DECODEKIT_DISABLE_PLUGINS lists decodekit-top-p; remove it from DECODEKIT_DISABLE_PLUGINS to enable it"
    assert str(info.value) == f"sampler 'top_p' is installed but disabled: {words}"
    result = _cli("generate", "ROMEO", *FLAGS, "--top-p", "0.9", DECODEKIT_DISABLE_PLUGINS="decodekit-top-p")
    assert result.returncode == 2 and result.stderr == (
        f"decodekit: error: installed but disabled: the chain 'top_p(p=0.9)' needs top_p. {words}; or give a "
        "--chain of installed samplers\n"
    )


def test_validate_params_names_a_json_value_in_json() -> None:
    class P(dk.Params):
        flags: tuple[bool, ...] = ()

    with json_words(), pytest.raises(dk.ParameterError, match=r"flags\.1=null is invalid"):
        validate_params("p", P, {"flags": [True, None]})


def test_a_json_chain_specs_refusal_is_in_json() -> None:
    """`--chain '[{"name": "top_k", "x": true}]'` said "stage 0 is {'name': 'top_k', 'x': True}; allowed: {'name': str,
    'params': {...}}": Python's dict, True and str for what the user wrote as JSON."""
    result = _cli("generate", "ROMEO", *FLAGS, "--chain", '[{"name": "top_k", "x": true}]')
    assert result.returncode == 2
    assert (
        "stage 0 is {'name': 'top_k', 'x': true}; allowed: {\"name\": a string, \"params\": an object}" in result.stderr
    )
    with pytest.raises(dk.ChainSpecError, match=re.escape("name is None; allowed: a string ({'name': str, 'params'")):
        dk.Chain.from_spec([{"name": None}])  # Python's words in Python


def test_a_disabled_standard_name_says_so_first_in_every_place_it_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--strategy beam` and `--cache window` of a disabled plugin said "unknown strategy" and "unknown cache
    backend" before "installed but disabled": one sentence now, the registry's, in Python and on the command line
    (generate, explain, samplers, a batch job's up-front check and its lines), with the option and what is allowed."""
    monkeypatch.setenv("DECODEKIT_DISABLE_PLUGINS", "decodekit-beam,decodekit-cache-window,decodekit-top-k")
    monkeypatch.setattr(decodekit.plugins, "_registry", None)  # rebuilt from the variable on first use

    def disabled(what: str, dist: str) -> str:
        return (
            f"{what} is installed but disabled: DECODEKIT_DISABLE_PLUGINS lists {dist}; remove it from "
            "DECODEKIT_DISABLE_PLUGINS to enable it"
        )

    beam, window = (
        disabled("strategy 'beam'", "decodekit-beam"),
        disabled("cache backend 'window'", "decodekit-cache-window"),
    )
    top_k = disabled("sampler 'top_k'", "decodekit-top-k")
    model = cli_testplugin.load_model()
    python: list[tuple[str, Callable[[], object]]] = [
        (beam, lambda: dk.decode(model, "ROMEO", strategy="beam", max_new_tokens=2)),
        (window, lambda: dk.generate(model, "ROMEO", cache="window", max_new_tokens=2)),
        (top_k, lambda: dk.generate(model, "ROMEO", chain="top_k(5) | sample", max_new_tokens=2)),
        (beam, lambda: decodekit.plugins.get_registry().lookup("strategy", "beam")),
    ]
    for said, use in python:
        with pytest.raises(dk.UnknownNameError) as info:
            use()
        assert str(info.value) == said
    strategies = ", ".join(sorted(decodekit.plugins.get_registry().strategies))
    caches = ", ".join(["none", *sorted(decodekit.plugins.get_registry().caches)])
    source = tmp_path / "in.jsonl"
    source.write_text('{"prompt": "ROMEO"}\n')
    batch = ["--input", str(source), "--output", str(tmp_path / "out.jsonl")]
    commands = [
        (f"--strategy 'beam': {beam}; allowed: {strategies}", ["generate", "ROMEO", *FLAGS, "--strategy", "beam"]),
        (f"--strategy 'beam': {beam}; allowed: {strategies}", ["generate", *FLAGS, *batch, "--strategy", "beam"]),
        (
            f"--cache 'window': {window}; allowed: {caches}",
            ["generate", "ROMEO", *FLAGS, "--cache", "window"],
        ),
        (f"--cache 'window': {window}; allowed: {caches}", ["generate", *FLAGS, *batch, "--cache", "window"]),
        (
            f"--cache 'window': {window}; allowed: {caches}",
            ["explain", "ROMEO", *FLAGS[:2], "--cache", "window"],
        ),
        (disabled("'beam'", "decodekit-beam"), ["samplers", "beam"]),
    ]
    for said, args in commands:
        result = _cli(*args)
        assert (result.returncode, result.stderr) == (2, f"decodekit: error: {said}\n"), args
    assert _line_error(tmp_path, {"prompt": "ROMEO", "chain": "top_k(5) | sample"}) == top_k


def test_a_batch_line_chain_is_parsed_again_by_another_registry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch job kept the chains it parsed for the rest of the process, whatever registry parsed them: a line's
    `top_k` decoded after `decodekit-top-k` was disabled (CI met it when a test before this one had parsed that
    chain in the same worker)."""
    chain = {"prompt": "ROMEO", "chain": "top_k(5) | sample"}
    source, output = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    source.write_text(json.dumps(chain) + "\n")
    assert _cli("generate", *FLAGS, "--input", str(source), "--output", str(output)).returncode == 0
    assert "error" not in json.loads(output.read_text())
    output.unlink()
    (tmp_path / "out.jsonl.settings.json").unlink(missing_ok=True)
    monkeypatch.setenv("DECODEKIT_DISABLE_PLUGINS", "decodekit-top-k")
    assert _line_error(tmp_path, chain).startswith("sampler 'top_k' is installed but disabled")


def _broken_standard_plugin(site: Path, dist: str, entry_point: str, target: str, module: str | None = None) -> None:
    """Install `dist` into `site` (ahead of the real one on sys.path) with one entry point `target`; `module`: the
    source of a module `broken_<entry_point>` (None: the target names a module that does not exist)."""
    info = site / f"{dist.replace('-', '_')}-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text(f"[decodekit]\n{entry_point} = {target}\n")
    if module is not None:
        (site / f"broken_{entry_point}.py").write_text(module)


def test_a_standard_plugin_installed_that_fails_to_load_says_so_with_its_error_not_pip_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A standard plugin installed and enabled whose module raised ImportError (a missing dependency), or whose entry
    point named no module, was "not installed", with a `pip install` of what is installed: in Python, for
    `--strategy`, for a chain's sampler, `decodekit samplers` and the default cache."""
    _broken_standard_plugin(tmp_path, "decodekit-beam", "beam", "broken_beam", "import words2_missing_dependency\n")
    _broken_standard_plugin(tmp_path, "decodekit-top-p", "top_p", "words2_no_such_module:plugin")
    _broken_standard_plugin(
        tmp_path, "decodekit-cache-dense", "cache_dense", "broken_cache_dense", "raise ImportError('no dense')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))  # these distributions are found first: the real ones are hidden
    monkeypatch.setattr(decodekit.plugins, "_registry", None)
    monkeypatch.delenv("DECODEKIT_DISABLE_PLUGINS", raising=False)
    monkeypatch.delenv("DECODEKIT_LOAD_PLUGINS", raising=False)
    failed = "plugin {} 0.1.0 (entry point '{}') failed to load: {}"  # the registry's warning, word for word
    beam = failed.format("decodekit-beam", "beam", "ModuleNotFoundError: No module named 'words2_missing_dependency'")
    top_p = failed.format("decodekit-top-p", "top_p", "ModuleNotFoundError: No module named 'words2_no_such_module'")
    dense = failed.format("decodekit-cache-dense", "cache_dense", "ImportError: no dense")
    model = cli_testplugin.load_model()
    with pytest.warns(RuntimeWarning) as caught:
        decodekit.plugins.get_registry()
    assert sorted(str(w.message) for w in caught) == [f"decodekit: {said}" for said in (beam, dense, top_p)]
    python: list[tuple[str, Callable[[], object]]] = [
        (
            f"strategy 'beam' is installed, but {beam}",
            lambda: dk.decode(model, "ROMEO", strategy="beam", max_new_tokens=2),
        ),
        (f"sampler 'top_p' is installed, but {top_p}", lambda: dk.create("top_p", 0.9)),
        (
            f"cache backend 'dense' is installed, but {dense}",
            lambda: dk.create_cache("dense", dk.CacheSpec(1, 1, 1, 1, 1, 1)),
        ),
    ]
    for said, use in python:
        with pytest.raises(dk.UnknownNameError) as info:
            use()
        assert str(info.value) == said
    with pytest.raises(dk.UnknownNameError) as info:  # no cache given: the default's words
        dk.generate(model, "ROMEO", max_new_tokens=2)
    assert str(info.value).startswith(
        f"no cache given, and the default cache backend 'dense' is installed, but {dense}; allowed: another backend ("
    ), str(info.value)
    assert "pip install" not in str(info.value) and str(info.value).endswith(
        "or cache='none' to recompute the whole context every step (slower)"
    )
    strategies = ", ".join(sorted(decodekit.plugins.get_registry().strategies))
    commands = [
        (
            f"--strategy 'beam': strategy 'beam' is installed, but {beam}; allowed: {strategies}",
            ["--strategy", "beam", "--cache", "none"],
        ),
        (
            f"installed but failed to load: the chain 'top_p(p=0.9)' needs top_p. {top_p}; "
            "or give a --chain of installed samplers",
            ["--top-p", "0.9", "--cache", "none"],
        ),
    ]
    for said, args in commands:
        result = _cli("generate", "ROMEO", *FLAGS, *args)
        assert result.returncode == 2 and result.stderr.splitlines()[-1] == f"decodekit: error: {said}", args
        assert "pip install" not in result.stderr and "not installed" not in result.stderr
    result = _cli("samplers", "top_p")
    assert (
        result.returncode == 2
        and result.stderr.splitlines()[-1] == f"decodekit: error: 'top_p' is installed, but {top_p}"
    )
    result = _cli("generate", "ROMEO", *FLAGS, "--chain", "sample")  # runs without a cache, and says why
    assert (
        result.returncode == 0
        and (
            "decodekit: warning: no --cache given, and the default, dense, is installed but failed to load: running "
            f"without a cache (as --cache none: the same tokens, many times slower); {dense}"
        )
        in result.stderr.splitlines()
    )
