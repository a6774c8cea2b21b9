"""Several sequences of one prompt on the command line: `-n N` under beam search is its N best beams (not N copies
of the one deterministic beam), `--strategy 'beam(num_return_sequences=N)'` shows all N, a model's own
`num_return_sequences` is `-n`, in a batch job too (docs/cli.md; test_batch_samples.py: a line's own `n`).

The commands run in this process (`cli_runner.run_cli`) on `cli-test-gpt` (`tests/cli_testplugin.py`); each beam's
score is checked against the model's log-probabilities of its tokens, worked out here by teacher forcing."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import cli_testplugin
import pytest
import torch
from cli_runner import run_cli
from decodekit_cli import sampling_options

MODEL = cli_testplugin.MODEL_NAME
PROMPT = "ROMEO"
FLAGS = ["--chain", "greedy", "--max-new-tokens", "6", "--ignore-eos"]  # every beam runs 6 tokens: length 6


def _cli(*args: str) -> Any:
    env = dict(os.environ, DECODEKIT_EXTRA_PLUGINS="cli_testplugin")
    env.pop("DECODEKIT_LOAD_PLUGINS", None)
    return run_cli(list(args), env, fresh_plugins=True)


def _generate(*extra: str) -> Any:
    return _cli("generate", PROMPT, "-m", MODEL, *FLAGS, *extra)


def _score(tokens: list[int]) -> float:
    """A finished beam's score, length_penalty 1: the sum of its tokens' log-probabilities over its length."""
    model = cli_testplugin.load_model()
    ids = [*model.tokenizer.encode(PROMPT), *tokens]
    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([ids]))[0].float(), -1)
    start = len(ids) - len(tokens)
    return sum(float(logp[start - 1 + i, t]) for i, t in enumerate(tokens)) / len(tokens)


def test_n_under_beam_search_is_its_n_best_beams_with_their_scores() -> None:
    # it decoded 3 copies of the prompt: 3 identical beams, without a word
    result = _generate("--strategy", "beam(num_beams=4)", "-n", "3", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["strategy"] == "beam(num_beams=4, num_return_sequences=3)"
    samples = report["samples"]
    tokens = [s["tokens"] for s in samples]
    assert len(tokens) == 3 and len({tuple(t) for t in tokens}) == 3  # three different beams
    tokenizer = cli_testplugin.load_model().tokenizer
    for sample in samples:
        assert sample["score"] == pytest.approx(_score(sample["tokens"]), abs=1e-4)
        assert sample["text"] == tokenizer.decode(sample["tokens"]) and sample["finish_reason"] == "length"
    scores = [s["score"] for s in samples]
    assert scores == sorted(scores, reverse=True)  # best first, as beam_search returns them


def test_a_strategy_returning_several_beams_prints_each_as_a_sample() -> None:
    # it was refused: "the command line shows one hypothesis per sample, the best"
    strategy = "beam(num_beams=3, num_return_sequences=2)"
    shown = _generate("--strategy", strategy)
    report = json.loads(_generate("--strategy", strategy, "--json").stdout)
    assert shown.returncode == 0, shown.stderr
    texts = [s["text"] for s in report["samples"]]
    assert len(texts) == 2 and texts[0] != texts[1]
    assert shown.stdout == f"--- sample 1/2 ---\n{PROMPT}{texts[0]}\n--- sample 2/2 ---\n{PROMPT}{texts[1]}\n"


def test_a_search_finding_fewer_beams_than_asked_shows_those_and_says_so() -> None:
    """From the command-line fuzz: a chain that keeps one token a step leaves one hypothesis of the 2 asked; it printed
    an empty `--- sample 2/2 ---` header for the beam never returned, and said nothing."""
    flags = ["--strategy", "beam(num_beams=2)", "-n", "2", "--chain", "top_k(1) | greedy"]
    shown, report = _generate(*flags), json.loads(_generate(*flags, "--json").stdout)
    assert shown.returncode == 0, shown.stderr
    [sample] = report["samples"]
    assert shown.stdout == f"--- sample 1/2 ---\n{PROMPT}{sample['text']}\n"
    note = "decodekit: note: the beam search found 1 of the 2 hypotheses asked: the chain removes every other"
    assert shown.stderr.startswith(note)


def test_n_past_the_beams_or_beside_another_count_is_refused_naming_both() -> None:
    for strategy, n, message in [
        (
            "beam(num_beams=2)",
            "3",
            "-n 3: beam search returns at most its num_beams=2 best hypotheses (num_return_sequences <= num_beams); "
            "allowed: -n N with N <= 2, or more beams: --strategy 'beam(num_beams=3)'",
        ),
        (
            "beam(num_beams=4, num_return_sequences=2)",
            "3",
            "-n 3 and --strategy 'beam(num_beams=4, num_return_sequences=2)': two counts of the hypotheses beam "
            "search returns; allowed: one of them (-n N sets num_return_sequences=N)",
        ),
    ]:
        result = _generate("--strategy", strategy, "-n", n)
        assert (result.returncode, result.stdout, result.stderr) == (2, "", f"decodekit: error: {message}\n")
    same = json.loads(_generate("--strategy", "beam(num_beams=4, num_return_sequences=2)", "-n", "2", "--json").stdout)
    assert len(same["samples"]) == 2


def test_the_hint_of_more_beams_keeps_the_strategys_options_and_the_run_names_the_most_that_fit(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """It offered beam(num_beams=N), dropping the strategy's other options. Whether N beams fit is the run's own
    check, before any beam is built: a beam's row of 5 + 6 columns takes at least 2048 + 16 * 11 + 8 * 96 = 2992
    bytes, so 2**20 bytes hold 350 of them."""
    monkeypatch.setattr("decodekit.engine.device_memory", lambda device: 2**20)
    head = "beam search returns at most its num_beams=2 best hypotheses (num_return_sequences <= num_beams); allowed: "
    hint = _generate("--strategy", "beam(num_beams=2, length_penalty=0.5)", "-n", "351")
    assert hint.returncode == 2 and hint.stderr == (
        f"decodekit: error: -n 351: {head}-n N with N <= 2, or more beams: "
        "--strategy 'beam(num_beams=351, length_penalty=0.5)'\n"
    )
    taken = _generate("--strategy", "beam(num_beams=351, length_penalty=0.5)", "-n", "351")
    assert taken.returncode == 2 and "allowed: num_beams <= 350 here" in taken.stderr, taken.stderr
    io = _batch_files(tmp_path, '{"prompt": "ROMEO"}\n')
    job = _cli("generate", "-m", MODEL, *FLAGS, "--strategy", "beam(num_beams=2)", "-n", "100000000", *io)
    assert job.returncode == 2 and "or more beams: --strategy 'beam(num_beams=100000000)'" in job.stderr


def _batch_files(tmp_path: Path, lines: str) -> list[str]:
    """`--input` and `--output` of a batch job over `lines` (JSONL text), in `tmp_path`."""
    (tmp_path / "in.jsonl").write_text(lines)
    return ["--input", str(tmp_path / "in.jsonl"), "--output", str(tmp_path / "out.jsonl")]


def test_a_batch_job_writes_every_beam_a_strategy_returns(tmp_path: Path) -> None:
    # it was refused: "a batch job writes one record per line, of one sequence"
    strategy = "beam(num_beams=3, num_return_sequences=2)"
    io = _batch_files(tmp_path, '{"prompt": "ROMEO"}\n')
    result = _cli("generate", "-m", MODEL, *FLAGS, "--strategy", strategy, *io)
    assert result.returncode == 0, result.stderr
    [record] = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    beams = json.loads(_generate("--strategy", strategy, "--json").stdout)["samples"]
    assert record["n"] == 2 and [s["tokens"] for s in record["samples"]] == [b["tokens"] for b in beams]
    other = ["--output", str(tmp_path / "other.jsonl")]
    twice = _cli("generate", "-m", MODEL, *FLAGS, "--strategy", strategy, "-n", "3", *io[:2], *other)
    assert twice.returncode == 2 and twice.stderr == (
        f"decodekit: error: -n 3 and --strategy {strategy!r}: two counts of the hypotheses beam search returns; "
        "allowed: one of them (-n N sets num_return_sequences=N)\n"
    )


def _offering(monkeypatch: pytest.MonkeyPatch, offer: dict[str, Any]) -> None:
    """The test model with a `generation_defaults` offering `offer` (as an hf: checkpoint's generation config)."""
    from decodekit_cli.options import load_named_model as load  # what sampling_options imported

    def loaded(name: str) -> Any:
        model = load(name)
        model.generation_defaults = lambda length, keys: {k: v for k, v in offer.items() if k in keys}
        return model

    monkeypatch.setattr(sampling_options, "load_named_model", loaded)


def test_the_models_num_return_sequences_is_n_samples_or_beams(monkeypatch: pytest.MonkeyPatch) -> None:
    # it was never asked for: one sample where transformers' generate() returns 3
    _offering(monkeypatch, {"num_return_sequences": 3})
    result = _cli("generate", PROMPT, "-m", MODEL, "--max-new-tokens", "4", "--seed", "1", "--json")
    assert result.returncode == 0, result.stderr
    assert len(json.loads(result.stdout)["samples"]) == 3
    assert result.stderr == "decodekit: note: sampling with the model's own num_return_sequences 3; -n replaces it\n"
    given = _cli("generate", PROMPT, "-m", MODEL, "--max-new-tokens", "4", "-n", "1", "--json")
    assert len(json.loads(given.stdout)["samples"]) == 1 and given.stderr == ""

    _offering(monkeypatch, {"num_return_sequences": 2, "strategy": "beam(num_beams=3)"})
    beams = json.loads(_generate("--json").stdout)
    assert beams["strategy"] == "beam(num_beams=3, num_return_sequences=2)" and len(beams["samples"]) == 2
    own = json.loads(_generate("--strategy", "beam(num_beams=3, num_return_sequences=1)", "--json").stdout)
    assert len(own["samples"]) == 1  # --strategy's own count replaces the model's
    _offering(monkeypatch, {"num_return_sequences": 2})  # beam search given, not the model's: it said "sampling"
    searched = _generate("--strategy", "beam(num_beams=3)", "--json")
    assert len(json.loads(searched.stdout)["samples"]) == 2
    assert searched.stderr == "decodekit: note: decoding with the model's own num_return_sequences 2; -n replaces it\n"


def test_a_batch_job_writes_the_models_sequences_for_every_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # it wrote one sequence a line, with a warning that the model's count was not used
    _offering(monkeypatch, {"num_return_sequences": 3})
    io = _batch_files(tmp_path, '{"prompt": "ROMEO"}\n{"prompt": "KING", "n": 1}\n')
    result = _cli("generate", "-m", MODEL, *FLAGS, *io)
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [r.get("n") for r in records] == [3, None] and len(records[0]["samples"]) == 3
    assert "sampling with the model's own num_return_sequences 3; -n replaces it" in result.stderr


def test_a_batch_jobs_n_counts_when_every_other_option_is_given(tmp_path: Path) -> None:
    # with --chain, --strategy, --max-new-tokens and --stop all given the model's own settings were not asked for,
    # and -n went with them: one sequence a line, and "n": null in the settings
    io = _batch_files(tmp_path, '{"prompt": "ROMEO"}\n')
    given = ["--strategy", "sample", "--stop", "QQ", "-n", "2", "--seed", "0"]
    result = _cli("generate", "-m", MODEL, *FLAGS, *given, *io)
    assert result.returncode == 0, result.stderr
    record = json.loads((tmp_path / "out.jsonl").read_text())
    assert record["n"] == 2 and len(record["samples"]) == 2
    assert json.loads((tmp_path / "out.jsonl.settings.json").read_text())["n"] == 2


def test_the_models_count_past_the_beams_is_named_as_the_models_in_a_batch_job(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # it said "-n 2", which the user never gave
    _offering(monkeypatch, {"num_return_sequences": 2})
    io = _batch_files(tmp_path, '{"prompt": "ROMEO"}\n')
    result = _cli("generate", "-m", MODEL, *FLAGS, "--strategy", "beam(num_beams=1)", *io)
    assert result.returncode == 2
    assert result.stderr.endswith(
        "decodekit: error: the model's own num_return_sequences=2 (-n replaces it): beam search returns at most its "
        "num_beams=1 best hypotheses (num_return_sequences <= num_beams); allowed: -n N with N <= 1, or more beams: "
        "--strategy 'beam(num_beams=2)'\n"
    )


@pytest.mark.parametrize("json_output", [False, True])
def test_a_plugin_strategy_with_scored_sequences_but_no_count_shows_the_one_it_streams(json_output: bool) -> None:
    """Its result has beam search's fields (`scores`, `sequences`, ...) but its parameters no
    `num_return_sequences`: one sequence is shown, not its others after it (an IndexError ended the command)."""
    env = dict(os.environ, DECODEKIT_EXTRA_PLUGINS="cli_testplugin,cli_strategy_plugin")
    env.pop("DECODEKIT_LOAD_PLUGINS", None)
    args = ["generate", PROMPT, "-m", MODEL, *FLAGS, "--strategy", "two_scored", "--seed", "0"]
    result = run_cli(args + ["--json"] * json_output, env, fresh_plugins=True)
    assert result.returncode == 0, result.stderr
    if json_output:
        assert len(json.loads(result.stdout)["samples"]) == 1
    else:
        assert result.stdout.startswith(PROMPT) and "--- sample" not in result.stdout


def _n_best(strategy: str, n: str, *extra: str) -> Any:
    """`generate -n n --strategy strategy` with `n_best` (tests/cli_strategy_plugin.py: vLLM's best_of)."""
    env = dict(os.environ, DECODEKIT_EXTRA_PLUGINS="cli_testplugin,cli_strategy_plugin")
    env.pop("DECODEKIT_LOAD_PLUGINS", None)
    flags = ["--max-new-tokens", "6", "--ignore-eos", "--seed", "0"]
    return run_cli(
        ["generate", PROMPT, "-m", MODEL, *flags, "--strategy", strategy, "-n", n, *extra], env, fresh_plugins=True
    )


def test_n_under_a_plugin_strategy_with_its_own_count_is_its_count_within_its_own_limits() -> None:
    """A plugin strategy with `num_return_sequences` but no beams (vLLM's best_of): `-n 3` was refused in beam
    search's words ("beam search returns at most its num_beams=1 best hypotheses"), its default count taken for
    beams."""
    result = _n_best("n_best(best_of=4)", "3", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["strategy"] == "n_best(best_of=4, num_return_sequences=3)"
    samples = report["samples"]
    assert len(samples) == 3
    for sample in samples:  # each its cumulative log-probability under the model
        assert sample["score"] == pytest.approx(_score(sample["tokens"]) * len(sample["tokens"]), abs=1e-4)
    assert [s["score"] for s in samples] == sorted((s["score"] for s in samples), reverse=True)
    for strategy, n, message in [
        (
            "n_best(best_of=4, num_return_sequences=3)",
            "2",
            "-n 2 and --strategy 'n_best(best_of=4, num_return_sequences=3)': two counts of the sequences strategy "
            "'n_best' returns; allowed: one of them (-n N sets num_return_sequences=N)",
        ),
        ("n_best(best_of=4)", "5", "-n 5: "),
    ]:
        result = _n_best(strategy, n)
        assert (result.returncode, result.stdout) == (2, ""), result.stderr
        assert result.stderr.startswith(f"decodekit: error: {message}"), result.stderr
        assert "beam" not in result.stderr
