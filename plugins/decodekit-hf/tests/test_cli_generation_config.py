"""`decodekit generate --model hf:DIR` without --chain samples with the checkpoint's own chain (its
generation_config, `HFModel.generation_defaults`), says so in one stderr line and records it like any chain; the
sampling flags override it one option at a time, as transformers' `generate(**kwargs)` does; a checkpoint without a
generation config keeps decodekit's default chain."""

from __future__ import annotations

import copy
import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
from cli_runner import cli_captured as cli
from decodekit_cli.defaults import DEFAULT_CHAIN
from decodekit_cli.options import flags_over
from decodekit_hf import HFModel, generation_chain
from transformers import GenerationConfig

import decodekit as dk

EOS = 95
NEW = 10
OWN = dict(do_sample=True, temperature=0.7, top_p=0.9, repetition_penalty=1.2, eos_token_id=EOS)


def canonical(chain: str) -> str:
    return str(dk.Chain.parse(chain))


def save(tmp_path: Path, gpt2: Any, tokenizer: Any, config: GenerationConfig | None, name: str = "ckpt") -> Path:
    model = copy.deepcopy(gpt2)
    if config is not None:
        model.generation_config = config
    model.save_pretrained(tmp_path / name)
    tokenizer.save_pretrained(tmp_path / name)
    return tmp_path / name


@pytest.fixture
def own(tmp_path: Path, gpt2: Any, char_tokenizer: Any) -> Path:
    """A checkpoint whose generation config samples: temperature 0.7, top-p 0.9 (top-k 50 unset), penalty 1.2."""
    return save(tmp_path, gpt2, char_tokenizer, GenerationConfig(**OWN))


def generate(capsys: pytest.CaptureFixture[str], checkpoint: Path, *extra: str) -> tuple[dict[str, Any], str]:
    cmd = ["generate", "Hi", "--model", f"hf:{checkpoint}", "--max-new-tokens", str(NEW), "--seed", "3", "--json"]
    status, out, err = cli(capsys, *cmd, *extra)
    assert status == 0, err
    return json.loads(out), err


def test_generate_samples_with_the_checkpoints_chain_and_says_so(own: Path, capsys: pytest.CaptureFixture[str]) -> None:
    expected = "repetition_penalty(1.2) | temperature(0.7) | top_k(50) | top_p(0.9) | sample"
    report, err = generate(capsys, own)
    assert report["chain"] == canonical(expected)
    assert report["chain_spec"] == dk.Chain.parse(expected).to_spec()
    assert err.splitlines() == [
        f"decodekit: note: sampling with the model's own chain {expected!r}; --chain replaces it"
    ]
    model = dk.load_model(f"hf:{own}")
    ours = dk.generate(model, ["Hi"], chain=expected, max_new_tokens=NEW, seed=3, stop_tokens=model.stop_tokens)
    assert report["samples"][0]["tokens"] == ours.tokens[0]
    other = dk.generate(model, ["Hi"], chain=DEFAULT_CHAIN, max_new_tokens=NEW, seed=3, stop_tokens=model.stop_tokens)
    assert other.tokens[0] != ours.tokens[0]  # the chains give other text here: the test tells them apart


