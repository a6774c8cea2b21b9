"""Several sequences of a prompt in a batch job: a line's `n` (or `-n N` for every line) is `n` samples, or under beam
search its `n` best beams, in one record (`"n"`, `"samples"`), as vLLM's `n` per request and transformers'
`num_return_sequences` give them. Before, `-n` with `--input` was refused and a line's `n` was an unknown field.

Each sample is checked against `dk.generate` on the same model with the seed the record names, each beam against
`decodekit generate PROMPT -n N --json`, and a record against itself decoded in batches of other sizes."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import cli_testplugin
import pytest
from cli_runner import run_cli

import decodekit as dk
from decodekit.context import mix_seed, row_seeds

MODEL = cli_testplugin.MODEL_NAME
FLAGS = ["-m", MODEL, "--max-new-tokens", "5", "--ignore-eos", "--seed", "3"]
CHAIN = "temperature(0.9) | top_k(40)"
LINES: list[dict[str, Any]] = [
    {"prompt": "ROMEO"},
    {"prompt": "JULIET", "n": 3},
    {"prompt": "KING", "n": 2, "max_new_tokens": 3},
    {"prompt": "QUEEN", "n": 1},
]


def _cli(*args: str) -> Any:
    env = dict(os.environ, DECODEKIT_EXTRA_PLUGINS="cli_testplugin")
    env.pop("DECODEKIT_LOAD_PLUGINS", None)
    return run_cli(list(args), env, fresh_plugins=True)


def _batch(tmp_path: Path, lines: list[dict[str, Any]], *extra: str, name: str = "out") -> list[dict[str, Any]]:
    source, output = tmp_path / "in.jsonl", tmp_path / f"{name}.jsonl"
    source.write_text("".join(json.dumps(line) + "\n" for line in lines))
    result = _cli("generate", *FLAGS, "--chain", CHAIN, "--input", str(source), "--output", str(output), *extra)
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in output.read_text().splitlines()]


def _alone(prompt: str, seed: int | list[int], copies: int, max_new_tokens: int) -> list[list[int]]:
    model = cli_testplugin.load_model()
    ids = model.tokenizer.encode(prompt)
    out = dk.generate(model, [ids] * copies, chain=CHAIN, max_new_tokens=max_new_tokens, seed=seed)
    return [list(map(int, tokens)) for tokens in out.tokens]


def test_a_lines_n_samples_are_the_prompts_rows_each_reproducible_from_its_seed(tmp_path: Path) -> None:
    records = _batch(tmp_path, LINES)
    assert [r.get("n") for r in records] == [None, 3, 2, None]  # one sequence: the record as before, no "samples"
    assert "samples" not in records[0] and "samples" not in records[3]
    for record in records[1:3]:
        samples, seed, length = record["samples"], record["seed"], record["max_new_tokens"]
        assert len(samples) == record["n"] and length == LINES[record["line"] - 1].get("max_new_tokens", 5)
        # sample 0's stream is the line's seed (its one sample without n), sample k's mix_seed(seed, k)
        assert [s["seed"] for s in samples] == [seed] + [mix_seed(seed, k) for k in range(1, len(samples))]
        assert [s["tokens"] for s in samples] == _alone(
            record["prompt"], row_seeds([seed], 1, record["n"]) or [], record["n"], length
        )
        for sample in samples:
            assert [sample["tokens"]] == _alone(record["prompt"], [sample["seed"]], 1, length)
            assert sample["finish_reason"] == "length" and sample["stopped_by"] is None
            assert sample["text"] == cli_testplugin.load_model().tokenizer.decode(sample["tokens"])
        assert len({tuple(s["tokens"]) for s in samples}) > 1  # samples differ
    assert [records[0]["tokens"]] == _alone("ROMEO", [records[0]["seed"]], 1, 5)


def test_samples_do_not_depend_on_the_batch_size_or_their_neighbours(tmp_path: Path) -> None:
    whole = _batch(tmp_path, LINES, "--batch-size", "8", name="eight")
    assert _batch(tmp_path, LINES, "--batch-size", "1", name="one") == whole  # a line of 3 alone in a batch of 1
    assert _batch(tmp_path, LINES, "--batch-size", "3", name="three") == whole
    alone = _batch(tmp_path, [{**LINES[1], "seed": whole[1]["seed"]}], name="alone")
    assert alone[0]["samples"] == whole[1]["samples"]


def test_dash_n_is_every_lines_count_and_a_lines_own_n_wins(tmp_path: Path) -> None:
    records = _batch(tmp_path, LINES, "-n", "2", "--logprobs", "1")
    assert [r.get("n") for r in records] == [2, 3, 2, None]
    for record in records[:3]:
        for sample in record["samples"]:
            assert [lp["token"] for lp in sample["logprobs"]] == sample["tokens"]  # each sample's own logprobs
        assert "logprobs" not in record and "text" not in record
    assert [lp["token"] for lp in records[3]["logprobs"]] == records[3]["tokens"]


def test_line_one_with_dash_n_samples_as_generate_with_dash_n(tmp_path: Path) -> None:
    """Line 1 with `--seed S -n N` gives what `decodekit generate PROMPT --seed S -n N` prints, as with one sample,
    and in both the first of `N` samples is the one sample. Before, `generate` seeded its copies from `S` itself
    (`mix_seed(S, k)`) and a batch job from line 1's seed (`mix_seed(mix_seed(S, 0), k)`): the same prompt, seed and
    `-n` sampled differently, and a line's first sample of `n` differed from its sample without `n`."""
    records = _batch(tmp_path, LINES[:1], "-n", "3")
    shown = _cli("generate", "ROMEO", *FLAGS, "--chain", CHAIN, "-n", "3", "--json")
    assert shown.returncode == 0, shown.stderr
    samples = json.loads(shown.stdout)["samples"]
    assert [s["tokens"] for s in samples] == [s["tokens"] for s in records[0]["samples"]]
    assert [s["seed"] for s in samples] == [s["seed"] for s in records[0]["samples"]]  # each sample names its own
    one = json.loads(_cli("generate", "ROMEO", *FLAGS, "--chain", CHAIN, "--json").stdout)["samples"]
    assert one[0]["tokens"] == _batch(tmp_path, LINES[:1], name="one")[0]["tokens"]  # as it was for -n 1
    assert one[0]["tokens"] == samples[0]["tokens"] and "seed" not in one[0]  # one sample: the document's seed


