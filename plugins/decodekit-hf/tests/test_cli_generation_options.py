"""`decodekit generate --model hf:DIR` without --chain, --strategy or --max-new-tokens decodes with what the
checkpoint's generation config implies (`HFModel.generation_defaults`): beam
search as `model.generate()` runs it, the config's length; one stderr line says so, each flag replaces its option,
a batch job records what it used, and an option with no decodekit form is still one error line naming it."""

from __future__ import annotations

import copy
import json
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from cli_runner import batch_captured
from cli_runner import cli_captured as cli
from transformers import GenerationConfig

import decodekit as dk

EOS = 95
STOPS = [77, 13, 67, 58, EOS]  # ids the beams meet early, so hypotheses end at different lengths
BEAM = dict(num_beams=3, length_penalty=0.6, early_stopping=True, max_new_tokens=12, eos_token_id=STOPS)
BEAM_STRATEGY = "beam(num_beams=3, length_penalty=0.6, early_stopping=True)"
SAMPLING = dict(do_sample=True, temperature=0.7, top_k=20, eos_token_id=EOS)
SAMPLING_CHAIN = "temperature(0.7) | top_k(20) | sample"


def save(tmp_path: Path, hf: Any, tokenizer: Any, config: GenerationConfig, name: str = "ckpt") -> Path:
    model = copy.deepcopy(hf)
    model.generation_config = config
    model.save_pretrained(tmp_path / name)
    tokenizer.save_pretrained(tmp_path / name)
    return tmp_path / name


def generate(capsys: pytest.CaptureFixture[str], checkpoint: Path, *extra: str) -> tuple[dict[str, Any], str]:
    status, out, err = cli(capsys, "generate", "Hi", "--model", f"hf:{checkpoint}", "--seed", "3", "--json", *extra)
    assert status == 0, err
    return json.loads(out), err


@pytest.fixture
def beam(tmp_path: Path, build_gpt2: Any, char_tokenizer: Any) -> Path:
    return save(tmp_path, build_gpt2(seed=2), char_tokenizer, GenerationConfig(**BEAM), "beam")


@pytest.fixture
def seven(tmp_path: Path, gpt2: Any, char_tokenizer: Any) -> Path:
    """A sampling checkpoint that stops at 7 new tokens."""
    return save(tmp_path, gpt2, char_tokenizer, GenerationConfig(**SAMPLING, max_new_tokens=7), "seven")


