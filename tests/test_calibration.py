"""γ and D_f: the fits recover hand-made laws, the profile of uniform attention is worked out by hand,
the rule's windows (per head, the layer's the longest), and the command line."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import cast

import pytest
import torch
from decodekit_cache_window.calibration import Calibration, attention_profile, calibrate, fit_layer
from decodekit_gpt.gpt import GPT, GPTConfig

import decodekit as dk

T, SINKS = 256, 4


def test_a_power_law_is_recovered_and_its_window_is_where_it_meets_one_over_t() -> None:
    d = torch.arange(T - SINKS, dtype=torch.float64).clamp(min=1)
    fit = fit_layer(0, (0.5 * d**-1.2)[None], T, SINKS, [])
    assert fit.law == "power" and fit.r2_power == pytest.approx(1.0)
    assert fit.gamma == pytest.approx(1.2) and fit.c_power == pytest.approx(0.5)
    assert fit.window == math.ceil((0.5 * T) ** (1 / 1.2))  # 0.5 · D^-1.2 = 1/256  ->  D = 57.01 -> 58
    assert fit.window == 58


def test_an_exponential_is_told_apart_and_sets_the_window() -> None:
    d = torch.arange(T - SINKS, dtype=torch.float64)
    fit = fit_layer(1, (0.2 * torch.exp(-d / 10))[None], T, SINKS, [])
    assert fit.law == "exponential" and fit.r2_exp == pytest.approx(1.0) and fit.r2_power < 0.95
    assert fit.decay == pytest.approx(10.0)
    assert fit.window == math.ceil(10 * math.log(0.2 * T))  # 0.2 · exp(-D/10) = 1/256  ->  D = 39.4 -> 40


def test_a_window_never_exceeds_the_context() -> None:
    d = torch.arange(T - SINKS, dtype=torch.float64).clamp(min=1)
    assert fit_layer(0, (0.9 * d**-0.1)[None], T, SINKS, []).window == T - SINKS


def test_the_layer_window_is_its_longest_head_not_the_mean_of_its_heads() -> None:
    """A short head (0.5·d^-1.2: D = 57.01 -> 58) beside a long one (0.3·d^-1: D = 0.3·256 = 76.8 -> 77)."""
    d = torch.arange(T - SINKS, dtype=torch.float64).clamp(min=1)
    fit = fit_layer(0, torch.stack([0.5 * d**-1.2, 0.3 / d]), T, SINKS, [])
    assert [h.window for h in fit.heads] == [58, 77] and fit.window == 77
    assert [h.rate for h in fit.heads] == pytest.approx([1.2, 1.0])
    assert [h.c for h in fit.heads] == pytest.approx([0.5, 0.3])
    # The mean of the two is no power law, and its own crossing of 1/T falls short of the long head's.
    mean = (0.5 * d**-1.2 + 0.3 / d) / 2
    assert int((mean < 1 / T).nonzero()[0]) < 77


def test_every_head_is_fitted_with_its_layers_law() -> None:
    """Mean exponential: heads 0.2·exp(-d/10) and 0.2·exp(-d/20) give 10·ln(51.2) = 39.4 -> 40 and 78.7 -> 79."""
    d = torch.arange(T - SINKS, dtype=torch.float64)
    fit = fit_layer(0, torch.stack([0.2 * torch.exp(-d / 10), 0.2 * torch.exp(-d / 20)]), T, SINKS, [])
    assert fit.law == "exponential"
    assert [h.rate for h in fit.heads] == pytest.approx([10.0, 20.0])
    assert [h.r2 for h in fit.heads] == pytest.approx([1.0, 1.0])
    assert [h.window for h in fit.heads] == [40, 79] and fit.window == 79


def test_a_flat_head_makes_its_layer_keep_the_whole_context() -> None:
    d = torch.arange(T - SINKS, dtype=torch.float64).clamp(min=1)
    fit = fit_layer(0, torch.stack([0.5 * d**-1.2, torch.full_like(d, 1 / (T - SINKS))]), T, SINKS, [])
    assert [h.window for h in fit.heads] == [58, T - SINKS] and fit.window == T - SINKS


def _qkv(model: GPT, layer: int) -> torch.nn.Linear:
    """The layer's query-key-value projection: its first n_embd output rows are the queries."""
    return cast(torch.nn.Linear, model.get_submodule(f"h.{layer}.attn.c_attn"))