def test_a_checkpoint_without_a_generation_config_keeps_decodekits_default(
    tmp_path: Path, gpt2: Any, char_tokenizer: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoint = save(tmp_path, gpt2, char_tokenizer, None)
    assert (
        not (checkpoint / "generation_config.json").exists()
        or "do_sample" not in (checkpoint / "generation_config.json").read_text()
    )
    report, err = generate(capsys, checkpoint)
    assert report["chain"] == canonical(DEFAULT_CHAIN) and err == ""


def test_chain_replaces_the_checkpoints_chain_silently(own: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report, err = generate(capsys, own, "--chain", "top_k(3)")
    assert report["chain"] == canonical("top_k(3)") and err == ""


# (the checkpoint's generation config, the flags): each flag overrides one option, as generate(**kwargs) does.
OVERRIDES: list[tuple[dict[str, Any], dict[str, Any]]] = [
    (OWN, {"temperature": 1.3}),
    (OWN, {"top_k": 5, "top_p": 0.5}),
    (OWN, {"repetition_penalty": 1.5, "temperature": 0.2}),
    (OWN | {"repetition_penalty": 1.0}, {"repetition_penalty": 1.4}),  # absent from the chain: inserted
    (OWN | {"temperature": 1.0, "top_k": 0}, {"top_k": 7}),
    (OWN | {"temperature": 1.0}, {"temperature": 0.5}),
    (OWN | {"top_p": 1.0, "min_p": 0.1}, {"top_p": 0.8}),
    ({"do_sample": True, "top_k": 0, "top_p": 0.9, "min_p": 0.05, "no_repeat_ngram_size": 2}, {"temperature": 0.6}),
    ({"do_sample": False, "repetition_penalty": 1.3, "bad_words_ids": [[3]]}, {"repetition_penalty": 1.1}),
]
FLAG = {
    "temperature": "--temperature",
    "top_k": "--top-k",
    "top_p": "--top-p",
    "repetition_penalty": "--repetition-penalty",
}


@pytest.mark.parametrize(("config", "kwargs"), OVERRIDES)
def test_flags_override_the_checkpoints_chain_as_generate_kwargs_do(
    config: dict[str, Any], kwargs: dict[str, Any]
) -> None:
    """The chain the flags give over the checkpoint's equals the chain of transformers' config with the same
    keyword arguments over it (`_prepare_generation_config`: kwargs > the model's generation config > defaults)."""
    own_chain = generation_chain(GenerationConfig(**config))
    overridden = generation_chain(GenerationConfig(**(config | kwargs)))
    flags = {FLAG[name]: value for name, value in kwargs.items()}
    assert canonical(flags_over(own_chain, flags)) == canonical(overridden)


def test_a_flag_on_the_command_line_overrides_one_option(own: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report, err = generate(capsys, own, "--temperature", "1.3", "--top-k", "4")
    assert report["chain"] == canonical(generation_chain(GenerationConfig(**(OWN | {"temperature": 1.3, "top_k": 4}))))
    assert "set over it" in err and "--temperature, --top-k" in err


def test_a_flag_that_cannot_change_a_greedy_pick_is_said(
    tmp_path: Path, gpt2: Any, char_tokenizer: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    greedy = save(tmp_path, gpt2, char_tokenizer, GenerationConfig(do_sample=False, repetition_penalty=1.3))
    report, err = generate(capsys, greedy, "--temperature", "0.5")
    assert report["chain"] == canonical("repetition_penalty(1.3) | temperature(0.5) | greedy")
    _, warning = err.splitlines()
    assert warning.startswith("decodekit: warning: the model's own chain ends in greedy, whose pick --temperature")


def test_an_option_no_chain_expresses_is_one_error_line(
    tmp_path: Path, gpt2: Any, char_tokenizer: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    config = GenerationConfig(do_sample=True, penalty_alpha=0.6, top_k=4, eos_token_id=EOS)  # contrastive search
    checkpoint = save(tmp_path, gpt2, char_tokenizer, config)
    status, _, err = cli(capsys, "generate", "Hi", "--model", f"hf:{checkpoint}", "--max-new-tokens", "4")
    assert status == 2
    [line] = err.splitlines()
    assert line.startswith("decodekit: error: generation_chain: the generation config's penalty_alpha=0.6 cannot")
    status, _, err = cli(
        capsys, "generate", "Hi", "--model", f"hf:{checkpoint}", "--max-new-tokens", "4", "--chain", "greedy"
    )
    assert status == 0, err


def test_explain_traces_the_checkpoints_chain(own: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = cli(capsys, "explain", "Hi", "--model", f"hf:{own}", "--steps", "2", "--json")
    assert status == 0, err
    assert json.loads(out)["chain"] == canonical(OWN_CHAIN) and "model's own chain" in err


OWN_CHAIN = "repetition_penalty(1.2) | temperature(0.7) | top_k(50) | top_p(0.9) | sample"


def run_batch(
    capsys: pytest.CaptureFixture[str], checkpoint: Path, tmp_path: Path, *extra: str
) -> tuple[int, str, Path]:
    source, output = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    source.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in ["Hi", "ab"]))
    cmd = ["generate", "--model", f"hf:{checkpoint}", "--max-new-tokens", str(NEW), "--seed", "1"]
    status, _, err = cli(capsys, *cmd, "--input", str(source), "--output", str(output), *extra)
    return status, err, output


def test_batch_job_records_the_checkpoints_chain(own: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, err, output = run_batch(capsys, own, tmp_path)
    assert status == 0, err
    assert "model's own chain" in err
    settings = json.loads(output.with_name("out.jsonl.settings.json").read_text())
    assert settings["chain"] == canonical(OWN_CHAIN)
    records = [json.loads(line) for line in output.read_text().splitlines()]
    model = dk.load_model(f"hf:{own}")
    # Line n decodes as row n - 1 of one batch of the whole file, seeded by --seed (batch-invariant seeding).
    prompts = ["Hi", "ab"]
    expected = dk.generate(model, prompts, chain=OWN_CHAIN, max_new_tokens=NEW, seed=1, stop_tokens=model.stop_tokens)
    assert [r["tokens"] for r in records] == expected.tokens
    status, err, _ = run_batch(capsys, own, tmp_path, "--resume")  # the same chain: nothing left, all well
    assert status == 0, err


def test_resume_of_an_output_written_with_the_old_default_is_refused_clearly(
    own: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An output that a decodekit before this change wrote for this checkpoint recorded decodekit's default chain:
    --resume names the difference, and --chain with the recorded chain continues it."""
    status, err, output = run_batch(capsys, own, tmp_path, "--chain", DEFAULT_CHAIN)
    assert status == 0, err
    first, _ = output.read_text().splitlines()
    output.write_text(first + "\n")  # as if interrupted after one record
    status, err, _ = run_batch(capsys, own, tmp_path, "--resume")
    assert status == 2
    assert f"chain={canonical(DEFAULT_CHAIN)!r} (this run: {canonical(OWN_CHAIN)!r})" in err, err
    status, err, _ = run_batch(capsys, own, tmp_path, "--resume", "--chain", DEFAULT_CHAIN)
    assert status == 0, err
    assert len(output.read_text().splitlines()) == 2


def test_the_model_attribute_is_what_the_cli_reads(own: Path) -> None:
    model = dk.load_model(f"hf:{own}")
    assert isinstance(model, HFModel) and model.generation_defaults(None, ["chain"]) == {"chain": OWN_CHAIN}


def test_a_grammar_goes_first_in_the_checkpoints_chain(own: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report, err = generate(capsys, own, "--regex", "x[0-9]*")
    assert report["chain"] == canonical(f"regex(pattern='x[0-9]*') | {OWN_CHAIN}")
    assert "model's own chain" in err


@pytest.mark.parametrize(
    ("config", "strategy"),
    [
        (OWN | {"guidance_scale": 2.0}, "cfg(scale=2.0)"),
        ({"num_beams": 3, "repetition_penalty": 1.3, "eos_token_id": EOS}, "beam(num_beams=3"),
    ],
)
def test_the_command_line_decodes_as_generation_chains_advice(
    tmp_path: Path, gpt2: Any, char_tokenizer: Any, capsys: pytest.CaptureFixture[str], config: Any, strategy: str
) -> None:
    """generation_chain still refuses beams and guidance, spelling the strategy and the chain (the config's without
    that option) as a command line; the command line given no --strategy and --chain now picks exactly those."""
    checkpoint = save(tmp_path, gpt2, char_tokenizer, GenerationConfig(**config))
    with pytest.raises(dk.ParameterError) as refused:
        generation_chain(checkpoint)
    [advice] = re.findall(r"on the command line (--strategy '[^']*' --chain '[^']*')", str(refused.value))
    assert strategy in advice
    without = {k: v for k, v in config.items() if k not in ("guidance_scale", "num_beams")}
    assert f"--chain '{generation_chain(GenerationConfig(**without))}'" in advice
    base = ["generate", "Hi", "--model", f"hf:{checkpoint}", "--max-new-tokens", "4", "--seed", "0", "--json"]
    status, own, err = cli(capsys, *base)
    assert status == 0 and strategy in err, err
    status, advised, err = cli(capsys, *base, *shlex.split(advice))
    assert status == 0 and err == "", err
    for key in ("chain", "strategy"):
        assert json.loads(own)[key] == json.loads(advised)[key]
    assert [s["tokens"] for s in json.loads(own)["samples"]] == [s["tokens"] for s in json.loads(advised)["samples"]]
