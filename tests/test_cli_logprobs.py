"""`decodekit generate --logprobs N` and a batch job's `logprobs` / `prompt_logprobs` (job options and line fields),
checked against `dk.generate` on tiny-shakespeare with the same seeds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from cli_runner import run_cli
from decodekit_cli.logprob_records import TokenTexts, prompt_records, token_records

import decodekit as dk

CHAIN = "temperature(0.8) | top_k(20)"
ARGS = ["-m", "tiny-shakespeare", "--chain", CHAIN, "--cache", "dense", "--ignore-eos", "--max-new-tokens", "6"]


@pytest.fixture(scope="module")
def model() -> Any:
    return dk.load_model("tiny-shakespeare")


def library(model: Any, prompt: str, seed: int | list[int], logprobs: int | None, prompt_logprobs: int | None) -> Any:
    with torch.inference_mode():
        return dk.generate(
            model,
            [model.tokenizer.encode(prompt)],
            chain=CHAIN,
            cache="dense",
            max_new_tokens=6,
            seed=seed,
            logprobs=logprobs,
            prompt_logprobs=prompt_logprobs,
        )


def assert_close(got: object, want: object) -> None:
    """JSON records equal up to float rounding (the CLI decodes as many rows, the library one)."""
    if isinstance(want, float):
        assert got == pytest.approx(want, abs=1e-5)
    elif isinstance(want, (list, tuple)):
        assert isinstance(got, list) and len(got) == len(want)
        for g, w in zip(got, want):
            assert_close(g, w)
    elif isinstance(want, dict):
        assert isinstance(got, dict) and got.keys() == want.keys()
        for key in want:
            assert_close(got[key], want[key])
    else:
        assert got == want


def test_generate_json_has_each_tokens_logprobs_as_the_library_gives_them(model: Any) -> None:
    run = run_cli(["generate", "ROMEO:", *ARGS, "--seed", "3", "--logprobs", "2", "--json"])
    assert run.returncode == 0, run.stderr
    sample = json.loads(run.stdout)["samples"][0]
    want = library(model, "ROMEO:", 3, 2, None)
    assert sample["tokens"] == want.tokens[0]
    assert_close(sample["logprobs"], token_records(want.tokens[0], want.logprobs[0], TokenTexts(model.tokenizer)))
    first = sample["logprobs"][0]
    assert list(first) == [
        *("token", "text", "logprob", "rank", "top", "top_texts"),
        *("processed_logprob", "processed_top", "processed_top_texts"),
    ]
    assert len(first["top"]) == 2 and len(first["top"][0]) == 2
    assert first["processed_logprob"] > first["logprob"]  # top_k(20) at 0.8 sharpens the model's distribution
    run = run_cli(["generate", "ROMEO:", *ARGS, "--logprobs", "2"])
    assert run.returncode == 2 and "--logprobs 2: reported in the JSON document; add --json" in run.stderr


def _lines(path: Path, *lines: dict[str, object]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


LINES = [  # one batch of 8 rows at most: the lines asking for other values are decoded apart
    {"prompt": "ROMEO:", "seed": 1},
    {"prompt": "JULIET: Ah", "seed": 2, "logprobs": 0},
    {"prompt": "First Citizen:", "seed": 3, "prompt_logprobs": 3, "logprobs": 1},
    {"prompt": "KING RICHARD III:", "seed": 5, "prompt_logprobs": 3, "logprobs": 1},  # with line 3, left-padded
    {"prompt": "KING", "seed": 4},
]


def test_batch_records_carry_them_as_the_library_gives_them(model: Any, tmp_path: Path) -> None:
    prompts, out = _lines(tmp_path / "p.jsonl", *LINES), tmp_path / "o.jsonl"
    run = run_cli(["generate", "--input", str(prompts), "--output", str(out), *ARGS, "--logprobs", "2"])
    assert run.returncode == 0, run.stderr
    records = _records(out)
    for line, record in zip(LINES, records):
        n, scored = line.get("logprobs", 2), line.get("prompt_logprobs")
        want = library(model, str(line["prompt"]), [line["seed"]], n, scored)  # type: ignore[arg-type,list-item]
        assert record["tokens"] == want.tokens[0]
        texts = TokenTexts(model.tokenizer)
        assert_close(record["logprobs"], token_records(want.tokens[0], want.logprobs[0], texts))
        if scored is None:
            assert "prompt_logprobs" not in record
        else:
            scored_records = prompt_records(want.prompt_tokens[0], want.prompt_logprobs[0], texts)
            assert_close(record["prompt_logprobs"], scored_records)
            assert record["prompt_logprobs"][0] is None and len(record["prompt_logprobs"][1]["top"]) == 3
    assert [len(r["logprobs"][0]["top"]) for r in records] == [2, 0, 1, 1, 2]
    settings = json.loads((tmp_path / "o.jsonl.settings.json").read_text())
    assert (settings["logprobs"], settings["prompt_logprobs"]) == (2, None)


def test_scoring_alone_and_no_logprobs_asked(tmp_path: Path) -> None:
    """--max-new-tokens 0 --prompt-logprobs: vLLM's scoring; a job asking none has records without either key."""
    prompts, out, plain = _lines(tmp_path / "p.jsonl", *LINES[:2]), tmp_path / "o.jsonl", tmp_path / "plain.jsonl"
    args = ["-m", "tiny-shakespeare", "--max-new-tokens", "0", "--seed", "1"]
    run = run_cli(["generate", "--input", str(prompts), "--output", str(out), *args, "--prompt-logprobs", "1"])
    assert run.returncode == 0, run.stderr
    records = _records(out)
    assert [r["tokens"] for r in records] == [[], []] and [len(r["prompt_logprobs"]) for r in records] == [6, 10]
    assert "logprobs" not in records[0] and records[1]["logprobs"] == []  # line 2 asks for them
    run = run_cli(["generate", "--input", str(prompts), "--output", str(plain), *args])
    assert run.returncode == 0, run.stderr
    assert all("prompt_logprobs" not in r for r in _records(plain))


