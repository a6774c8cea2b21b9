"""A batch job honours a checkpoint's `min_length` per line, as `generate()` of that line alone does: min_length
counts the prompt (transformers' MinLengthLogitsProcessor compares it with the row's whole width), so each line's
minimum is min_length less its prompt's tokens, and `min_new_tokens` beside it takes precedence."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from cli_runner import cli_captured as cli
from transformers import AutoModelForCausalLM, GenerationConfig

import decodekit as dk

EOS = [87, 95]  # 87: the third token greedy picks after "Hi"
PROMPTS = ["Hi", "Hi there", "Hi there, you", "ab", "Hi there, you all"]


def saved(folder: Path, hf: Any, tokenizer: Any, **config: Any) -> Path:
    hf.generation_config = GenerationConfig(min_length=2 + 9, max_new_tokens=14, eos_token_id=EOS, **config)
    hf.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture
def checkpoint(tmp_path: Path, build_gpt2: Any, char_tokenizer: Any) -> Path:
    return saved(tmp_path / "ckpt", build_gpt2(seed=2), char_tokenizer)


def alone(checkpoint: Path, tokenizer: Any, prompt: str, **config: Any) -> list[int]:
    """transformers' `generate()` of one prompt with the checkpoint's config (`config` set over it), to its EOS."""
    hf = AutoModelForCausalLM.from_pretrained(str(checkpoint), local_files_only=True).eval()
    ids = torch.tensor([tokenizer.encode(prompt)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        row = hf.generate(ids, attention_mask=torch.ones_like(ids), **config)[0, ids.shape[1] :].tolist()
    return next((row[: i + 1] for i, t in enumerate(row) if t in EOS), row)


def canonical(chain: str) -> str:
    return str(dk.Chain.parse(chain))


def batch(capsys: pytest.CaptureFixture[str], checkpoint: Path, *extra: str) -> tuple[int, str, list[dict[str, Any]]]:
    source, output = checkpoint.parent / "in.jsonl", checkpoint.parent / "out.jsonl"
    source.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in PROMPTS))
    cmd = [
        "generate",
        "--model",
        f"hf:{checkpoint}",
        "--seed",
        "0",
        "--input",
        str(source),
        "--output",
        str(output),
        *extra,
    ]
    status, _, err = cli(capsys, *cmd)
    lines = output.read_text().splitlines() if output.exists() else []
    return status, err, [json.loads(line) for line in lines]


def test_each_line_gets_min_length_less_its_prompt(
    checkpoint: Path, char_tokenizer: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    status, err, records = batch(capsys, checkpoint, "--batch-size", "5")
    assert status == 0, err
    assert [r["tokens"] for r in records] == [alone(checkpoint, char_tokenizer, p) for p in PROMPTS]
    assert len(alone(checkpoint, char_tokenizer, "Hi", min_length=0)) < 9  # without it generate() stops earlier
    # Each record's chain is its line's: min_length less its prompt, none where the prompt reaches it.
    assert [r["chain"] for r in records][:2] == [
        "min_new_tokens(9, [87, 95]) | greedy",
        "min_new_tokens(3, [87, 95]) | greedy",
    ]
    assert records[4]["chain"] == "greedy"
    settings = json.loads((checkpoint.parent / "out.jsonl.settings.json").read_text())
    assert settings["chain"] == canonical("min_new_tokens(11, [87, 95]) | greedy")  # an empty prompt's: min_length
    output = checkpoint.parent / "out.jsonl"
    output.write_text("".join(line + "\n" for line in output.read_text().splitlines()[:2]))  # as if interrupted
    status, err, resumed = batch(capsys, checkpoint, "--batch-size", "5", "--resume")
    assert status == 0 and resumed == records, err
    status, err, _ = batch(capsys, checkpoint, "--resume", "--chain", "greedy")
    assert (
        status == 2 and f"chain={canonical('min_new_tokens(11, [87, 95]) | greedy')!r} (this run: 'greedy')" in err
    ), err


def test_the_flags_are_set_over_each_lines_chain(
    checkpoint: Path, char_tokenizer: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    status, err, records = batch(capsys, checkpoint, "--repetition-penalty", "1.3")
    assert status == 0, err
    want = [alone(checkpoint, char_tokenizer, p, repetition_penalty=1.3) for p in PROMPTS]
    assert [r["tokens"] for r in records] == want


def test_min_new_tokens_beside_it_takes_precedence(
    tmp_path: Path, build_gpt2: Any, char_tokenizer: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoint = saved(tmp_path / "ckpt", build_gpt2(seed=2), char_tokenizer, min_new_tokens=4)
    status, err, records = batch(capsys, checkpoint)
    assert status == 0, err
    assert [r["tokens"] for r in records] == [alone(checkpoint, char_tokenizer, p) for p in PROMPTS]
    assert {r["chain"] for r in records} == {"min_new_tokens(4, [87, 95]) | greedy"}


def test_the_note_says_min_length_counts_each_lines_prompt(
    checkpoint: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It said "sampling with the model's own chain 'min_new_tokens(11, [87, 95]) | greedy'": the chain of an empty
    prompt, which no line decodes with (each line's minimum is min_length less its prompt's tokens)."""
    status, err, records = batch(capsys, checkpoint)
    assert status == 0, err
    [note] = [line for line in err.splitlines() if "model's own" in line]
    chain = "min_new_tokens(n=11 less the line's prompt tokens, stop_tokens=[87, 95]) | greedy"
    assert (
        note == f'decodekit: note: sampling with the model\'s own chain "{chain}" for each line, max_new_tokens 14; '
        "--chain, --max-new-tokens replace them"
    )
    assert [r["chain"] for r in records][1] == "min_new_tokens(3, [87, 95]) | greedy"  # "Hi there": 11 - 8
    (checkpoint.parent / "out.jsonl").unlink()
    status, err, _ = batch(capsys, checkpoint, "--temperature", "0.5")  # the flags set over it are said too
    assert status == 0 and "for each line, with --temperature set over it" in err, err
