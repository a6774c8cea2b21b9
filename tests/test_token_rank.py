"""The rank of each generated token under the model (vLLM's and OpenAI's `rank`), as `PromptLogprobs.rank`:
1 for the most likely, one plus the tokens strictly more likely; in Python results, streamed events, the CLI's
`--logprobs N --json` and a batch job's records."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from cli_runner import run_cli

import decodekit as dk
from decodekit.results import token_logprobs
from decodekit.testing.tiny_lm import TinyLM

ARGS = ["-m", "tiny-shakespeare", "--chain", "temperature(1.5)", "--cache", "dense", "--ignore-eos"]


@pytest.fixture(scope="module")
def model() -> Any:
    return dk.load_model("tiny-shakespeare")


def test_ranks_by_hand_with_a_tie_sharing_the_best_rank() -> None:
    """Logits 3, 1, 2, 2, 0: token 0 is first, tokens 2 and 3 tie for second, token 1 fourth, token 4 fifth."""
    raw = torch.tensor([[3.0, 1.0, 2.0, 2.0, 0.0]]).repeat(5, 1)
    processed = raw.clone()
    processed[:, 0] = float("-inf")  # the chain's change does not move the model's rank
    scores = token_logprobs(raw, processed, torch.tensor([0, 1, 2, 3, 4]), 2)
    assert [s.rank for s in scores] == [1, 4, 2, 2, 5]


def test_every_token_ties_under_a_flat_model() -> None:
    """Every logit 0: each token is as likely as the best, so rank 1 (as `prompt_logprobs` ranks a tie)."""
    flat = TinyLM(64)
    with torch.no_grad():
        flat.head.weight.zero_()
    out = dk.generate(flat, [[1, 2]], chain="temperature(1.0)", max_new_tokens=4, seed=0, logprobs=0)
    assert out.logprobs is not None and [s.rank for s in out.logprobs[0]] == [1, 1, 1, 1]


def _counted(scores: Any) -> list[int]:
    """A second count: with the model's top list of the whole vocabulary, one plus the entries above the token's."""
    return [1 + sum(v > s.raw for _, v in s.raw_top) for s in scores]


def test_results_and_stream_rank_as_the_full_top_list_counts(model: Any) -> None:
    options: dict[str, Any] = {"chain": "temperature(1.5)", "max_new_tokens": 12, "seed": [1, 2], "cache": "dense"}
    out = dk.generate(model, ["ROMEO:", "KING"], logprobs=model.spec.vocab_size, **options)
    assert out.logprobs is not None
    for scores in out.logprobs:
        assert [s.rank for s in scores] == _counted(scores)
        assert max(s.rank for s in scores) > 1  # at 1.5 some tokens are not the model's first
    streamed = [ev.logprobs.rank for ev in dk.stream(model, ["ROMEO:", "KING"], logprobs=0, **options) if ev.logprobs]
    assert sorted(streamed) == sorted(s.rank for scores in out.logprobs for s in scores)


def _ranks(model: Any, seed: int | list[int]) -> list[int]:
    want = dk.generate(
        model, ["ROMEO:"], chain="temperature(1.5)", cache="dense", max_new_tokens=8, seed=seed, logprobs=1
    )
    assert want.logprobs is not None
    return [s.rank for s in want.logprobs[0]]


def test_cli_json_and_batch_records_carry_the_rank(model: Any, tmp_path: Path) -> None:
    run = run_cli(["generate", "ROMEO:", *ARGS, "--max-new-tokens", "8", "--seed", "3", "--logprobs", "1", "--json"])
    assert run.returncode == 0, run.stderr
    assert [r["rank"] for r in json.loads(run.stdout)["samples"][0]["logprobs"]] == _ranks(model, 3)
    prompts, out = tmp_path / "p.jsonl", tmp_path / "o.jsonl"
    prompts.write_text(json.dumps({"prompt": "ROMEO:", "seed": 3}) + "\n")
    run = run_cli(
        ["generate", "--input", str(prompts), "--output", str(out), *ARGS, "--max-new-tokens", "8", "--logprobs", "1"]
    )
    assert run.returncode == 0, run.stderr
    assert [r["rank"] for r in json.loads(out.read_text())["logprobs"]] == _ranks(model, [3])  # a line's seed: a list


def test_resume_keeps_records_written_before_the_rank(tmp_path: Path) -> None:
    """An output of an older decodekit (logprobs without `rank`) continues: its records stay as they are."""
    prompts, out = tmp_path / "p.jsonl", tmp_path / "o.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p, "seed": 1}) + "\n" for p in ["ROMEO:", "KING"]))
    base = [
        "generate",
        "--input",
        str(prompts),
        "--output",
        str(out),
        *ARGS,
        "--max-new-tokens",
        "4",
        "--logprobs",
        "1",
    ]
    assert run_cli(base).returncode == 0
    first = json.loads(out.read_text().splitlines()[0])
    for score in first["logprobs"]:
        del score["rank"]
    out.write_text(json.dumps(first) + "\n")  # the second line still to do
    run = run_cli([*base, "--resume"])
    assert run.returncode == 0 and "1 already there" in run.stderr, run.stderr
    old, new = (json.loads(line) for line in out.read_text().splitlines())
    assert old == first and all("rank" in score for score in new["logprobs"])