def test_resume_refuses_other_logprobs(tmp_path: Path) -> None:
    prompts, out = _lines(tmp_path / "p.jsonl", *LINES[:2]), tmp_path / "o.jsonl"
    base = ["generate", "--input", str(prompts), "--output", str(out), *ARGS]
    assert run_cli([*base, "--logprobs", "2"]).returncode == 0
    for extra, message in [
        (["--logprobs", "3"], "logprobs=2 (this run: 3)"),
        ([], "logprobs=2 (this run: not set)"),
        (["--logprobs", "2", "--prompt-logprobs", "1"], "prompt_logprobs=not set (this run: 1)"),
    ]:
        run = run_cli([*base, *extra, "--resume"])
        assert run.returncode == 2 and message in run.stderr and "Traceback" not in run.stderr, run.stderr
    run = run_cli([*base, "--logprobs", "2", "--resume"])
    assert run.returncode == 0 and "2 already there" in run.stderr, run.stderr


BAD: list[tuple[dict[str, object], str]] = [
    ({"prompt": "a", "logprobs": -1}, "logprobs=-1 is invalid"),
    ({"prompt": "b", "prompt_logprobs": 10**6}, "prompt_logprobs=1000000 is invalid"),
    ({"prompt": "c", "logprobs": "two"}, "logprobs"),
    ({"prompt": "d", "logprobs": 1.5}, "logprobs"),
]


def test_bad_values_are_each_lines_error_before_any_decoding(tmp_path: Path) -> None:
    prompts = _lines(tmp_path / "p.jsonl", LINES[0], *[line for line, _ in BAD])
    out = tmp_path / "o.jsonl"
    run = run_cli(["generate", "--input", str(prompts), "--output", str(out), *ARGS])
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    assert f"{len(BAD)} bad lines, nothing generated" in run.stderr and not out.exists()
    for (_, message), number in zip(BAD, range(2, 2 + len(BAD))):
        assert any(f" line {number}:" in e and message in e for e in run.stderr.splitlines()), (number, run.stderr)
    run = run_cli(["generate", "--input", str(prompts), "--output", str(out), *ARGS, "--on-error", "skip"])
    assert run.returncode == 0, run.stderr
    records = _records(out)
    assert "error" not in records[0] and [r["error"]["type"] for r in records[1:]] == ["ParameterError"] * len(BAD)
    assert all(message in r["error"]["message"] for (_, message), r in zip(BAD, records[1:]))