def uniform_gpt(n_layer: int = 2, block: int = 16) -> GPT:
    """A rotary GPT whose queries are zero: every layer attends uniformly over the causal context."""
    model = GPT(
        GPTConfig(vocab_size=11, block_size=block, n_layer=n_layer, n_head=2, n_kv_head=1, n_embd=8, position="rope")
    )
    with torch.no_grad():
        for layer in range(n_layer):
            _qkv(model, layer).weight[:8].zero_()
            _qkv(model, layer).bias[:8].zero_()
    return model.eval()


def test_uniform_attention_profile_by_hand() -> None:
    """Query i spreads 1/(i+1) over keys 0..i, so a(d) = mean over queries i >= d + sinks of 1/(i+1)."""
    model, sinks, n = uniform_gpt(), 2, 16
    a, sink = attention_profile(model, torch.randint(0, 11, (3, n)), sinks)
    assert a.shape == (2, 2, n - sinks)  # [layers, heads, distances]
    for d in (0, 1, 5, 13):
        want = sum(1 / (i + 1) for i in range(d + sinks, n)) / (n - d - sinks)
        assert a[:, :, d].flatten().tolist() == pytest.approx([want] * 4)
    want_sink = sum(1 / (i + 1) for i in range(n // 2, n)) / (n - n // 2)
    assert sink[0].tolist() == pytest.approx([want_sink, want_sink])


def test_the_profile_keeps_heads_apart() -> None:
    """Zero only head 0's queries: head 0 is uniform (the formula above), head 1 is not."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=11, block_size=16, n_layer=1, n_head=2, n_kv_head=1, n_embd=8, position="rope"))
    with torch.no_grad():
        _qkv(model, 0).weight[:4].zero_()  # head 0's query rows (head_dim 4)
        _qkv(model, 0).bias[:4].zero_()
        _qkv(model, 0).weight[4:8].mul_(20)  # head 1 attends sharply
    a, _ = attention_profile(model.eval(), torch.randint(0, 11, (3, 16)), 2)
    uniform = [sum(1 / (i + 1) for i in range(d + 2, 16)) / (16 - d - 2) for d in range(14)]
    assert a[0, 0].tolist() == pytest.approx(uniform)
    assert a[0, 1].tolist() != pytest.approx(uniform, abs=1e-3)


def test_calibrate_round_trips_through_json() -> None:
    model = uniform_gpt(block=32)
    result = calibrate(model, list(range(11)) * 30, sinks=2, max_windows=5, text="synthetic")
    assert result.windows == 5 and len(result.layers) == 2 and len(result.profile[0]) == 30
    again = Calibration.from_json(result.to_json())
    assert again == result and again.attention_windows == tuple(f.window for f in result.layers)
    assert [len(f.heads) for f in again.layers] == [2, 2]


def test_a_calibration_of_another_version_is_a_clear_error() -> None:
    old = {
        "context": 8,
        "sinks": 1,
        "windows": 1,
        "text": "",
        "profile": [[0.5]],
        "layers": [{"layer": 0, "gamma": 1.0}],
    }
    with pytest.raises(
        dk.ParameterError, match=r"calibration: layers\.0\.c_power: Field required; allowed: the JSON of"
    ):
        Calibration.from_json(json.dumps(old))


@pytest.mark.parametrize("max_windows", [0, -3])
def test_calibrate_refuses_fewer_than_one_window(max_windows: int) -> None:
    """Before: max_windows=0 died in torch.stack, and a negative count in torch.linspace (RuntimeError)."""
    with pytest.raises(dk.ParameterError) as info:
        calibrate(uniform_gpt(block=32), list(range(11)) * 30, sinks=2, max_windows=max_windows)
    assert str(info.value) == f"calibrate: max_windows={max_windows} is invalid; allowed: None (every window) or >= 1"


def test_calibrate_refuses_learned_positions() -> None:
    model = GPT(GPTConfig(vocab_size=11, block_size=16, n_layer=1, n_head=2, n_embd=8)).eval()
    with pytest.raises(dk.ParameterError, match="learned positions"):
        calibrate(model, list(range(11)) * 4)


def test_the_command_says_what_the_model_lacks(capsys: pytest.CaptureFixture[str]) -> None:
    """Before: 'calibration measures a rotary model with a tokenizer (...); this model is not one', for either."""
    from cli_runner import OWN_MODEL, main_with_model
    from cli_testplugin import load_model

    def untokenized(argument: object, params: object) -> object:
        model = load_model()
        model.tokenizer = None
        return model

    for loader, lacks in [
        (
            load_model,
            "its positions are not rotary (ModelSpec.rope_base and rope_frequencies are None)",
        ),  # the test GPT: learned positions
        (
            untokenized,
            "its positions are not rotary (ModelSpec.rope_base and rope_frequencies are None) and it has no tokenizer",
        ),
    ]:
        assert main_with_model(loader, "cache", "calibrate", "--model", OWN_MODEL) == 2
        assert f"--model {OWN_MODEL} is invalid for calibration: {lacks}; allowed: a rotary model with a tokenizer" in (
            capsys.readouterr().err
        )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--text", "/nonexistent.txt"], "--text /nonexistent.txt: No such file or directory; allowed: a readable"),
        (["--windows", "0"], "--windows 0 is invalid; allowed: an integer >= 1"),
        (["--windows", "-1"], "--windows -1 is invalid; allowed: an integer >= 1"),
        (["--sinks", "200"], "--sinks 200 is invalid for a context of 256; allowed: 0 <= sinks < 128"),
        (["--plot", "/nonexistent/a.png"], "--plot /nonexistent/a.png: folder /nonexistent does not exist"),
    ],
)
def test_the_command_checks_every_argument_before_the_run(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from decodekit_cli.app import run

    assert run(["cache", "calibrate", *args]) == 2
    assert message in capsys.readouterr().err


def test_plot_without_matplotlib_names_what_to_install(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It said `pip install 'decodekit[plot]'`: the core has no such extra, so pip installed nothing."""
    from decodekit_cli.app import run

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    assert run(["cache", "calibrate", "--plot", str(tmp_path / "a.png")]) == 2
    assert capsys.readouterr().err == "decodekit: error: --plot needs matplotlib: pip install matplotlib\n"


def test_a_text_that_is_not_utf8_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from decodekit_cli.app import run

    (tmp_path / "latin1.txt").write_bytes("To be, or not to be: caf\xe9".encode("latin-1") * 40)
    assert run(["cache", "calibrate", "--text", str(tmp_path / "latin1.txt")]) == 2
    assert f"--text {tmp_path / 'latin1.txt'}: not UTF-8 text (byte 0xe9 at offset 24)" in capsys.readouterr().err


def test_the_command_runs_on_the_text_its_packages_ship(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """No data outside the installed packages: the default text is decodekit-shakespeare's Hamlet."""
    import decodekit_shakespeare
    from decodekit_cli.app import run
    from decodekit_cli.calibrate_command import default_text

    monkeypatch.setenv("DECODEKIT_SHAKESPEARE_DATA", "/nonexistent")  # what the command once read
    assert default_text().parent == Path(decodekit_shakespeare.__file__).parent
    assert default_text().read_text(encoding="utf-8").startswith("HAMLET, PRINCE OF DENMARK")
    assert run(["cache", "calibrate", "--windows", "2", "--json"]) == 0
    result = Calibration.from_json(capsys.readouterr().out)
    assert result.text == "hamlet.txt" and result.windows == 2 and len(result.layers) == 4


def test_the_table_wraps_instead_of_cutting(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from decodekit_cli.app import run

    monkeypatch.setenv("COLUMNS", "60")
    assert run(["cache", "calibrate", "--windows", "1"]) == 0
    out = capsys.readouterr().out
    assert "…" not in out and max(len(line) for line in out.splitlines()) <= 60
    padded = [line for line in out.splitlines() if line != line.rstrip()]  # a pipe keeps rich's padding
    assert not padded, padded[:3]


FOLLOWED = (
    "--json > calibration.json; an hf: model reads it beside its weights, a model loader of your own passes its path "
    "as ModelSpec(calibration=...)"
)


def test_size_auto_says_where_a_loader_of_its_own_puts_the_calibration(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`decodekit cache calibrate --json`'s file reaches only the loaders that read a calibration.json beside the
    weights (hf:, tiny-shakespeare); a model of another loader was told only to run the command. Following what it
    is told now works: the command's JSON, its path in the ModelSpec, window(size="auto") decodes."""
    from decodekit_cli.app import run

    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=50, block_size=32, n_layer=2, n_head=2, n_embd=16, position="rope")).eval()
    ids = torch.randint(0, 50, (64,))
    model.calibration = tmp_path / "calibration.json"  # the loader of one's own: ModelSpec(calibration=its path)
    model.calibration.write_text(calibrate(model, ids).to_json())  # the JSON `cache calibrate --json` prints
    out = dk.generate(model, [[1, 2, 3]], chain="greedy", max_new_tokens=2, cache='window(size="auto")')
    assert out.tokens == dk.generate(model, [[1, 2, 3]], chain="greedy", max_new_tokens=2, cache="none").tokens
    monkeypatch.setenv("COLUMNS", "400")  # one line: the phrase is not wrapped apart
    assert run(["cache", "calibrate", "--help"]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "ModelSpec(calibration=" in said, said  # the command's help says it too


def test_size_auto_on_a_model_built_in_code_says_how_to_calibrate_it_in_python() -> None:
    """window(size="auto") on a model built in code pointed only to `decodekit cache calibrate --model NAME`, which
    needs a registered name; Python's refusal now names the Python entry point, and following it works."""
    from decodekit.param_types import json_words

    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=50, block_size=32, n_layer=2, n_head=2, n_embd=16, position="rope")).eval()
    with pytest.raises(dk.ParameterError) as err:
        dk.generate(model, [[1, 2, 3]], chain="greedy", max_new_tokens=2, cache='window(size="auto")')
    assert str(err.value).endswith(
        "or calibrate it (in its ModelSpec, attention_windows=decodekit_cache_window.calibration.calibrate(model, "
        "ids).attention_windows, ids at least 32 token ids of text; a registered model: decodekit cache calibrate "
        f"--model NAME {FOLLOWED})"
    )
    with json_words(), pytest.raises(dk.ParameterError) as err:  # the command line's models are registered
        dk.create_cache('window(size="auto")', dk.CacheSpec.for_model(model.spec, batch_size=1, capacity=8))
    assert str(err.value).endswith(f"or calibrate it (decodekit cache calibrate --model NAME {FOLLOWED})")
    model.attention_windows = calibrate(model, torch.randint(0, 50, (64,))).attention_windows  # GPT's spec field
    out = dk.generate(model, [[1, 2, 3]], chain="greedy", max_new_tokens=2, cache='window(size="auto")')
    assert out.tokens == dk.generate(model, [[1, 2, 3]], chain="greedy", max_new_tokens=2, cache="none").tokens
    learned = GPT(GPTConfig(vocab_size=50, block_size=32, n_layer=1, n_head=2, n_embd=16)).eval()
    with pytest.raises(dk.ParameterError) as err:  # calibrate would refuse it: not sent there
        dk.generate(learned, [[1, 2, 3]], chain="greedy", max_new_tokens=2, cache='window(size="auto")')
    assert str(err.value).endswith(
        "one per layer (only a rotary model calibrates, and this one states no rotary embedding: ModelSpec.rope_base)"
    )
