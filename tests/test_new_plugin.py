"""`decodekit new-plugin`: one plugin of each kind, written, installed and tested as a user would."""

from __future__ import annotations

import importlib
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import doc_examples as dx
import pytest
import torch
from decodekit_cli import install_hints, main
from decodekit_cli.plugin_template import KINDS, files_for

import decodekit as dk


def test_each_kind_installs_and_passes_its_own_tests(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    dirs = [tmp_path / f"plugin-{kind}" for kind in KINDS]
    for kind, folder in zip(KINDS, dirs):
        assert main(["new-plugin", f"my_{kind}", "--kind", kind, "--dir", str(folder)]) == 0
        out, err = capsys.readouterr()
        # `pip install -e DIR` brought no pytest: the one on PATH ran, without decodekit ('No module named torch')
        assert err == "" and f"next: pip install -e '{folder}[test]' && pytest {folder}" in out
        assert 'test = ["decodekit[testing]"]' in (folder / "pyproject.toml").read_text()  # which brings pytest
    # One install for the four (their metadata carries the entry points), no dependencies: the
    # running environment has decodekit; a wheel build each, as `pip install -e` would do.
    site = tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target", str(site)]
    subprocess.run([*pip, *map(str, dirs)], check=True, capture_output=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DECODEKIT_", "PYTEST_"))}
    env["PYTHONPATH"] = str(site)
    env["OMP_NUM_THREADS"] = "1"  # one thread, as the suite runs: two spin on a busy 2-core machine (3x slower)
    # As in an environment of the core and the command line alone (docs/plugins.md): no cache plugin, so no
    # `dense`, dk.generate's default (the strategy's kit failed on it, the model's cache test was skipped).
    env["DECODEKIT_DISABLE_PLUGINS"] = "decodekit-cache-dense"
    tests = [str(d / "tests") for d in dirs]
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--import-mode=importlib", *tests],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    # The kit skips (never passes) the checks of optional hooks a stage does not implement; the
    # examples implement every hook their kit checks (the sampler its candidate fast path).
    assert " passed" in r.stdout and " failed" not in r.stdout and "error" not in r.stdout.lower()
    assert "skipped" not in r.stdout, r.stdout
    # Listed by this process once the installed folder is on its path, as after `pip install`.
    monkeypatch.delenv("DECODEKIT_LOAD_PLUGINS", raising=False)
    monkeypatch.syspath_prepend(str(site))
    try:
        dk.reload_plugins()
        assert main(["plugins"]) == 0
        listed = capsys.readouterr().out
        # The model's parameters from the command line, in the string form: the model it loads is the
        # one `dk.load_model` builds with them; an argument it has no use for is refused, not ignored.
        generate = ["generate", "Hi", "--chain", "sample", "--max-new-tokens", "6", "--seed", "0", "--json"]
        assert main([*generate, "--model", "my_model(n_layer=1, n_embd=32)"]) == 0
        record = json.loads(capsys.readouterr().out)
        model = dk.load_model("my_model", n_layer=1, n_embd=32)
        assert (
            record["samples"][0]["tokens"]
            == dk.generate(model, ["Hi"], max_new_tokens=6, chain="sample", seed=0).tokens[0]
        )
        assert (
            record["samples"][0]["tokens"]
            != dk.generate(dk.load_model("my_model"), ["Hi"], max_new_tokens=6, chain="sample", seed=0).tokens[0]
        )
        assert main([*generate, "--model", "my_model:n_layer=1"]) == 2
        assert "model my_model: argument 'n_layer=1' is invalid" in capsys.readouterr().err
        assert main([*generate, "--model", "my_model(n_layer=0)"]) == 2
        assert "model my_model: n_layer=0 is invalid" in capsys.readouterr().err
    finally:
        monkeypatch.undo()
        dk.reload_plugins()
    for kind in KINDS:
        assert f"decodekit-my-{kind}" in listed and f"my_{kind}" in listed


def test_bad_requests_fail_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "file").write_text("x")
    assert main(["new-plugin", "Soft-Cap", "--dir", str(tmp_path / "a")]) == 2
    assert main(["new-plugin", "softcap", "--kind", "tokenizer", "--dir", str(tmp_path / "b")]) == 2
    assert main(["new-plugin", "softcap", "--dir", str(tmp_path / "taken")]) == 2
    assert main(["new-plugin", "softcap", "--dir", str(tmp_path / "taken" / "file")]) == 2  # it said "not empty"
    # its implementation, plugin.py, overwrote the hook's module: a plugin that failed to load and its own tests
    assert main(["new-plugin", "plugin", "--dir", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 5 and all(line.startswith("decodekit: error: ") for line in err)
    assert "'Soft-Cap' is invalid" in err[0] and "'tokenizer'" in err[1] and "not empty" in err[2]
    assert err[3].endswith("file' is a file; allowed: a new or empty folder (--dir)"), err[3]
    assert err[4] == (
        "decodekit: error: new-plugin: NAME 'plugin' would name its implementation plugin.py, the hook's "
        "module; allowed: another name"
    )
    assert not any((tmp_path / d).exists() for d in "abc")


def test_a_name_in_use_is_refused_with_the_reason_unless_forced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`new-plugin top_k` once wrote decodekit-top-k, whose `pip install -e` replaced the real plugin."""
    (tmp_path / "decodekit_shadowed").mkdir()
    (tmp_path / "decodekit_shadowed" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    refused = {
        "top_k": ["sampler 'top_k' is registered by decodekit-top-k", "decodekit-top-k 0.1.0 is installed"],
        "gqa": ["cache backend 'gqa' is registered by decodekit-cache-gqa"],  # any category: a sampler named gqa
        "cache_dense": ["distribution decodekit-cache-dense 0.1.0 is installed, and pip install would replace it"],
        "shadowed": ["package decodekit_shadowed is importable already"],
    }
    for name in refused:
        assert main(["new-plugin", name, "--dir", str(tmp_path / name)]) == 2
    assert main(["new-plugin", "none", "--kind", "cache", "--dir", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == len(refused) + 1 and all(line.startswith("decodekit: error: new-plugin: NAME ") for line in err)
    for line, (name, reasons) in zip(err, refused.items()):
        assert f"NAME {name!r} is taken: " in line and line.endswith("(--force writes it anyway)")
        assert all(reason in line for reason in reasons), line
    assert "cache 'none' means no cache" in err[-1]
    assert not any((tmp_path / name).exists() for name in [*refused, "none"])
    assert main(["new-plugin", "top_k", "--dir", str(tmp_path / "forced"), "--force"]) == 0
    assert (tmp_path / "forced" / "src" / "decodekit_top_k" / "plugin.py").exists()


def test_a_model_plugin_says_to_install_the_reference_gpt_it_builds_on_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its pyproject needs decodekit-gpt, which pip finds on no index when decodekit came from a checkout."""
    monkeypatch.setattr(install_hints, "installed", lambda name: name != "decodekit-gpt")
    assert main(["new-plugin", "my_gpt", "--kind", "model", "--dir", str(tmp_path / "m")]) == 0
    out = capsys.readouterr().out.splitlines()
    gpt, folder = f"{install_hints.checkout()}/plugins/decodekit-gpt", tmp_path / "m"
    assert out[-1] == f"next: pip install {gpt} && pip install -e '{folder}[test]' && pytest {folder}"
    monkeypatch.setattr(install_hints, "installed", lambda name: True)
    assert main(["new-plugin", "my_gpt2", "--kind", "model", "--dir", str(tmp_path / "n")]) == 0
    assert (
        capsys.readouterr().out.splitlines()[-1] == f"next: pip install -e '{tmp_path}/n[test]' && pytest {tmp_path}/n"
    )


@pytest.mark.parametrize("kind", KINDS)
def test_the_generated_readme_installs_what_its_pyproject_needs_from_a_checkout_too(kind: str) -> None:
    """Its `pip install -e .` brought no pytest, and into an environment without decodekit failed where no index has
    it ('No matching distribution found for decodekit>=0.1'): it says to install the checkout's folders first."""
    files = files_for(kind, "thing")
    readme = files["README.md"]
    assert "pip install -e '.[test]'" in readme
    needs = re.findall(r'"(decodekit(?:-[a-z0-9-]+)?)>=', files["pyproject.toml"])
    folders = ["/path/to/decodekit", *(f"/path/to/decodekit/plugins/{n}" for n in needs if n != "decodekit")]
    assert f"`pip install {' '.join(folders)}`" in readme


def test_the_next_line_quotes_a_folder_with_a_space(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`pytest my plugin` ran pytest on two folders that do not exist; pip's half of the line was quoted."""
    monkeypatch.setattr(install_hints, "installed", lambda name: True)
    folder = tmp_path / "my plugin"
    assert main(["new-plugin", "my_top", "--dir", str(folder)]) == 0
    line = capsys.readouterr().out.splitlines()[-1].removeprefix("next: ")
    assert [shlex.split(step) for step in line.split(" && ")] == [
        ["pip", "install", "-e", f"{folder}[test]"],
        ["pytest", str(folder)],
    ]


def _softcap_sources() -> dict[str, tuple[dict[str, str], str, str]]:
    """{source: (its files, the module of its stage, the stage's class)}: the template's and docs/plugins.md's."""
    template = {p: t for p, t in files_for("sampler", "capped").items() if p.startswith("src/")}
    docs = {p.split("/", 1)[1]: t for p, t in dx.plugin_files().items() if p.startswith("decodekit-softcap/src/")}
    return {
        "template": (template, "decodekit_capped.capped", "Capped"),
        "docs": (docs, "decodekit_softcap.softcap", "Softcap"),
    }


@pytest.mark.parametrize("source", ["template", "docs"])
def test_a_softcap_samplers_cap_makes_no_nan_at_any_value_it_accepts(
    source: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    """`benchmarks/fuzz.py` (docs/reliability.md) found NaN made by a new-plugin sampler: its cap had no upper bound,
    and cap=2.87e177 (or inf) is inf in float32, where inf * tanh(logits / inf) = inf * 0 is NaN on every token.
    docs/plugins.md's softcap is the same sampler."""
    files, module, name = _softcap_sources()[source]
    for path, text in files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    # Imported modules outlive sys.path's restore: left in sys.modules, `decodekit new-plugin softcap` run in this
    # process later (test_cli_edges) finds decodekit_softcap "importable already".
    package = module.split(".")[0]
    request.addfinalizer(lambda: [sys.modules.pop(m) for m in list(sys.modules) if m.split(".")[0] == package])
    stage_class = getattr(importlib.import_module(module), name)
    for cap in (2.87e177, float("inf")):
        with pytest.raises(
            dk.ParameterError, match=rf"cap={re.escape(f'{cap:g}')} is invalid: .*; allowed: a number 0 < cap <="
        ):
            stage_class(cap=cap)
    largest = stage_class.params_model.model_json_schema()["properties"]["cap"]["maximum"]
    logits = torch.linspace(-60, 60, 13)[None]  # finite logits, one removed
    logits[0, 0] = float("-inf")
    ctx = dk.DecodeContext(tokens=torch.zeros(1, 1, dtype=torch.long))
    for cap in (largest, 1.0):
        exact = (torch.tanh(logits.double() / cap) * cap).where(logits > -torch.inf, -torch.inf)  # in float64
        for dtype in (torch.float16, torch.bfloat16, torch.float32):
            out = stage_class(cap=cap)(logits.to(dtype), ctx)
            torch.testing.assert_close(out.double(), exact.to(dtype).double(), rtol=1e-2, atol=1e-2)