def hf_generate(checkpoint: Path, prompt: str) -> list[int]:
    """`model.generate()` on the saved checkpoint with its own generation config: the new tokens up to the stop."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    hf = AutoModelForCausalLM.from_pretrained(str(checkpoint), local_files_only=True).eval()
    ids = torch.tensor([AutoTokenizer.from_pretrained(str(checkpoint)).encode(prompt)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        row = hf.generate(ids, attention_mask=torch.ones_like(ids))[0, ids.shape[1] :].tolist()
    stops = hf.generation_config.eos_token_id
    end = next((i for i, t in enumerate(row) if t in stops), len(row) - 1)
    return list(row[: end + 1])


def test_a_beam_checkpoint_decodes_as_generate_does_and_says_so(beam: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report, err = generate(capsys, beam)
    assert report["strategy"] == BEAM_STRATEGY and report["max_new_tokens"] == 12 and report["chain"] == "greedy"
    assert report["samples"][0]["tokens"] == hf_generate(beam, "Hi")
    assert err.splitlines() == [
        f"decodekit: note: decoding with the model's own chain 'greedy', strategy {BEAM_STRATEGY!r}, max_new_tokens "
        "12; --chain, --strategy, --max-new-tokens replace them"
    ]


def test_a_checkpoints_max_new_tokens_stops_at_it(seven: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report, err = generate(capsys, seven, "--ignore-eos")
    [sample] = report["samples"]
    assert len(sample["tokens"]) == 7 and sample["finish_reason"] == "length" and report["max_new_tokens"] == 7
    assert err.splitlines() == [
        f"decodekit: note: sampling with the model's own chain {SAMPLING_CHAIN!r}, max_new_tokens 7; --chain, "
        "--max-new-tokens replace them"
    ]
    model = dk.load_model(f"hf:{seven}")
    ours = dk.generate(model, ["Hi"], chain=SAMPLING_CHAIN, max_new_tokens=7, seed=3)
    assert sample["tokens"] == ours.tokens[0]


def test_a_checkpoints_max_length_counts_the_prompt(
    tmp_path: Path, gpt2: Any, char_tokenizer: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoint = save(tmp_path, gpt2, char_tokenizer, GenerationConfig(max_length=2 + 5, eos_token_id=EOS))
    report, err = generate(capsys, checkpoint, "--ignore-eos")  # "Hi": two tokens
    assert len(report["samples"][0]["tokens"]) == 5 and "max_new_tokens 5" in err


def test_each_flag_replaces_its_option(beam: Path, seven: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report, err = generate(capsys, seven, "--ignore-eos", "--max-new-tokens", "3")
    assert len(report["samples"][0]["tokens"]) == 3 and "max_new_tokens" not in err
    report, err = generate(capsys, beam, "--strategy", "sample")  # the checkpoint's chain (greedy) and length stay
    model = dk.load_model(f"hf:{beam}")
    greedy = dk.generate(model, ["Hi"], chain="greedy", max_new_tokens=12, stop_tokens=model.stop_tokens)
    assert report["strategy"] == "sample" and report["samples"][0]["tokens"] == greedy.tokens[0]
    assert greedy.tokens[0] != hf_generate(beam, "Hi")  # the checkpoint's beams decode otherwise
    assert "strategy" not in err and "max_new_tokens 12" in err
    flags = ["--strategy", "beam(num_beams=2)", "--chain", "greedy", "--max-new-tokens", "4"]
    report, err = generate(capsys, beam, *flags)
    assert report["strategy"] == "beam(num_beams=2)" and report["max_new_tokens"] == 4 and err == ""


def test_an_option_without_a_decodekit_form_is_still_one_error_line(
    tmp_path: Path, gpt2: Any, char_tokenizer: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoint = save(tmp_path, gpt2, char_tokenizer, GenerationConfig(num_beams=2, do_sample=True, eos_token_id=EOS))
    status, _, err = cli(capsys, "generate", "Hi", "--model", f"hf:{checkpoint}", "--max-new-tokens", "4")
    assert status == 2
    [line] = err.splitlines()
    assert line.startswith("decodekit: error: generation_options: the generation config's num_beams=2: beam sampling")
    args = ["--max-new-tokens", "4", "--strategy", "sample", "--chain", "greedy"]
    status, _, err = cli(capsys, "generate", "Hi", "--model", f"hf:{checkpoint}", *args)
    assert status == 0, err


def test_explain_traces_a_beam_checkpoints_chain(beam: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = cli(capsys, "explain", "Hi", "--model", f"hf:{beam}", "--steps", "2", "--json")
    assert status == 0, err
    assert json.loads(out)["chain"] == "greedy" and "strategy" not in err


def run_batch(
    capsys: pytest.CaptureFixture[str], checkpoint: Path, tmp_path: Path, *extra: str
) -> tuple[int, str, Path]:
    lines = [{"prompt": p} for p in ["Hi", "ab"]]
    return batch_captured(capsys, tmp_path, lines, "--model", f"hf:{checkpoint}", "--seed", "1", *extra)


def test_a_batch_job_decodes_with_and_records_the_checkpoints_settings(
    beam: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, err, output = run_batch(capsys, beam, tmp_path)
    assert status == 0, err
    assert f"strategy {BEAM_STRATEGY!r}, max_new_tokens 12" in err
    settings = json.loads(output.with_name("out.jsonl.settings.json").read_text())
    assert settings["strategy"] == BEAM_STRATEGY and settings["max_new_tokens"] == 12 and settings["chain"] == "greedy"
    records = [json.loads(line) for line in output.read_text().splitlines()]
    assert [r["tokens"] for r in records] == [hf_generate(beam, "Hi"), hf_generate(beam, "ab")]
    first, _ = output.read_text().splitlines()
    output.write_text(first + "\n")  # as if interrupted after one record
    status, err, _ = run_batch(capsys, beam, tmp_path, "--resume", "--max-new-tokens", "5")
    assert status == 2 and "max_new_tokens=12 (this run: 5)" in err
    status, err, _ = run_batch(capsys, beam, tmp_path, "--resume")
    assert status == 0, err
    assert len(output.read_text().splitlines()) == 2


def test_a_batch_job_gives_each_line_max_length_less_its_prompt(
    tmp_path: Path, gpt2: Any, char_tokenizer: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """max_length counts the prompt: each line gets what generate() gives that prompt alone (a line's own
    max_new_tokens still wins); the settings record it, so --resume with another length is refused."""
    checkpoint = save(tmp_path, gpt2, char_tokenizer, GenerationConfig(max_length=9, eos_token_id=EOS))
    source, output = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    lines = [{"prompt": "Hi"}, {"prompt": "abcd"}, {"prompt": "abc", "max_new_tokens": 2}, {"prompt": "123456789"}]
    source.write_text("".join(json.dumps(line) + "\n" for line in lines))
    cmd = ["generate", "--model", f"hf:{checkpoint}", "--ignore-eos", "--input", str(source), "--output", str(output)]
    status, _, err = cli(capsys, *cmd, "--on-error", "skip")
    assert status == 0, err
    assert "max_length 9 less each prompt's tokens" in err
    assert "line 4: the model's max_length=9 counts the prompt, and this prompt has 9 tokens" in err
    records = [json.loads(line) for line in output.read_text().splitlines()]
    assert [len(r["tokens"]) for r in records[:3]] == [9 - 2, 9 - 4, 2]
    assert [r["max_new_tokens"] for r in records[:3]] == [7, 5, 2] and "error" in records[3]
    settings_path = output.with_name("out.jsonl.settings.json")
    settings = json.loads(settings_path.read_text())
    assert settings["max_length"] == 9 and settings["max_new_tokens"] is None
    output.write_text(output.read_text().splitlines()[0] + "\n")  # as if interrupted after one record
    status, _, err = cli(capsys, *cmd, "--on-error", "skip", "--resume", "--max-new-tokens", "7")
    assert status == 2 and "max_new_tokens=not set (this run: 7); max_length=9 (this run: not set)" in err, err
    status, _, err = cli(capsys, *cmd, "--on-error", "skip", "--resume")
    assert status == 0, err
    assert [len(json.loads(r)["tokens"]) for r in output.read_text().splitlines()[:3]] == [7, 5, 2]
    # An output recorded before max_length was: every line got 100 tokens, which this run would not continue.
    old = {k: v for k, v in settings.items() if k != "max_length"} | {"max_new_tokens": 100}
    settings_path.write_text(json.dumps(old))
    status, _, err = cli(capsys, *cmd, "--on-error", "skip", "--resume")
    assert status == 2 and "max_new_tokens=100 (this run: not set); max_length=not set (this run: 9)" in err, err
    status, _, err = cli(capsys, *cmd, "--on-error", "skip", "--resume", "--max-new-tokens", "100")
    assert status == 0, err


MIN_EOS = [87, EOS]  # the third token greedy picks after "Hi"


def test_a_min_length_checkpoint_decodes_as_generate_does(
    tmp_path: Path, build_gpt2: Any, char_tokenizer: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """min_length counts the prompt, whose length the command line knows: the chain's minimum is min_length less
    the prompt, and the tokens are generate()'s (which would stop earlier without it)."""
    hf = build_gpt2(seed=2)
    early = save(tmp_path, hf, char_tokenizer, GenerationConfig(max_new_tokens=14, eos_token_id=MIN_EOS), "early")
    config = GenerationConfig(min_length=2 + 9, max_new_tokens=14, eos_token_id=MIN_EOS)
    checkpoint = save(tmp_path, hf, char_tokenizer, config)
    assert len(hf_generate(early, "Hi")) < 9  # the minimum changes what generate() gives
    report, err = generate(capsys, checkpoint)
    assert report["chain"] == str(dk.Chain.parse(f"min_new_tokens(9, {MIN_EOS}) | greedy")) and "(9, [87" in err
    assert report["samples"][0]["tokens"] == hf_generate(checkpoint, "Hi")
    status, out, err = cli(capsys, "explain", "Hi", "--model", f"hf:{checkpoint}", "--steps", "2", "--json")
    assert status == 0 and json.loads(out)["chain"] == report["chain"], err