def test_each_logprob_gives_its_tokens_text_and_its_tops_texts(model: Any, tmp_path: Path) -> None:
    """vLLM's `decoded_token`: a record's logprobs give the chosen token's `text` and each top's, in the top's order,
    as `tokenizer.decode([id])`; the generated tokens' texts make the record's text (a character model), the prompt's
    its prompt. Before: ids alone."""
    prompts, out = _lines(tmp_path / "p.jsonl", *LINES), tmp_path / "o.jsonl"
    args = ["--input", str(prompts), "--output", str(out), *ARGS, "--logprobs", "3", "--prompt-logprobs", "2"]
    run = run_cli(["generate", *args])
    assert run.returncode == 0, run.stderr

    def decoded(top: list[list[Any]]) -> list[str]:
        return [model.tokenizer.decode([token]) for token, _ in top]

    for line, record in zip(LINES, _records(out)):
        for entry in record["logprobs"]:
            assert entry["text"] == model.tokenizer.decode([entry["token"]])
            assert entry["top_texts"] == decoded(entry["top"]) and len(entry["top"]) == line.get("logprobs", 3)
            assert entry["processed_top_texts"] == decoded(entry["processed_top"])
        assert "".join(entry["text"] for entry in record["logprobs"]) == record["text"]
        first, *scored = record["prompt_logprobs"]
        assert first is None and "".join(entry["text"] for entry in scored) == str(line["prompt"])[1:]
        assert all(entry["top_texts"] == decoded(entry["top"]) for entry in scored)


def _untexted(record: dict[str, Any]) -> dict[str, Any]:
    """A record as settings format 2 wrote it: logprobs without token texts."""

    def entry(e: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if e is None else {k: v for k, v in e.items() if k != "text" and not k.endswith("top_texts")}

    return {
        **record,
        **{key: [entry(e) for e in record[key]] for key in ("logprobs", "prompt_logprobs") if key in record},
    }


def test_resume_of_an_output_whose_logprobs_have_no_texts_is_refused(tmp_path: Path) -> None:
    """Settings format 2 wrote logprobs without texts: `--resume` would append records with them after records
    without, so it is refused, saying why and what to do; an output of format 2 with no logprobs in its records is
    continued as an uninterrupted run writes it. Before: the output was continued, mixing the two."""
    prompts, out = _lines(tmp_path / "p.jsonl", *LINES), tmp_path / "o.jsonl"
    settings = tmp_path / "o.jsonl.settings.json"
    base = ["generate", "--input", str(prompts), "--output", str(out), *ARGS]
    assert run_cli(base).returncode == 0  # lines 2, 3 and 4 ask for logprobs: their records hold some
    whole = out.read_text().splitlines(keepends=True)
    older = {**json.loads(settings.read_text()), "format": 2}

    settings.write_text(json.dumps(older))
    out.write_text(whole[0])  # line 1 asks for none: its record is what format 3 writes
    run = run_cli([*base, "--resume"])
    assert run.returncode == 0 and "1 already there" in run.stderr, run.stderr
    assert out.read_text() == "".join(whole)
    assert json.loads(settings.read_text())["format"] == 4

    settings.write_text(json.dumps(older))
    out.write_text(whole[0] + json.dumps(_untexted(json.loads(whole[1])), ensure_ascii=True) + "\n")
    run = run_cli([*base, "--resume"])
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    assert run.stderr == (
        f"decodekit: error: --resume: {out} was written by an older decodekit (settings format 2 or before), whose "
        "logprobs give token ids without their texts, and its records hold logprobs; this version's records give the "
        "texts too (text, top_texts), so the output would mix the two; allowed: a new --output (or the decodekit that "
        "wrote it, to finish it)\n"
    )
    assert len(out.read_text().splitlines()) == 2  # nothing appended
