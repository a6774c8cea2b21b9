"""The `decodekit` command line: its commands, outputs, errors and exit statuses.

`cli` and `cli_many` run commands in this process as a new process would (`cli_runner.run_cli`:
its environment, stdin, stdout and stderr, the registry built from that environment); a new
process costs seconds each. What only a process shows runs in one (`_popen`, `python -m
decodekit_cli`): Ctrl-C and its exit status, and what listing plugins imports in a fresh
interpreter. The model is `cli-test-gpt` from `tests/cli_testplugin.py`, loaded with
`DECODEKIT_EXTRA_PLUGINS`; `tiny-shakespeare` is exercised too when it is installed with weights.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch

import decodekit as dk
from decodekit.chain import stage_label
from decodekit.context import DecodeContext, row_seeds
from decodekit.param_types import json_words, shown

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))
import cli_testplugin  # noqa: E402
from cli_runner import OWN_MODEL, main_with_model, run_cli  # noqa: E402
from uninstalled import uninstall  # noqa: E402

MODEL = cli_testplugin.MODEL_NAME
PROMPT = "ROMEO: "
CHAIN = "repetition_penalty(1.3) | temperature(0.7) | top_k(12) | top_p(0.8)"


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), *filter(None, [env.get("PYTHONPATH")])])
    env["DECODEKIT_EXTRA_PLUGINS"] = "cli_testplugin"
    env["COLUMNS"] = "400"  # rich wraps tables at the terminal width; keep lines whole
    env.pop("DECODEKIT_LOAD_PLUGINS", None)
    env.update(extra)
    return env


def _popen(args: Sequence[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "decodekit_cli", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        # A shell without job control starts background jobs with SIGINT ignored, and children
        # inherit that; restore it so Ctrl-C tests see Python's KeyboardInterrupt.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def cli_many(*commands: Sequence[str], **env: str) -> list[subprocess.CompletedProcess[str]]:
    """Run several `decodekit` commands (in this process, one after another); their results, in order."""
    return [run_cli(args, _env(**env)) for args in commands]


def cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return cli_many(args, **env)[0]


def ok_json(result: subprocess.CompletedProcess[str]) -> Any:
    assert result.returncode == 0, (result.args, result.stderr)
    assert "Traceback" not in result.stderr
    return json.loads(result.stdout)


def generate_args(*extra: str, model: str | None = MODEL) -> list[str]:
    return ["generate", PROMPT, *(["--model", model] if model else []), "--json", *extra]


# -- generate ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cache_runs() -> dict[str, Any]:
    """`generate --json` with each cache backend; same seed, flat flags, two samples."""
    caches = ("none", "dense", "gqa")
    args = ("--temperature", "0.9", "--top-k", "20", "--seed", "5", "-n", "2", "--max-new-tokens", "12")
    results = cli_many(*(generate_args("--cache", c, *args) for c in caches))
    return {c: ok_json(r) for c, r in zip(caches, results)}


@pytest.mark.parametrize("cache", ["none", "dense", "gqa"])
def test_generate_json_shape_with_each_cache(cache_runs: dict[str, Any], cache: str) -> None:
    doc = cache_runs[cache]
    assert doc["model"] == MODEL and doc["prompt"] == PROMPT and doc["cache"] == cache
    assert doc["chain"] == "temperature(value=0.9) | top_k(k=20) | sample"  # the flags, in HF's order
    assert [s["name"] for s in doc["chain_spec"]] == ["temperature", "top_k", "sample"]
    assert doc["seed"] == 5 and doc["max_new_tokens"] == 12 and doc["interrupted"] is False
    assert len(doc["samples"]) == 2
    tokenizer = cli_testplugin.CharTokenizer()
    for sample in doc["samples"]:
        assert len(sample["tokens"]) == 12 and sample["finish_reason"] == "length"
        assert sample["text"] == tokenizer.decode(sample["tokens"])
        assert sample["tokens_per_second"] > 0
    assert doc["tokens_per_second"] > 0 and doc["seconds"] > 0


def test_generate_caches_agree_and_match_the_library(cache_runs: dict[str, Any]) -> None:
    tokens = {c: [s["tokens"] for s in doc["samples"]] for c, doc in cache_runs.items()}
    assert tokens["none"] == tokens["dense"] == tokens["gqa"]
    model = cli_testplugin.load_model()
    seeds = row_seeds(5, 1, 2)  # -n 2 --seed 5: the copies of one prompt seeded 5
    out = dk.generate(model, [PROMPT] * 2, chain="temperature(0.9) | top_k(20)", max_new_tokens=12, seed=seeds)
    assert out.tokens == tokens["dense"]


def test_generate_text_streams_samples_and_seeds_reproduce(cache_runs: dict[str, Any]) -> None:
    flags = ("--temperature", "0.9", "--top-k", "20", "--max-new-tokens", "12")
    text, other = cli_many(
        ["generate", PROMPT, "-m", MODEL, "--seed", "5", "-n", "2", *flags],
        generate_args("--seed", "6", *flags),
    )
    texts = [s["text"] for s in cache_runs["dense"]["samples"]]
    assert texts[0] != texts[1]  # each sample has its own seed stream
    # The same seed gives the same text; text mode prints the samples one after another.
    assert text.returncode == 0 and "Traceback" not in text.stderr
    assert text.stdout == f"--- sample 1/2 ---\n{PROMPT}{texts[0]}\n--- sample 2/2 ---\n{PROMPT}{texts[1]}\n"
    # Another seed, other text (sample 0 alone: its stream does not depend on the batch).
    assert ok_json(other)["samples"][0]["text"] != texts[0]


def test_a_run_without_a_seed_records_the_seed_it_drew_which_reproduces_it() -> None:
    """Without --seed every run differs, and --json records the seed each drew: given back, it gives the same text
    (generate, -n, and explain's picks); `"seed": null` left a run that could not be reproduced."""
    flags = ("--max-new-tokens", "12", "-n", "2")
    first, second = (ok_json(r) for r in cli_many(generate_args(*flags), generate_args(*flags)))
    assert isinstance(first["seed"], int) and first["seed"] != second["seed"]
    again = ok_json(cli(*generate_args(*flags, "--seed", str(first["seed"]))))
    assert [s["tokens"] for s in again["samples"]] == [s["tokens"] for s in first["samples"]]
    explain = ["explain", PROMPT, "-m", MODEL, "--steps", "3", "--json"]
    drawn = ok_json(cli(*explain))
    assert isinstance(drawn["seed"], int)
    replayed = ok_json(cli(*explain, "--seed", str(drawn["seed"])))
    assert [s["token"] for s in replayed["steps"]] == [s["token"] for s in drawn["steps"]]


def test_generate_stop_string_ends_the_sample(cache_runs: dict[str, Any]) -> None:
    full = cache_runs["dense"]["samples"][0]["text"]
    stop = full[4:6]
    flags = ("--temperature", "0.9", "--top-k", "20", "--seed", "5", "--max-new-tokens", "12")
    doc = ok_json(cli(*generate_args(*flags, "--stop", stop, "--stop", "never-generated")))
    sample = doc["samples"][0]
    assert doc["stop"] == [stop, "never-generated"]
    assert sample["finish_reason"] == "stop" and sample["stopped_by"] == stop
    assert sample["text"] == full[: full.index(stop)]


def _interrupt(*runs: tuple[Path, Sequence[str]]) -> list[subprocess.CompletedProcess[str]]:
    """Start each `(marker, extra args)` run at once, Ctrl-C each when it has generated two tokens."""
    args = ["generate", PROMPT, "-m", MODEL, "--cache", "none", "--max-new-tokens", "100000", "--seed", "1"]
    procs = [(marker, _popen([*args, *extra], _env(DECODEKIT_CLI_TEST_MARKER=str(marker)))) for marker, extra in runs]
    deadline = time.monotonic() + 120
    results = []
    for (marker, extra), (_, p) in zip(runs, procs):
        while not marker.exists() and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
        results.append(subprocess.CompletedProcess([*args, *extra], p.returncode, out, err))
    return results


def test_ctrl_c_keeps_what_was_generated(tmp_path: Path) -> None:
    result, text = _interrupt(
        (tmp_path / "json-started", ["--json", "-n", "2"]), (tmp_path / "text-started", ["-n", "2"])
    )
    assert result.returncode == 130
    assert "Traceback" not in result.stderr and "interrupted" in result.stderr
    doc = json.loads(result.stdout)
    assert doc["interrupted"] is True and len(doc["samples"]) == 2
    tokenizer = cli_testplugin.CharTokenizer()
    for sample in doc["samples"]:
        assert sample["finish_reason"] is None
        assert sample["text"] == tokenizer.decode(sample["tokens"])
    assert all(len(s["tokens"]) >= 2 for s in doc["samples"])  # the marker comes after two tokens

    assert text.returncode == 130 and "Traceback" not in text.stderr
    assert text.stdout.startswith(f"--- sample 1/2 ---\n{PROMPT}") and "--- sample 2/2 ---" in text.stdout


# -- errors --------------------------------------------------------------------------


def test_bad_options_fail_with_one_line_and_status_2() -> None:
    generate = ["generate", PROMPT, "-m", MODEL]
    cases: dict[str, tuple[list[str], str]] = {
        "syntax": ([*generate, "--chain", "temperature(0.8"], "to close the '(' at position 11"),
        "unknown sampler": ([*generate, "--chain", "temprature(0.8)"], "unknown sampler 'temprature'"),
        "top_p out of range": ([*generate, "--top-p", "1.5"], "p=1.5"),
        "chain and flags": ([*generate, "--chain", "top_k(5)", "--temperature", "0.8"], "cannot be combined with"),
        "unknown cache": ([*generate, "--cache", "paged"], "--cache 'paged'"),
        "not a number": ([*generate, "--top-k", "many"], "Invalid value for '--top-k'"),
        # was "not installed: ... Install: pip install decodekit-beam", which is installed
        "a strategy in the chain": ([*generate, "--chain", "beam(num_beams=2)"], "'beam' is a strategy, not a sampler"),
    }
    results = cli_many(*(args for args, _ in cases.values()))
    for (name, (_, expected)), r in zip(cases.items(), results):
        lines = r.stderr.splitlines()
        assert r.returncode == 2, (name, r.stderr)
        assert len(lines) == 1 and lines[0].startswith("decodekit: error: "), (name, r.stderr)
        assert expected in lines[0], (name, lines[0])
        assert r.stdout == "", name


def test_llama_cpps_sampling_flags_say_what_gives_them(capsys: pytest.CaptureFixture[str]) -> None:
    """llama.cpp's flags got click's guess at a close name: `--n-predict` "Possible options: --no-echo", `--min-p`
    "--input", `--mirostat` "--strategy", `--logit-bias` "--logprobs", `--samplers` "--compile, --num-samples"."""
    from decodekit_cli import main

    cases = {
        "--n-predict": "is --max-new-tokens N (its -n; -n here is the number of samples)",
        # --temperature goes before --top-k and --top-p (vLLM's order); llama.cpp tempers after its truncations
        "--temp": "is --temperature T, which comes before --top-k and --top-p here (vLLM's order); llama.cpp tempers "
        "last, after its default truncations: --chain 'top_k(40) | top_p(0.95) | min_p(0.05) | temperature(t)'",
        "--min-p": "is --chain '... | min_p(p) | temperature(t)'",
        "--mirostat": "'temperature(t) | mirostat(tau, eta)' (mode 1) or 'temperature(t) | mirostat_v2(tau, eta)' (2)",
        "--logit-bias": "is --chain 'logit_bias({id: bias}) | ...' (a ban, TOKEN-inf: bad_words([[id]]))",
        "--samplers": "is --chain, the stages in that order",
        # the aliases llama.cpp declares beside them: `--typical-p` was "Possible options: --top-p", another sampler
        "--typical-p": "is --chain '... | typical(mass) | ...'",
        "--predict": "is --max-new-tokens N",
        "--adaptive-target": "is --chain '... | adaptive_p(target, decay)' in sample's place",
    }
    for command in ("generate", "explain"):
        for flag, expected in cases.items():
            assert main([command, PROMPT, "-m", MODEL, flag, "1"]) == 2
            err = capsys.readouterr().err
            assert err.startswith(f"decodekit: error: No such option: {flag}; llama.cpp's {flag} "), err
            assert expected in err and "Possible options" not in err, err
    assert main(["samplers", "--temp"]) == 2  # a command that samples nothing: click's own guess
    assert "llama.cpp" not in capsys.readouterr().err


def test_checks_that_need_no_model_run_in_process(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from decodekit_cli import main

    png = tmp_path / "x.png"
    assert main(["explain", PROMPT, "-m", MODEL, "--steps", "2", "--plot", str(png), "--plot-step", "2"]) == 2
    assert main(["generate", PROMPT, "--model", "no-such-model"]) == 2
    assert main(["generate", PROMPT, "--max-new-tokens", "-1"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 3 and all(line.startswith("decodekit: error: ") for line in err)
    assert "--plot-step 2" in err[0] and "unknown model 'no-such-model'" in err[1] and "'--max-new-tokens'" in err[2]
    assert not png.exists()


def test_generate_without_the_default_cache_says_it_runs_without_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: with decodekit-cache-dense not installed, generate fell back to --cache none without a word (the
    whole context recomputed every step: many times slower)."""
    args = ("--temperature", "0.9", "--top-k", "20", "--seed", "3", "--max-new-tokens", "6")
    uninstall(monkeypatch, "decodekit-cache-dense")
    absent, none = cli_many(generate_args(*args), generate_args(*args, "--cache", "none"))
    assert [ok_json(r)["samples"][0]["tokens"] for r in (absent, none)] == [ok_json(none)["samples"][0]["tokens"]] * 2
    assert ok_json(absent)["cache"] == "none"
    assert absent.stderr.splitlines() == [
        "decodekit: warning: no --cache given, and the default, dense, is not installed: running without a cache "
        "(as --cache none: the same tokens, many times slower); to install it: pip install decodekit-cache-dense "
        f"(from a checkout: pip install {TESTS.parent}/plugins/decodekit-cache-dense)"
    ]
    assert none.stderr == ""  # asked for: no note


def test_generate_with_the_default_cache_disabled_says_how_to_enable_it() -> None:
    """It said "is not installed ... pip install decodekit-cache-dense" of a plugin DECODEKIT_DISABLE_PLUGINS left
    out."""
    r = cli(*generate_args("--max-new-tokens", "2"), DECODEKIT_DISABLE_PLUGINS="decodekit-cache-dense")
    assert ok_json(r)["cache"] == "none"
    assert r.stderr.splitlines() == [
        "decodekit: warning: no --cache given, and the default, dense, is installed but disabled: running without a "
        "cache (as --cache none: the same tokens, many times slower); DECODEKIT_DISABLE_PLUGINS lists "
        "decodekit-cache-dense; remove it from DECODEKIT_DISABLE_PLUGINS to enable it"
    ]


def test_plot_without_matplotlib_fails_before_the_model_loads(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`make run` installs no matplotlib: explain printed its whole trace, then failed on --plot."""
    from decodekit_cli import main

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    assert main(["explain", PROMPT, "-m", "no-such-model", "--plot", str(tmp_path / "x.png")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == "decodekit: error: --plot needs matplotlib: pip install matplotlib\n"


def test_bad_plot_cache_and_strategy_strings_fail_before_the_model_loads(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from decodekit_cli import main

    explain = ["explain", PROMPT, "-m", "no-such-model", "--steps", "1"]
    generate = ["generate", PROMPT, "-m", "no-such-model"]
    assert main([*explain, "--plot", str(tmp_path / "x.gif")]) == 2
    assert main([*explain, "--plot", str(tmp_path / "missing" / "x.png")]) == 2
    assert main([*generate, "--cache", "gqa(size=4)"]) == 2
    assert main([*generate, "--cache", "gqa(("]) == 2
    assert main([*generate, "--strategy", "beam(num_beams=0)"]) == 2
    assert main([*generate, "--strategy", "bream"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 6 and all(line.startswith("decodekit: error: ") for line in err), err
    assert "unknown image format 'gif'; allowed: eps, jpeg, jpg, pdf, png" in err[0]
    assert "cannot write there" in err[1]
    assert "cache gqa: unknown parameter size=4; allowed parameters: none" in err[2]
    assert "--cache 'gqa((': at position 5: expected ')' to close the '(' at position 4" in err[3]
    assert "strategy beam: num_beams=0 is invalid" in err[4]
    installed = ", ".join(sorted(dk.get_registry().strategies))  # beam, cfg, sample, ... and any third-party one
    assert f"unknown strategy 'bream'; installed: {installed}" in err[5] and "did you mean 'beam'" in err[5]


def test_a_mistyped_value_names_it_and_the_close_choice(capsys: pytest.CaptureFixture[str]) -> None:
    from decodekit_cli import main

    generate = ["generate", PROMPT, "-m", MODEL]
    assert main([*generate, "--cache", "dens"]) == 2
    assert main(["new-plugin", "softcap", "--kind", "samplr"]) == 2
    assert main([*generate, "--max-new-tokens", "-3"]) == 2
    assert main([*generate, "--top-p", "abc"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 4 and all(line.startswith("decodekit: error: ") for line in err), err
    assert err[0].endswith("allowed: none, " + ", ".join(sorted(dk.get_registry().caches)) + "; did you mean 'dense'?")
    assert "'--kind': 'samplr' is not one of 'sampler', 'cache', 'model', 'strategy'; did you mean 'sampler'?" in err[1]
    assert "Value error" not in err[1]
    assert "'--max-new-tokens': '-3': allowed: an integer >= 0" in err[2]
    assert "'--top-p': 'abc': Input should be a valid number" in err[3]


def test_samplers_shows_a_parameters_pattern(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A parameter whose only constraint is a regex (`Field(pattern=...)`) was listed with no bounds at all."""
    from decodekit_cli import main

    monkeypatch.setenv("DECODEKIT_EXTRA_PLUGINS", "cli_testplugin:pattern")
    dk.reload_plugins()
    try:
        assert main(["samplers", "--json", "test_pattern"]) == 0
        (word,) = json.loads(capsys.readouterr().out)["samplers"][0]["params"]
        assert word["bounds"] == "matches '^[a-z]+(_[a-z]+)*$'"
        assert main(["samplers", "test_pattern"]) == 0
        assert "    word  a string  matches '^[a-z]+(_[a-z]+)*$'  default 'top'\n" in capsys.readouterr().out
    finally:
        monkeypatch.delenv("DECODEKIT_EXTRA_PLUGINS")
        dk.reload_plugins()


def test_samplers_lists_the_models_with_their_parameters(capsys: pytest.CaptureFixture[str]) -> None:
    """`decodekit samplers hf`: a model's parameters, as a sampler's are shown (the bounds its errors use)."""
    from decodekit_cli import main

    HFParams = pytest.importorskip("decodekit_hf.params", reason="decodekit-hf is not installed").HFParams
    assert main(["samplers", "--json", "hf", "tiny-shakespeare"]) == 0
    report = json.loads(capsys.readouterr().out)
    hf, shakespeare = report["models"]
    assert (hf["name"], shakespeare["name"], shakespeare["params"]) == ("hf", "tiny-shakespeare", [])
    fields = HFParams.model_fields
    assert [(p["name"], p["default"]) for p in hf["params"]] == [(k, f.default) for k, f in fields.items()]
    # device's pattern was shown as a bare `str`: what it allows is its own `allowed` text, as its errors say
    device = "cpu, cuda, cuda:N (N = 0, 1, ...), mps"
    assert [p["bounds"] for p in hf["params"]] == ["", device, "1 ≤ context"]
    assert [p["allowed"] for p in hf["params"]][1] == device
    assert main(["samplers", "hf"]) == 0
    text = capsys.readouterr().out
    assert (
        text.startswith("Models\nhf  decodekit-hf ")
        and "    context  an integer or null  1 ≤ context  default null" in text
    )
    assert f"    device  a string  {device}  default 'cpu'" in text
    assert main(["samplers"]) == 0
    assert "\nModels\n" in capsys.readouterr().out


def test_samplers_of_an_unknown_name_names_the_plugins_that_failed_to_load(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its error said only 'unknown name', though the name may be one a plugin that failed to load would register."""
    from decodekit_cli import main

    class Broken:
        @dk.hookimpl(specname="register_samplers")
        def register_samplers(self, register: Any) -> None:
            raise RuntimeError("its hook is broken")

    monkeypatch.setattr("decodekit.plugins._code_plugins", [*dk.plugins._code_plugins, (Broken(), "oops")])
    with pytest.warns(RuntimeWarning):
        dk.reload_plugins()
    try:
        assert main(["samplers", "oops_shift"]) == 2
        [err] = capsys.readouterr().err.splitlines()
        assert err.startswith("decodekit: error: unknown name 'oops_shift'; allowed: ")
        assert err.endswith("lists them; oops failed to load: `decodekit plugins` says why"), err
    finally:
        monkeypatch.undo()
        dk.reload_plugins()


def test_samplers_names_select_cache_backends_and_strategies_too(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from decodekit_cli import main

    assert main(["samplers", "--json", "window", "beam", "top_k"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [[e["name"] for e in report[k]] for k in ("samplers", "cache_backends", "strategies")] == [
        ["top_k"],
        ["window"],
        ["beam"],
    ]
    assert main(["samplers", "window"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("Cache backends\nwindow ") and "Samplers" not in text and "\nnone " not in text
    assert main(["samplers", "windw"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "decodekit: error: unknown name 'windw'; allowed: a sampler, cache backend, strategy or model, as "
        "`decodekit samplers` lists them; did you mean 'window'?"
    ]
    disabled = cli("samplers", "top_k", DECODEKIT_DISABLE_PLUGINS="decodekit-top-k")
    assert disabled.returncode == 2 and disabled.stderr == (
        "decodekit: error: 'top_k' is installed but disabled: DECODEKIT_DISABLE_PLUGINS lists decodekit-top-k; "
        "remove it from DECODEKIT_DISABLE_PLUGINS to enable it\n"
    )  # not "is not installed; pip install decodekit-top-k"
    uninstall(monkeypatch, "decodekit-top-k")
    absent = cli("samplers", "top_k")
    assert absent.returncode == 2 and absent.stderr == (
        "decodekit: error: 'top_k' is not installed; pip install decodekit-top-k (from a checkout: pip install "
        f"{TESTS.parent}/plugins/decodekit-top-k)\n"
    )  # not "did you mean 'top_p'?"


def test_a_chain_file_given_as_the_chain_says_to_pass_its_text(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from decodekit_cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "spec.json").write_text('[{"name": "top_k", "params": {"k": 5}}]')
    assert main(["generate", PROMPT, "-m", MODEL, "--chain", "spec.json"]) == 2
    assert main(["generate", PROMPT, "-m", MODEL, "--chain", "nofile.json"]) == 2  # no file: the parse error only
    err = capsys.readouterr().err.splitlines()
    assert err[0].endswith("""'spec.json' is a file, and --chain takes its text: --chain "$(cat spec.json)\"""")
    assert err[1].endswith("expected '|' or the end, found '.'")


def test_a_model_without_a_tokenizer_says_the_command_line_needs_one(capsys: pytest.CaptureFixture[str]) -> None:
    def untokenized(argument: object, params: object) -> Any:
        model = cli_testplugin.load_model()
        model.tokenizer = None
        return model

    assert main_with_model(untokenized, "generate", PROMPT, "-m", OWN_MODEL, "--max-new-tokens", "2") == 2
    [line] = capsys.readouterr().err.splitlines()
    # it said "pass token ids", which a command line cannot
    assert line.startswith("decodekit: error: the model has no tokenizer, and the command line takes text prompts")


def test_an_unexpected_error_is_one_line_too(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from decodekit_cli import main

    def broken(*args: object) -> None:
        raise KeyError("a bug somewhere")

    monkeypatch.setattr("decodekit_cli.generate_command.build_chain", broken)
    assert main(["generate", PROMPT]) == 1
    [line] = capsys.readouterr().err.splitlines()
    assert line == "decodekit: error: unexpected KeyError: 'a bug somewhere' (DECODEKIT_DEBUG=1 shows the traceback)"
    monkeypatch.setenv("DECODEKIT_DEBUG", "1")
    with pytest.raises(KeyError):
        main(["generate", PROMPT])


def test_plugins_check_reports_broken_paths(capsys: pytest.CaptureFixture[str]) -> None:
    from decodekit_cli import main

    class Haunted:
        @dk.hookimpl
        def register_cache_backends(self, register: Any) -> None:
            register("ghost", "decodekit_no_such_module:Ghost", description="a path to nothing")

    plugin = Haunted()
    dk.register_plugin(plugin, name="haunted")
    try:
        assert main(["plugins"]) == 0  # without --check a path is not imported
        assert "Checked" not in capsys.readouterr().out
        assert main(["plugins", "--check"]) == 1
        text = capsys.readouterr().out
        assert main(["plugins", "--check", "--json"]) == 1
    finally:
        dk.unregister_plugin(plugin)
    out = capsys.readouterr().out
    report = json.loads(out[out.index('{\n  "plugins"') :])
    [broken] = report["broken"]
    assert broken["name"] == "ghost" and broken["distribution"] == "haunted"
    assert "No module named 'decodekit_no_such_module'" in broken["error"]
    # It says what imported, too (once the listing alone, as without --check).
    imported = {(i["category"], i["name"]) for i in report["imported"]}
    assert {("sampler", "top_k"), ("cache backend", "gqa")} <= imported and ("cache backend", "ghost") not in imported
    n = len(imported)
    summary = " ".join(text[text.index("Checked ") :].split())
    assert summary.startswith(f"Checked {n + 1} implementations registered by import path: {n} imported (")
    assert summary.endswith("; 1 did not (Broken implementations above)")


@contextmanager
def greedy_registered_twice(monkeypatch: pytest.MonkeyPatch, columns: int) -> Iterator[None]:
    """The test plugin's second `greedy` loaded, the terminal `columns` wide; the plugins as they were after."""
    monkeypatch.setenv("DECODEKIT_EXTRA_PLUGINS", "cli_testplugin:duplicate")
    monkeypatch.setenv("COLUMNS", str(columns))
    with pytest.warns(RuntimeWarning, match="'greedy' is registered by 2 distributions"):
        dk.reload_plugins()
    try:
        yield
    finally:
        monkeypatch.delenv("DECODEKIT_EXTRA_PLUGINS")
        monkeypatch.delenv("DECODEKIT_DISABLE_PLUGINS", raising=False)  # it names the extra: refused without it
        dk.reload_plugins()


def test_plugins_lists_a_name_registered_twice_and_the_rest_works(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from decodekit_cli import main

    with greedy_registered_twice(monkeypatch, columns=300):
        assert main(["plugins"]) == 0
        out = capsys.readouterr().out
        assert "Names registered twice (unusable)" in out
        assert "decodekit-greedy, cli_testplugin:duplicate" in out
        assert "DECODEKIT_DISABLE_PLUGINS=cli_testplugin:duplicate" in out
        assert main(["generate", PROMPT, "--chain", "greedy", "--max-new-tokens", "2"]) == 2
        assert "registered by 2 distributions" in capsys.readouterr().err
        assert dk.Chain.parse("temperature(0.5) | sample").processors  # everything else works
        monkeypatch.setenv("DECODEKIT_DISABLE_PLUGINS", "cli_testplugin:duplicate")  # as the error says
        assert dk.reload_plugins().samplers["greedy"].distribution == "decodekit-greedy"


def test_plugins_shows_the_whole_fix_for_a_name_registered_twice_on_80_columns(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """At 80 columns (a pipe's width) the error column was cut: "DECODEKIT_…", the variable and its value lost."""
    from decodekit_cli import main

    with greedy_registered_twice(monkeypatch, columns=80):
        assert main(["plugins"]) == 0
    table = capsys.readouterr().out.split("Names registered twice (unusable)")[1]
    assert "…" not in table
    flat = re.sub(r"[\s│]", "", table)  # the cells' lines, joined: a long word folds over several
    assert "DECODEKIT_DISABLE_PLUGINS=cli_testplugin:duplicatekeepsdecodekit-greedy's" in flat


def test_missing_default_model_lists_installed_models() -> None:
    # Load only the samplers of the default chain: tiny-shakespeare is absent, cli-test-gpt is there.
    r = cli("generate", PROMPT, DECODEKIT_LOAD_PLUGINS="decodekit-temperature,decodekit-top-p")
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1
    assert "tiny-shakespeare" in r.stderr and "available models: cli-test-gpt" in r.stderr


@pytest.mark.parametrize(
    ("model", "dist"), [("hf(dtype=float32):/ckpt", "decodekit-hf"), ("tiny-shakespeare", "decodekit-shakespeare")]
)
def test_a_standard_model_given_but_not_installed_says_what_to_install(
    model: str, dist: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the default model had the hint: --model hf:DIR said 'unknown model', and --model tiny-shakespeare
    'did you mean tiny-shakespeare-llama?'."""
    uninstall(monkeypatch, dist)
    r = cli("generate", PROMPT, "--model", model, DECODEKIT_LOAD_PLUGINS="decodekit-temperature,decodekit-top-p")
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1, r.stderr
    name = model.partition("(")[0]
    assert f"not installed: the model {name!r} (--model {model!r}; available models: cli-test-gpt)" in r.stderr
    assert f"Install: pip install {dist} (from a checkout" in r.stderr


# -- listings ------------------------------------------------------------------------


def test_plugins_and_samplers_listings() -> None:
    env = {"DECODEKIT_EXTRA_PLUGINS": "cli_testplugin,cli_testplugin:broken"}
    plugins_text, plugins_json, samplers_text, samplers_json = cli_many(
        ["plugins"], ["plugins", "--json"], ["samplers"], ["samplers", "--json"], **env
    )
    plugins = ok_json(plugins_json)
    by_dist = {p["distribution"]: p for p in plugins["plugins"]}
    assert by_dist["decodekit"]["samplers"] == ["sample"]
    assert by_dist["cli_testplugin"]["models"] == [MODEL]
    assert by_dist["decodekit-temperature"]["samplers"] == ["temperature"]
    assert by_dist["decodekit-cache-gqa"]["cache_backends"] == ["gqa"]
    [failure] = plugins["failures"]
    assert failure["distribution"] == "cli_testplugin:broken" and "boom" in failure["error"]

    assert plugins_text.returncode == 0 and plugins_text.stderr == ""  # failures are listed, not warned
    for p in plugins["plugins"]:
        assert p["distribution"] in plugins_text.stdout and p["version"] in plugins_text.stdout
        for name in p["samplers"] + p["cache_backends"] + p["models"]:
            assert name in plugins_text.stdout
    assert "Failed to load" in plugins_text.stdout and "RuntimeError: boom" in plugins_text.stdout

    report = ok_json(samplers_json)
    samplers = {s["name"]: s for s in report["samplers"]}
    assert samplers["sample"]["kind"] == samplers["greedy"]["kind"] == "selector"
    assert samplers["temperature"]["kind"] == samplers["top_p"]["kind"] == "processor"
    top_p = {p["name"]: p for p in samplers["top_p"]["params"]}
    assert top_p["p"]["required"] is True and top_p["p"]["type"] == "a number"
    assert top_p["p"]["bounds"] == "0 < p ≤ 1, finite"
    assert top_p["p"]["schema"] == {
        **dk.get_registry().samplers["top_p"].params_model.model_json_schema()["properties"]["p"]
    }
    assert top_p["p"]["schema"]["exclusiveMinimum"] == 0 and top_p["p"]["schema"]["maximum"] == 1
    assert top_p["min_keep"]["required"] is False and top_p["min_keep"]["default"] == 1
    assert {"dense", "gqa"} <= {c["name"] for c in report["cache_backends"]}

    assert samplers_text.returncode == 0
    for c in report["cache_backends"]:
        assert c["description"] in samplers_text.stdout


READABLE_TYPES = {
    ("allowed_tokens", "tokens"): "a list of integers in [0, 2**63)",
    ("bad_words", "sequences"): "a list of non-empty lists of integers in [0, 2**63)",
    ("logit_bias", "bias"): "an object mapping integers in [0, 2**63) to numbers in [-100, 100]",
    (
        "sequence_bias",
        "biases",
    ): "a list of pairs [a non-empty list of integers in [0, 2**63), a number in [-10000, 10000]]",
    ("repetition_penalty", "last_n"): "an integer or null",
}


@pytest.mark.parametrize("columns", [80, 120])
def test_samplers_listing_is_readable_at_any_width(columns: int) -> None:
    text, as_json = cli_many(["samplers"], ["samplers", "--json"], COLUMNS=str(columns))
    assert text.returncode == 0 and text.stderr == ""
    lines = [line.rstrip() for line in text.stdout.splitlines()]
    assert max(map(len, lines)) <= columns
    for internal in ("FieldInfo", "Annotated", "typing.", "metadata=", "<class"):
        assert internal not in text.stdout and internal not in as_json.stdout
    words = " ".join(text.stdout.split())  # wrapped lines read as one text: nothing cut or dropped
    report = ok_json(as_json)
    samplers = {s["name"]: s for s in report["samplers"]}
    for s in samplers.values():
        assert " ".join(f"{s['name']} {s['kind']} · {s['distribution']}".split()) in words
    assert any(e["params"] for e in report["strategies"])  # beam's, at least
    for s in [*samplers.values(), *report["cache_backends"], *report["strategies"]]:
        assert " ".join(s["description"].split()) in words
        for p in s["params"]:
            with json_words():  # as the command line shows a default: null, true
                default = "required" if p["required"] else f"default {shown(p['default'])}"
            listed = " ".join(filter(None, [p["name"], p["type"], p["bounds"], default]))
            assert " ".join(listed.split()) in words, (s["name"], listed)
            assert " ".join(p["description"].split()) in words
            assert p["schema"]["description"] == p["description"] if p["description"] else True
    for (sampler, param), expected in READABLE_TYPES.items():
        assert {p["name"]: p["type"] for p in samplers[sampler]["params"]}[param] == expected
    strategies = {s["name"]: s for s in report["strategies"]}
    if "speculative" in strategies:  # a model parameter: once listed as `Any`
        assert {p["name"]: p["type"] for p in strategies["speculative"]["params"]}["draft"] == "a string or a Model"


def test_piped_listings_and_tables_end_no_line_in_spaces(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """rich pads wrapped lines and table titles to the width; piped, those spaces once stayed."""
    from decodekit_cli import main

    monkeypatch.setenv("DECODEKIT_EXTRA_PLUGINS", "cli_testplugin")
    monkeypatch.setenv("COLUMNS", "60")  # narrow: every kind of line wraps
    dk.reload_plugins()
    try:
        assert main(["samplers"]) == 0
        assert main(["plugins"]) == 0
        explain = ["explain", PROMPT, "-m", MODEL, "--chain", CHAIN, "--steps", "1", "--top", "3", "--seed", "0"]
        assert main(explain) == 0
    finally:
        monkeypatch.delenv("DECODEKIT_EXTRA_PLUGINS")
        dk.reload_plugins()
    out = capsys.readouterr().out
    assert "Decode strategies" in out and "step 0: picked" in out
    padded = [line for line in out.splitlines() if line != line.rstrip()]
    assert not padded, padded[:3]


TORCH_FREE = """
import contextlib, io, json, sys, traceback
importers = []
class Spy:  # records who imports torch, then lets the normal import go on
    def find_spec(self, name, path=None, target=None):
        if name == "torch":
            stack = [f"{f.filename}:{f.lineno}" for f in traceback.extract_stack()[:-1]]
            importers.append([s for s in stack if "importlib" not in s][-3:])
        return None
sys.meta_path.insert(0, Spy())
from decodekit_cli import main
codes = []
with contextlib.redirect_stdout(io.StringIO()):
    for argv in (["--help"], ["generate", "--help"], ["plugins"], ["plugins", "--json"]):
        codes.append(main(argv))
print(json.dumps({"codes": codes, "torch": "torch" in sys.modules, "importers": importers}))
"""


def _torch_free_run(**env: str) -> Any:
    r = subprocess.run([sys.executable, "-c", TORCH_FREE], capture_output=True, text=True, env=_env(**env), timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_help_and_plugins_do_not_import_torch() -> None:
    # The CLI and the core: only the test plugin, which registers its model by import path.
    result = _torch_free_run(DECODEKIT_LOAD_PLUGINS="")
    assert result["codes"] == [0, 0, 0, 0]
    assert not result["torch"], result["importers"]


def test_installed_plugins_do_not_import_torch_when_listed() -> None:
    result = _torch_free_run()
    assert result["codes"] == [0, 0, 0, 0]
    assert not result["torch"], f"a plugin imports torch when it is loaded: {result['importers']}"


# -- explain -------------------------------------------------------------------------


def test_explain_traces_random_stages_with_the_draws_of_the_real_step() -> None:
    """XTC applies at random: the trace must see the draw the step then uses, so the picked token
    is never one the trace shows removed (a trace drawing its own numbers disagreed on 12 of 100 steps)."""
    from decodekit_cli.explain import explain_steps

    model = cli_testplugin.load_model()
    chain = dk.Chain.parse("temperature(3.0) | xtc(probability=0.5, threshold=0.01) | sample")
    reports = explain_steps(model, PROMPT, chain, steps=100, top=5, seed=3)
    removed = [r.step for r in reports if r.stages[-1].probs[r.candidates.index(r.token)] == 0]
    assert removed == []
    applied = [r.stages[2].survivors < r.stages[1].survivors for r in reports]
    assert 20 < sum(applied) < 80  # XTC applied on some steps and not on others


def test_explain_policy_refuses_rows_that_cannot_fit_at_its_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """The explain policy was a generator, so it opened its decoding (and refused) only at the first round;
    it opens at its call, as the built-in strategies do. A row: 2048 + 16·(2 + 4) + 8·vocab bytes."""
    from decodekit_cli.explain import explain_policy

    from decodekit.engine import Decoding
    from decodekit.params import NoParams
    from decodekit.request import decode_request

    model = cli_testplugin.load_model()
    monkeypatch.setattr("decodekit.engine.device_memory", lambda device: 1000)
    request = decode_request(model, [[1, 2]], max_new_tokens=4)
    with pytest.raises(dk.ParameterError) as info:
        Decoding(request, "explain").run(explain_policy([]), NoParams(), per_round=True)  # not iterated
    per_row = 2048 + 16 * 6 + 8 * model.spec.vocab_size
    assert str(info.value) == (
        f"strategy explain: batch size=1 is invalid: its 1 rows of 6 tokens would take at least "
        f"{per_row / 2**30:,.1f} GiB, more than the 0.0 GiB of memory of device cpu; allowed: batch size <= 0 here"
    )


def test_explain_agrees_with_chain_process_stage_by_stage(tmp_path: Path) -> None:
    png = tmp_path / "step2.png"
    explain = ["explain", PROMPT, "-m", MODEL, "--chain", CHAIN, "--seed", "7"]
    explain_json, explain_text, generated = cli_many(
        [*explain, "--steps", "4", "--top", "5", "--json"],
        [*explain, "--steps", "2", "--plot", str(png), "--plot-step", "1"],
        generate_args("--chain", CHAIN, "--seed", "7", "--max-new-tokens", "4", "--cache", "none"),
    )
    doc = ok_json(explain_json)
    steps = doc["steps"]
    assert len(steps) == 4 and doc["model"] == MODEL
    # The tokens explain picks are the ones generate picks with the same seed.
    assert [s["token"] for s in steps] == ok_json(generated)["samples"][0]["tokens"]

    model = cli_testplugin.load_model()
    chain = dk.Chain.parse(CHAIN)
    ids = model.tokenizer.encode(PROMPT)
    for k, step in enumerate(steps):
        history = torch.tensor([ids + [s["token"] for s in steps[:k]]])
        with torch.no_grad():
            raw = model(history, torch.arange(history.shape[1])[None], None)[:, -1].float()
        ctx = DecodeContext(tokens=history, step=k)
        names = ["input"] + [s["stage"] for s in step["stages"][1:]]
        assert " | ".join(names[1:]) == str(chain).removesuffix(" | sample")  # as the chain string writes them
        assert step["token"] in step["candidates"]
        for i, stage in enumerate(step["stages"]):
            logits = dk.Chain(chain.processors[:i]).process(raw, ctx)[0]
            probs = torch.softmax(logits, -1)
            assert stage["survivors"] == int(torch.isfinite(logits).sum())
            p = probs[probs > 0]
            assert stage["entropy"] == pytest.approx(float(-(p * p.log()).sum()), abs=1e-4)
            torch.testing.assert_close(torch.tensor(stage["probs"]), probs[step["candidates"]], atol=1e-5, rtol=1e-4)
        assert step["stages"][-1]["survivors"] < step["stages"][0]["survivors"]  # top_k/top_p truncated

    assert explain_text.returncode == 0 and "Traceback" not in explain_text.stderr
    for name in ("step 0: picked", "step 1: picked", "repetition_penalty(penalty=1.3)", "top_p(p=0.8)", "entropy"):
        assert name in explain_text.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000


# -- tiny-shakespeare, when installed with its weights --------------------------------


@pytest.fixture(scope="module")
def shakespeare() -> Any:
    if "tiny-shakespeare" not in dk.get_registry().models:
        pytest.skip("decodekit-shakespeare is not installed")
    try:
        return dk.load_model("tiny-shakespeare")
    except dk.DecodekitError as exc:
        pytest.skip(f"tiny-shakespeare cannot be loaded: {exc}")


def test_tiny_shakespeare_is_the_default_model(shakespeare: Any) -> None:
    runs = cli_many(
        *(generate_args("--cache", c, "--seed", "0", "--max-new-tokens", "24", model=None) for c in ("dense", "gqa")),
        ["explain", "ROMEO:", "--chain", CHAIN, "--steps", "2", "--seed", "0", "--json"],
    )
    docs = [ok_json(r) for r in runs[:2]]
    assert all(d["model"] == "tiny-shakespeare" for d in docs)
    [dense], [gqa] = (d["samples"] for d in docs)
    assert dense["tokens"] == gqa["tokens"] and len(dense["tokens"]) == 24  # a GQA model: 8 heads, 2 kv-heads
    # The default chain, as --help states it.
    out = dk.generate(shakespeare, PROMPT, chain="temperature(0.8) | top_p(0.95)", max_new_tokens=24, seed=0)
    assert out.tokens == [dense["tokens"]] and out.text == [dense["text"]]
    explained = ok_json(runs[2])
    assert explained["model"] == "tiny-shakespeare" and len(explained["steps"]) == 2


def test_explain_plot_keeps_a_long_chains_legend_inside_the_figure() -> None:
    from decodekit_cli.explain import explain_steps
    from decodekit_cli.explain_render import step_figure
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    chain = dk.Chain.parse(
        "repetition_penalty(1.1) | frequency_penalty(0.5) | temperature(0.8) | min_p(0.02) | top_k(20) | top_p(0.9)"
    )
    [report] = explain_steps(cli_testplugin.load_model(), PROMPT, chain, steps=1, top=8, seed=0)
    fig = step_figure(report, ["input", *(stage_label(s, every=False) for s in chain.processors)])
    FigureCanvasAgg(fig).draw()
    [legend] = fig.legends
    box, inside = legend.get_window_extent(), fig.bbox
    assert inside.x0 <= box.x0 and box.x1 <= inside.x1 and inside.y0 <= box.y0 and box.y1 <= inside.y1
    labels = [t.get_text() for t in legend.get_texts()]
    assert labels[0].startswith("input (") and labels[-1].startswith("top_p(p=0.9) (")  # whole, never cut
    for text in legend.get_texts():
        extent = text.get_window_extent()
        assert inside.x0 <= extent.x0 and extent.x1 <= inside.x1


def test_explain_plot_counts_one_token_in_the_singular() -> None:
    from decodekit_cli.explain import explain_steps
    from decodekit_cli.explain_render import step_figure

    [report] = explain_steps(cli_testplugin.load_model(), PROMPT, dk.Chain.parse("top_k(1)"), steps=1, top=3, seed=0)
    [legend] = step_figure(report).legends
    labels = [t.get_text() for t in legend.get_texts()]
    assert labels[-1] == "top_k(k=1) (1 token)", labels  # once "(1 tokens)"
    assert labels[0].endswith(" tokens)") and not labels[0].endswith("(1 tokens)")


def test_prompt_options_stop_unknown_characters_and_stdin() -> None:
    flags = ["-m", MODEL, "--seed", "3", "--max-new-tokens", "6", "--temperature", "2"]
    empty_stop, unknown, no_replace = cli_many(
        ["generate", PROMPT, *flags, "--stop", ""],
        ["generate", "ROMEO: ♥", *flags],  # the test model's tokenizer raises a KeyError
        ["generate", "ROMEO: ♥", *flags, "--replace-unknown"],
    )
    for r in (empty_stop, unknown, no_replace):
        assert r.returncode == 2 and len(r.stderr.splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr
    assert "--stop '': an empty stop string" in empty_stop.stderr
    assert "cannot encode the prompt: KeyError: '♥'" in unknown.stderr
    assert "--replace-unknown: the model's tokenizer has no errors= option" in no_replace.stderr

    # From stdin, the trailing newline `echo` adds is dropped: the same text as the argument.
    piped = run_cli(["generate", "-", *flags, "--json"], _env(), stdin=PROMPT + "\n")
    argument = cli("generate", PROMPT, *flags, "--json")
    tokens = [[s["tokens"] for s in ok_json(r)["samples"]] for r in (piped, argument)]
    assert ok_json(piped)["prompt"] == PROMPT and tokens[0] == tokens[1]


def test_a_core_only_install_reports_every_missing_piece_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    uninstall(monkeypatch, "decodekit-shakespeare", "decodekit-temperature", "decodekit-top-p")
    r = cli("generate", PROMPT, DECODEKIT_LOAD_PLUGINS="", DECODEKIT_EXTRA_PLUGINS="")  # the others: left out
    [line] = r.stderr.splitlines()
    assert r.returncode == 2 and line.startswith("decodekit: error: not installed: ")
    assert "default model 'tiny-shakespeare'" in line and "default chain 'temperature(0.8) | top_p(0.95)'" in line
    assert "pip install decodekit-shakespeare decodekit-temperature decodekit-top-p" in line
    plugins = TESTS.parent / "plugins"
    assert f"from a checkout: pip install {plugins}/decodekit-shakespeare {plugins}/decodekit-temperature" in line
    # With a model and a chain of the core's own `sample`, the core alone generates.
    ok = cli("generate", PROMPT, "-m", MODEL, "--chain", "sample", "--max-new-tokens", "4", DECODEKIT_LOAD_PLUGINS="")
    assert ok.returncode == 0 and ok.stdout.startswith(PROMPT), ok.stderr


def test_a_standard_strategy_not_installed_says_which_distribution_has_it(monkeypatch: pytest.MonkeyPatch) -> None:
    flags = ["-m", MODEL, "--chain", "sample", "--max-new-tokens", "4", "--strategy", "beam(num_beams=2)"]
    disabled = cli("generate", PROMPT, *flags, DECODEKIT_LOAD_PLUGINS="")
    assert disabled.returncode == 2 and disabled.stderr == (
        "decodekit: error: --strategy 'beam(num_beams=2)': strategy 'beam' is installed but disabled: "
        "DECODEKIT_LOAD_PLUGINS does not list decodekit-beam; add it to DECODEKIT_LOAD_PLUGINS (or unset "
        "DECODEKIT_LOAD_PLUGINS) to enable it; allowed: sample\n"
    )
    assert cli("generate", PROMPT, *flags).returncode == 0  # installed, it runs
    uninstall(monkeypatch, "decodekit-beam")
    r = cli("generate", PROMPT, *flags)
    [line] = r.stderr.splitlines()
    assert r.returncode == 2 and line.startswith(
        "decodekit: error: --strategy 'beam(num_beams=2)': strategy 'beam' is "
    )
    hint = f"pip install decodekit-beam (from a checkout: pip install {TESTS.parent}/plugins/decodekit-beam)"
    installed = ", ".join(sorted(dk.get_registry().strategies))  # cfg, sample, ... and any third-party strategy
    assert line.endswith(f"is not installed; {hint}; allowed: {installed}") and "beam" not in installed


def test_plugins_left_out_by_the_variables_are_named_as_disabled_with_how_to_enable_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`generate` said "not installed ... pip install" of plugins DECODEKIT_LOAD_PLUGINS or DECODEKIT_DISABLE_PLUGINS
    left out; `decodekit plugins` did not list them."""
    load = "DECODEKIT_LOAD_PLUGINS does not list"
    r = cli("generate", PROMPT, DECODEKIT_LOAD_PLUGINS="", DECODEKIT_EXTRA_PLUGINS="")
    assert r.returncode == 2 and r.stderr == (
        "decodekit: error: installed but disabled: the default model 'tiny-shakespeare' (no --model given; available "
        "models: none); the default chain 'temperature(0.8) | top_p(0.95)' needs temperature, top_p. "
        f"{load} decodekit-shakespeare, decodekit-temperature, decodekit-top-p; add them to DECODEKIT_LOAD_PLUGINS "
        "(or unset DECODEKIT_LOAD_PLUGINS) to enable them; or give --model and a --chain of installed samplers\n"
    )
    r = cli("generate", PROMPT, "-m", MODEL, "--top-p", "0.9", DECODEKIT_DISABLE_PLUGINS="decodekit-top-p")
    assert r.returncode == 2 and r.stderr == (
        "decodekit: error: installed but disabled: the chain 'top_p(p=0.9)' needs top_p. DECODEKIT_DISABLE_PLUGINS "
        "lists decodekit-top-p; remove it from DECODEKIT_DISABLE_PLUGINS to enable it; or give a --chain of installed "
        "samplers\n"  # --model is given: only the chain to change (it said "give --model and a --chain")
    )
    both = {"DECODEKIT_LOAD_PLUGINS": "decodekit-top-p", "DECODEKIT_DISABLE_PLUGINS": "decodekit-top-p"}
    r = cli("generate", PROMPT, "-m", MODEL, "--top-p", "0.9", **both)
    assert r.returncode == 2 and "needs top_p. DECODEKIT_DISABLE_PLUGINS lists decodekit-top-p; remove" in r.stderr
    r = cli("generate", PROMPT, "-m", MODEL, "--cache", "window", "--chain", "sample", DECODEKIT_LOAD_PLUGINS="")
    assert r.returncode == 2 and r.stderr == (
        "decodekit: error: --cache 'window': cache backend 'window' is installed but disabled: "
        f"{load} decodekit-cache-window; add it to DECODEKIT_LOAD_PLUGINS (or unset DECODEKIT_LOAD_PLUGINS) to enable "
        "it; allowed: none\n"
    )
    listed = ok_json(cli("plugins", "--json", DECODEKIT_DISABLE_PLUGINS="decodekit-beam,decodekit-top-p"))
    assert listed["disabled"] == [
        {
            "distribution": d,
            "version": "0.1.0",
            "enable": f"DECODEKIT_DISABLE_PLUGINS lists {d}; remove it from DECODEKIT_DISABLE_PLUGINS to enable it",
        }
        for d in ("decodekit-beam", "decodekit-top-p")
    ]
    assert "decodekit-top-p" not in [p["distribution"] for p in listed["plugins"]]
    table = cli("plugins", DECODEKIT_DISABLE_PLUGINS="decodekit-top-p").stdout
    assert "Installed but disabled" in table and "remove it from DECODEKIT_DISABLE_PLUGINS to enable it" in table
    assert "Installed but disabled" not in cli("plugins").stdout
    # Some left out, some not installed: each said, with what to do.
    uninstall(monkeypatch, "decodekit-shakespeare")
    r = cli("generate", PROMPT, DECODEKIT_LOAD_PLUGINS="", DECODEKIT_EXTRA_PLUGINS="")
    assert r.stderr.startswith("decodekit: error: not installed or disabled: the default model 'tiny-shakespeare'")
    assert (
        f"Install: pip install decodekit-shakespeare (from a checkout: pip install {TESTS.parent}/plugins/"
        f"decodekit-shakespeare); {load} decodekit-temperature, decodekit-top-p; add them to" in r.stderr
    )


def test_explain_takes_the_cache_and_picks_what_generate_picks() -> None:
    args = ["--chain", CHAIN, "--seed", "4", "-m", MODEL]
    runs = cli_many(
        *(["explain", PROMPT, *args, "--steps", "6", "--json", "--cache", c] for c in ("none", "gqa")),
        generate_args("--chain", CHAIN, "--seed", "4", "--max-new-tokens", "6", "--cache", "gqa"),
        ["explain", PROMPT, *args, "--cache", "paged"],
    )
    none, gqa = (ok_json(r) for r in runs[:2])
    assert none["cache"] == "none" and gqa["cache"] == "gqa"
    assert [s["token"] for s in gqa["steps"]] == ok_json(runs[2])["samples"][0]["tokens"]
    assert [s["token"] for s in none["steps"]] == [s["token"] for s in gqa["steps"]]
    for a, b in zip(none["steps"], gqa["steps"]):  # the same numbers, up to float rounding
        assert a["stages"][0]["probs"] == pytest.approx(b["stages"][0]["probs"], abs=1e-5)
    assert runs[3].returncode == 2 and "--cache 'paged'" in runs[3].stderr


def test_tiny_shakespeare_replaces_unknown_characters_on_request(shakespeare: Any) -> None:
    flags = ["--seed", "3", "--max-new-tokens", "6"]
    unknown, replaced, spaced = cli_many(
        ["generate", "ROMEO: ♥", *flags],
        ["generate", "ROMEO: ♥", *flags, "--replace-unknown", "--json"],
        ["generate", "ROMEO:  ", *flags, "--json"],  # what errors="replace" turns ♥ into: a space
    )
    [line] = unknown.stderr.splitlines()
    assert unknown.returncode == 2 and "'♥' (U+2665)" in line and "(on the command line: --replace-unknown)" in line
    assert ok_json(replaced)["samples"][0]["tokens"] == ok_json(spaced)["samples"][0]["tokens"]


def test_replace_unknown_shows_the_prompt_the_model_saw(shakespeare: Any) -> None:
    # The echo and --json showed "ROMEO: ♥" while the model was fed "ROMEO:  " (♥ replaced by a space).
    flags = ["--seed", "3", "--max-new-tokens", "6", "--replace-unknown"]
    echoed, document, explained = cli_many(
        ["generate", "ROMEO: ♥", *flags],
        ["generate", "ROMEO: ♥", *flags, "--json"],
        ["explain", "ROMEO: ♥", "--seed", "3", "--steps", "1", "--replace-unknown", "--json"],
    )
    assert echoed.returncode == 0, echoed.stderr
    text = ok_json(document)["samples"][0]["text"]
    assert echoed.stdout == "ROMEO:  " + text + "\n"
    assert ok_json(document)["prompt"] == "ROMEO:  "
    assert ok_json(explained)["prompt"] == "ROMEO:  "


class _NearTie(torch.nn.Module):
    """A float64 model whose two best logits, 1 and 1 - 1e-12, differ only in float64."""

    spec = dk.ModelSpec(n_layers=1, n_heads=1, n_kv_heads=1, head_dim=2, vocab_size=4, max_positions=16)

    def __init__(self) -> None:
        super().__init__()
        self.logits = torch.nn.Parameter(
            torch.tensor([-1.0, 1.0, 1 - 1e-12, -2.0], dtype=torch.float64), requires_grad=False
        )

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, cache: object = None) -> torch.Tensor:
        return self.logits.expand(*input_ids.shape, 4)


def test_explain_traces_a_float64_model_in_float64_as_the_step_runs() -> None:
    """explain traced `logits.float()`: the near tie became a tie, and top_k(1) showed 2 survivors while the
    step's own chain (float64, as `trace` keeps it) kept 1."""
    from decodekit_cli.explain import explain_steps

    [report] = explain_steps(_NearTie(), [0], dk.Chain.parse("top_k(1)"), steps=1, top=2, seed=0)
    assert report.token == 1
    assert [stage.survivors for stage in report.stages] == [4, 1]


@pytest.mark.parametrize("name", ["hf", "gpt2"])
def test_a_checkpoint_model_without_a_path_says_how_in_the_callers_words(name: str) -> None:
    """Before, `decodekit generate --model hf` answered in Python: "allowed: dk.load_model('hf:/path/...')"."""
    with pytest.raises(
        dk.ParameterError, match=rf"^{name}: no checkpoint path; allowed: dk.load_model\('{name}:/path/"
    ):
        dk.load_model(name)
    result = cli("generate", "ROMEO:", "--model", name)
    assert (result.returncode, result.stderr) == (
        2,
        f"decodekit: error: {name}: no checkpoint path; allowed: --model {name}:/path/to/local/checkpoint\n",
    )


def test_caches_strategies_and_models_list_their_section_of_samplers(capsys: pytest.CaptureFixture[str]) -> None:
    """`decodekit caches` (a newcomer's first guess for the cache backends), `strategies` and `models`: each lists its
    section of `decodekit samplers`, parameters included, and checks its names as `--cache` and `--strategy` do.
    Before: "No such command 'caches'"."""
    from decodekit_cli import main

    assert main(["samplers", "--json"]) == 0
    every = json.loads(capsys.readouterr().out)
    for command, key in (("caches", "cache_backends"), ("strategies", "strategies"), ("models", "models")):
        assert main([command, "--json"]) == 0
        assert json.loads(capsys.readouterr().out) == {key: every[key]}
    assert main(["caches"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("Cache backends\nnone\n  No cache: recompute the whole context every step\ndense  ")
    assert "\nwindow  decodekit-cache-window " in text and "\n    size  " in text and "Samplers" not in text
    assert main(["caches", "window"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("Cache backends\nwindow  ") and "\nnone" not in text and "\ndense" not in text
    assert main(["caches", "none", "dense"]) == 0
    assert [line for line in capsys.readouterr().out.splitlines() if not line.startswith(" ")] == [
        "Cache backends",
        "none",
        "dense  decodekit-cache-dense 0.1.0",
    ]
    assert main(["strategies", "beam"]) == 0
    assert capsys.readouterr().out.startswith("Decode strategies\nbeam  decodekit-beam 0.1.0\n")
    assert main(["caches", "windw"]) == 2
    [err] = capsys.readouterr().err.splitlines()
    assert err.startswith("decodekit: error: unknown cache backend 'windw'; installed: dense, gqa, ")
    assert "; also accepted: none; did you mean 'window'?" in err
    assert main(["strategies", "top_k"]) == 2  # a sampler is no strategy, and is said to be a sampler
    assert "unknown strategy 'top_k'; installed: beam, " in (err := capsys.readouterr().err)
    assert err.endswith("; 'top_k' is a sampler, not a strategy\n")


def test_the_cache_group_points_to_the_cache_listing(capsys: pytest.CaptureFixture[str]) -> None:
    """`decodekit cache` (the calibration tools) sits one letter from `decodekit caches` (the listing): its help and
    the top-level help say where the backends are listed. Before: "KV-cache tools: calibrate a model's attention
    windows." only."""
    from decodekit_cli import main

    assert main(["cache"]) == 2
    captured = capsys.readouterr()
    assert "(decodekit caches lists the backends)" in " ".join((captured.out + captured.err).split())
    assert main(["--help"]) == 0
    assert "(decodekit caches lists the backends)" in " ".join(capsys.readouterr().out.replace("│", " ").split())


def test_json_listings_hold_the_cache_backend_none_the_text_listings_show(capsys: pytest.CaptureFixture[str]) -> None:
    """`--json` lists what the text listing shows: the cache backend `none` (which no plugin registers) first, named
    or not. Before: `samplers --json` and `caches --json` left it out, and `caches --json none` listed nothing."""
    from decodekit_cli import main

    none = {
        "name": "none",
        "description": "No cache: recompute the whole context every step",
        "distribution": "",
        "version": "",
        "params": [],
    }
    for command in (["samplers"], ["caches"]):
        assert main([*command, "--json"]) == 0
        caches = json.loads(capsys.readouterr().out)["cache_backends"]
        assert caches[0] == none and [c["name"] for c in caches[1:3]] == ["dense", "gqa"]
        assert main([*command, "--json", "dense", "none"]) == 0
        assert [c["name"] for c in json.loads(capsys.readouterr().out)["cache_backends"]] == ["dense", "none"]
    assert main(["samplers", "--json", "top_k"]) == 0
    assert json.loads(capsys.readouterr().out)["cache_backends"] == []


def test_samplers_selects_the_cache_backend_none_it_lists(capsys: pytest.CaptureFixture[str]) -> None:
    """`decodekit samplers` lists the cache backend `none`; named, it is shown as `decodekit caches none` shows it.
    Before: "unknown name 'none'"."""
    from decodekit_cli import main

    assert main(["samplers", "none", "top_k"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("Samplers\ntop_k  ") and "\nCache backends\nnone\n  No cache: recompute" in text
    assert "\ndense" not in text