def test_under_beam_search_n_is_the_n_best_beams_of_one_search(tmp_path: Path) -> None:
    strategy = "beam(num_beams=3)"
    records = _batch(tmp_path, LINES[:3], "--strategy", strategy, "--chain", "greedy")
    assert [r.get("n") for r in records] == [None, 3, 2]
    for record in records[1:]:
        length = str(record["max_new_tokens"])
        shown = _cli(
            "generate", record["prompt"], *FLAGS, "--chain", "greedy", "--strategy", strategy,
            "-n", str(record["n"]), "--max-new-tokens", length, "--json",
        )  # fmt: skip
        beams = json.loads(shown.stdout)["samples"]
        assert [(s["tokens"], s["score"]) for s in record["samples"]] == [(b["tokens"], b["score"]) for b in beams]
        assert "seed" not in record["samples"][0]  # a beam has no stream of its own
    too_many = _batch(tmp_path, [{"prompt": "ROMEO", "n": 4}], "--strategy", strategy, "--on-error", "skip", name="x")
    assert too_many[0]["error"]["message"] == (
        "n=4: beam search returns at most its num_beams=3 best hypotheses (num_return_sequences <= num_beams); "
        "allowed: a line's \"n\" <= 3, or more beams: --strategy 'beam(num_beams=4)'"
    )


@pytest.mark.parametrize(
    ("n", "message"),
    [
        (
            0,
            "prompt line: n=0 is invalid: Input should be greater than or equal to 1; "
            "allowed: an integer n >= 1, or null",
        ),
        (
            True,
            "prompt line: n=true is invalid: Input should be a number, not a bool or a string; allowed: an integer",
        ),
        (2**62, "prompt line: n=4611686018427387904 is invalid: its 4,611,686,018,427,387,904 rows of 10 tokens"),
    ],
)
def test_a_bad_n_is_the_lines_error_before_anything_is_generated(tmp_path: Path, n: object, message: str) -> None:
    # n = 2**62 hung listing its rows before it was sized against the memory
    source, output = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    source.write_text(json.dumps({"prompt": "ROMEO", "n": n}) + "\n" + json.dumps({"prompt": "KING"}) + "\n")
    result = _cli("generate", *FLAGS, "--input", str(source), "--output", str(output))
    assert result.returncode == 2 and not output.exists()
    assert result.stderr.startswith(f"decodekit: error: --input in.jsonl line 1: {message}")


def test_resume_refuses_another_n_and_continues_the_same(tmp_path: Path) -> None:
    records = _batch(tmp_path, LINES, "-n", "2")
    output = tmp_path / "out.jsonl"
    kept = output.read_text().splitlines()[:2]
    output.write_text("\n".join(kept) + "\n")  # as a run stopped after two lines
    io = ["--input", str(tmp_path / "in.jsonl"), "--output", str(output), "--chain", CHAIN, "--resume"]
    other = _cli("generate", *FLAGS, *io, "-n", "3")
    assert other.returncode == 2 and "n=2 (this run: 3)" in other.stderr
    same = _cli("generate", *FLAGS, *io, "-n", "2")
    assert same.returncode == 0, same.stderr
    assert [json.loads(line) for line in output.read_text().splitlines()] == records


def test_resume_of_an_output_whose_first_samples_were_seeded_otherwise_is_refused(tmp_path: Path) -> None:
    """Settings format 3 drew a line's sample 0 from mix_seed(seed, 0), format 4 from the line's seed (as `generate
    -n`): `--resume` of a format-3 output holding a line of n samples would seed its lines two ways, so it is refused;
    one holding none, or beams (one search, no seeds of their own), continues. Before: continued, mixing the two."""
    for name, extra in (("out", []), ("beams", ["--strategy", "beam(num_beams=3)", "--chain", "greedy"])):
        _batch(tmp_path, LINES, *extra, name=name)
        output, settings = tmp_path / f"{name}.jsonl", tmp_path / f"{name}.jsonl.settings.json"
        whole = output.read_text().splitlines(keepends=True)
        older = {**json.loads(settings.read_text()), "format": 3}
        resume = ["generate", *FLAGS, "--chain", CHAIN, *extra, "--input", str(tmp_path / "in.jsonl")]
        resume += ["--output", str(output), "--resume"]
        for kept in (1, 2):  # line 1: one sequence; line 2: three
            settings.write_text(json.dumps(older))
            output.write_text("".join(whole[:kept]))
            run = _cli(*resume)
            if name == "out" and kept == 2:
                assert run.returncode == 2 and run.stderr == (
                    f"decodekit: error: --resume: {output} was written by an older decodekit (settings format 3 or "
                    "before), which drew a line's first sample from another seed, and its records hold lines of n "
                    "samples; this version draws it from the line's own seed (as generate -n), so the output would "
                    "mix the two; allowed: a new --output (or the decodekit that wrote it, to finish it)\n"
                )
                assert output.read_text() == "".join(whole[:2])  # nothing appended
            else:
                assert run.returncode == 0, run.stderr
                assert output.read_text() == "".join(whole) and json.loads(settings.read_text())["format"] == 4