def test_a_sampling_flag_over_beams_says_what_beam_search_does_with_it(
    beam: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Beam search ranks beams by their summed processed log-probabilities: a temperature last in the chain scales
    them all alike (the beams' tokens are the same at any temperature, as transformers' generate() ignores it), so
    --temperature alone is refused; --top-k drops candidates (its tokens are those of `top_k(1) | greedy`, not the
    checkpoint's), which the warning says, not that a greedy pick ignores it."""
    model = dk.load_model(f"hf:{beam}")
    beam_options: dict[str, Any] = dict(
        strategy="beam", num_beams=3, length_penalty=0.6, early_stopping=True, max_new_tokens=12
    )

    def decode(chain: str) -> dk.Generation:
        return dk.decode(model, ["Hi"], chain=chain, stop_tokens=model.stop_tokens, **beam_options)

    assert (
        decode("temperature(0.5) | greedy").tokens
        == decode("greedy").tokens
        == decode("temperature(3.0) | greedy").tokens
    )
    status, _, err = cli(capsys, "generate", "Hi", "--model", f"hf:{beam}", "--temperature", "0.5")
    assert status == 2 and err.splitlines()[-1].startswith("decodekit: error: --temperature 0.5: beam search ranks")
    report, err = generate(capsys, beam, "--top-k", "1")
    [warning] = [line for line in err.splitlines() if "warning" in line]
    assert "--top-k changes which it keeps" in warning and "whose pick" not in err
    assert report["samples"][0]["tokens"] == decode("top_k(1) | greedy").tokens[0] != decode("greedy").tokens[0]
    _, err = generate(capsys, beam, "--temperature", "0.5", "--strategy", "sample")
    assert "whose pick --temperature cannot change" in err


def test_a_checkpoints_stop_strings_stop_generate_and_a_batch_job(
    tmp_path: Path, build_gpt2: Any, char_tokenizer: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """generate() stops at the config's stop_strings (given the tokenizer): so does the command line without --stop,
    and a batch job records them; --stop replaces them."""
    hf = build_gpt2(seed=2)
    config = GenerationConfig(do_sample=False, max_new_tokens=8, stop_strings=["w"], eos_token_id=EOS)
    checkpoint = save(tmp_path, hf, char_tokenizer, config)
    ids = torch.tensor([char_tokenizer.encode("Hi")])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = hf.generate(
            ids, attention_mask=torch.ones_like(ids), generation_config=config, tokenizer=char_tokenizer
        )
    expected = theirs[0, ids.shape[1] :].tolist()
    assert len(expected) < 8  # the stop string ends it early
    report, err = generate(capsys, checkpoint)
    assert report["samples"][0]["tokens"] == expected and report["stop"] == ["w"]
    assert "stop strings ['w']" in err and "--stop replace" in err
    report, err = generate(capsys, checkpoint, "--stop", "GG")
    assert report["stop"] == ["GG"] and "stop strings" not in err
    status, err, output = run_batch(capsys, checkpoint, tmp_path)
    assert status == 0, err
    assert json.loads(output.with_name("out.jsonl.settings.json").read_text())["stop"] == ["w"]
    assert json.loads(output.read_text().splitlines()[0])["tokens"] == expected


def test_a_given_max_new_tokens_never_meets_the_checkpoints_max_length(
    tmp_path: Path, gpt2: Any, char_tokenizer: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """The model is asked only for the options not given: a prompt past the config's max_length is an error without
    --max-new-tokens, and no error with it (the checkpoint's chain still applies)."""
    checkpoint = save(
        tmp_path, gpt2, char_tokenizer, GenerationConfig(max_length=3, do_sample=True, top_k=4, eos_token_id=EOS)
    )
    status, _, err = cli(capsys, "generate", "Hello", "--model", f"hf:{checkpoint}")
    assert status == 2 and "max_length=3 counts the prompt, and the prompt has 5 tokens" in err
    args = ["--max-new-tokens", "2", "--ignore-eos", "--json"]
    status, out, err = cli(capsys, "generate", "Hello", "--model", f"hf:{checkpoint}", *args)
    assert status == 0, err
    report = json.loads(out)
    assert len(report["samples"][0]["tokens"]) == 2 and report["chain"] == "top_k(k=4) | sample", err


def hf_sequences(checkpoint: Path, prompt: str) -> list[list[int]]:
    """Every sequence `model.generate()` returns for `prompt` with the checkpoint's config, each up to its stop."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    hf = AutoModelForCausalLM.from_pretrained(str(checkpoint), local_files_only=True).eval()
    ids = torch.tensor([AutoTokenizer.from_pretrained(str(checkpoint)).encode(prompt)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rows = hf.generate(ids, attention_mask=torch.ones_like(ids))[:, ids.shape[1] :].tolist()
    stops = hf.generation_config.eos_token_id
    ends = [next((i for i, t in enumerate(row) if t in stops), len(row) - 1) for row in rows]
    return [row[: end + 1] for row, end in zip(rows, ends)]


def test_a_checkpoints_num_return_sequences_is_every_beam_or_sample(
    tmp_path: Path, build_gpt2: Any, gpt2: Any, char_tokenizer: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """generate() returns num_return_sequences per prompt: the beams, best first, or that many samples; the
    command line showed one (it never asked the checkpoint for the count)."""
    config = GenerationConfig(**BEAM, num_return_sequences=2)
    beams = save(tmp_path, build_gpt2(seed=2), char_tokenizer, config, "beams")
    report, err = generate(capsys, beams)
    assert report["strategy"] == f"{BEAM_STRATEGY[:-1]}, num_return_sequences=2)"
    assert [s["tokens"] for s in report["samples"]] == hf_sequences(beams, "Hi")
    assert "num_return_sequences 2; --chain, --strategy, --max-new-tokens, -n replace them" in err
    report, _ = generate(capsys, beams, "-n", "1")
    assert len(report["samples"]) == 1
    status, _, err = cli(capsys, "generate", "Hi", "--model", f"hf:{beams}", "-n", "4")
    assert status == 2 and "-n 4: beam search returns at most its num_beams=3 best hypotheses" in err

    sampling = save(tmp_path, gpt2, char_tokenizer, GenerationConfig(**SAMPLING, num_return_sequences=3), "three")
    report, err = generate(capsys, sampling, "--max-new-tokens", "5")
    flags = ["--max-new-tokens", "5", "--chain", SAMPLING_CHAIN, "-n", "3"]
    given = generate(capsys, sampling, *flags)[0]["samples"]
    assert [s["tokens"] for s in report["samples"]] == [s["tokens"] for s in given] and len(given) == 3
    assert "num_return_sequences 3" in err


def test_a_batch_job_writes_every_sequence_a_checkpoint_returns(
    tmp_path: Path, build_gpt2: Any, char_tokenizer: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    # it wrote the best beam alone, warning that the checkpoint's num_return_sequences=2 was not used
    config = GenerationConfig(**BEAM, num_return_sequences=2)
    beams = save(tmp_path, build_gpt2(seed=2), char_tokenizer, config, "beams")
    status, err, output = run_batch(capsys, beams, tmp_path)
    assert status == 0, err
    assert "num_return_sequences 2" in err  # the note naming what the checkpoint set
    records = [json.loads(line) for line in output.read_text().splitlines()]
    assert [[s["tokens"] for s in r["samples"]] for r in records] == [hf_sequences(beams, p) for p in ("Hi", "ab")]
