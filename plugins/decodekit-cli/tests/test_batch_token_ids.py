"""A batch job's prompt as token ids: a line's `prompt_token_ids` (vLLM's name; OpenAI's completions take an array of
ids as the prompt) in place of `prompt`, for an evaluation that tokenizes itself. Before, a line had to give text:
`{"prompt_token_ids": [...]}` was an unknown parameter and `{"prompt": [...]}` not a string.

A line of ids is checked against `dk.generate` with the seed its record names, and against the line of the text
those ids encode (same seed, same options: the same record but its prompt fields) through `n`, logprobs, prompt
logprobs, a grammar, beam search and `--resume`. `cli-test-gpt` (`tests/cli_testplugin.py`): one id per character.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import cli_testplugin
import pytest
from cli_runner import OWN_MODEL, main_with_model, run_cli
from decodekit_cli.batch_input import InputLine, PromptLine, parse_line

import decodekit as dk

MODEL = cli_testplugin.MODEL_NAME
FLAGS = ["-m", MODEL, "--max-new-tokens", "5", "--ignore-eos", "--seed", "3"]
CHAIN = "temperature(0.9) | top_k(40)"
TOKENIZER = cli_testplugin.CharTokenizer()
PROMPT_FIELDS = {"prompt", "prompt_token_ids", "id", "line"}  # where a record of ids and one of text differ


def _cli(*args: str) -> Any:
    env = dict(os.environ, DECODEKIT_EXTRA_PLUGINS="cli_testplugin")
    env.pop("DECODEKIT_LOAD_PLUGINS", None)
    return run_cli(list(args), env, fresh_plugins=True)


def _batch(tmp_path: Path, lines: list[dict[str, Any]], *extra: str, name: str = "out") -> list[dict[str, Any]]:
    source, output = tmp_path / f"{name}.in.jsonl", tmp_path / f"{name}.jsonl"
    source.write_text("".join(json.dumps(line) + "\n" for line in lines))
    result = _cli("generate", *FLAGS, "--chain", CHAIN, "--input", str(source), "--output", str(output), *extra)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    return [json.loads(line) for line in output.read_text().splitlines()]


def _as_pairs(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each line twice, with its own seed: as text, then as the ids of that text."""
    pairs = []
    for i, line in enumerate(lines):
        seeded = {**line, "seed": 100 + i}
        ids = {k: v for k, v in seeded.items() if k != "prompt"}
        pairs += [seeded, {**ids, "prompt_token_ids": TOKENIZER.encode(line["prompt"])}]
    return pairs


def _but_prompt(record: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in record.items() if k not in PROMPT_FIELDS}


def test_a_line_of_token_ids_was_refused() -> None:
    """Before: "prompt line: unknown parameter prompt_token_ids=[53, 26, 22]; allowed parameters: prompt, ..."."""
    key, item = parse_line(InputLine(1, b'{"prompt_token_ids": [53, 26, 22]}'))
    assert key == 1 and isinstance(item, PromptLine)
    assert item.prompt is None and item.prompt_token_ids == [53, 26, 22]


def test_a_line_of_ids_decodes_as_dk_generate_and_its_record_echoes_them(tmp_path: Path) -> None:
    ids = [53, 26, 22]
    [record] = _batch(tmp_path, [{"prompt_token_ids": ids}])
    assert record["prompt"] is None and record["prompt_token_ids"] == ids  # the ids as given, no decoding of them
    model = cli_testplugin.load_model()
    alone = dk.generate(model, [ids], chain=CHAIN, max_new_tokens=5, seed=[record["seed"]])
    assert (
        record["tokens"] == list(map(int, alone.tokens[0]))
        and alone.text is not None
        and record["text"] == alone.text[0]
    )


def test_a_line_of_ids_gets_the_record_of_the_text_they_encode(tmp_path: Path) -> None:
    """n, logprobs, prompt logprobs (scoring exactly those ids), its own length and chain."""
    lines: list[dict[str, Any]] = [
        {"prompt": "ROMEO"},
        {"prompt": "JULIET", "n": 3, "logprobs": 2},
        {"prompt": "KING", "prompt_logprobs": 2, "max_new_tokens": 0},
        {"prompt": "QUEEN", "prompt_logprobs": 1, "logprobs": 1, "n": 2},
        {"prompt": "B", "chain": "top_k(3) | sample", "max_new_tokens": 2},
    ]
    records = _batch(tmp_path, _as_pairs(lines))
    assert [r.get("prompt_token_ids") for r in records[1::2]] == [TOKENIZER.encode(line["prompt"]) for line in lines]
    assert [_but_prompt(r) for r in records[::2]] == [_but_prompt(r) for r in records[1::2]]
    scored = records[5]["prompt_logprobs"]
    assert scored[0] is None and [s["token"] for s in scored[1:]] == TOKENIZER.encode("KING")[1:]


def test_beam_search_over_a_line_of_ids(tmp_path: Path) -> None:
    lines: list[dict[str, Any]] = [{"prompt": "ROMEO", "n": 2}, {"prompt": "JULIET"}]
    records = _batch(tmp_path, _as_pairs(lines), "--strategy", "beam(num_beams=3)")
    assert [_but_prompt(r) for r in records[::2]] == [_but_prompt(r) for r in records[1::2]]
    assert records[1]["n"] == 2 and len(records[1]["samples"]) == 2


def test_resume_continues_a_job_of_ids(tmp_path: Path) -> None:
    lines = [{"prompt_token_ids": TOKENIZER.encode(word)} for word in ("ROMEO", "JULIET", "KING")]
    whole = _batch(tmp_path, lines)
    source, output = tmp_path / "out.in.jsonl", tmp_path / "out.jsonl"
    output.write_text(output.read_text().splitlines(keepends=True)[0])  # as an interrupted run leaves it
    args = ["--chain", CHAIN, "--input", str(source), "--output", str(output), "--resume"]
    result = _cli("generate", *FLAGS, *args)
    assert result.returncode == 0, result.stderr
    assert [json.loads(line) for line in output.read_text().splitlines()] == whole


BAD_LINES: list[tuple[dict[str, Any], str]] = [
    (
        {"prompt": [53, 26, 22]},
        "prompt line: prompt=[53, 26, 22] is invalid: Input should be a valid string; allowed: a non-empty string "
        "(token ids: prompt_token_ids)",
    ),
    (
        {"prompt_token_ids": [5, -1]},
        "prompt line: prompt_token_ids.1=-1 is invalid; allowed: a token id, 0 <= id < the model's vocab_size=96",
    ),
    (
        {"prompt_token_ids": [96]},
        "prompt line: prompt_token_ids.0=96 is invalid; allowed: a token id, 0 <= id < the model's vocab_size=96",
    ),
    (
        {"prompt_token_ids": [5, 2.0]},
        "prompt line: prompt_token_ids.1=2.0 is invalid: Input should be an integer (no decimal point or exponent); "
        "allowed: prompt_token_ids: a non-empty list of token ids (integers 0 <= id < the model's vocab_size)",
    ),
    (
        {"prompt_token_ids": []},
        "prompt line: prompt_token_ids=[] is invalid: Input should have at least 1 item, not 0; allowed: a non-empty "
        "list of token ids (integers 0 <= id < the model's vocab_size)",
    ),
    (
        {"prompt": "ROMEO", "prompt_token_ids": [5]},
        "prompt line: prompt='ROMEO' and prompt_token_ids=[5] are both given; allowed: one of them",
    ),
    (
        {"seed": 1},
        "prompt line: missing required parameter prompt or prompt_token_ids; allowed: a 'prompt' (text) or a "
        "'prompt_token_ids' (a list of token ids), one of them",
    ),
    (
        {"prompt_token_ids": [5] * 200},  # the context check, as for text: cli-test-gpt has 128 positions
        "prompt of 200 tokens + max_new_tokens=5 = 205 tokens exceeds the model's context of 128 positions; shorten "
        "the prompt to 123 tokens or fewer (the context less max_new_tokens=5), or --cache none, which crops the "
        "context",
    ),
]


def test_bad_ids_are_error_records_that_name_the_field_the_value_and_what_is_allowed(tmp_path: Path) -> None:
    records = _batch(tmp_path, [line for line, _ in BAD_LINES], "--on-error", "skip")
    errors = [(r["line"], r["error"]["message"]) for r in records]
    assert [line for line, _ in errors] == list(range(1, len(BAD_LINES) + 1))
    assert [message for _, message in errors] == [message for _, message in BAD_LINES]
    assert records[-1]["error"]["type"] == "ContextLengthError"


def _main_with_model(loader: Any, *args: str) -> int:
    return main_with_model(loader, "generate", "-m", OWN_MODEL, "--chain", CHAIN, *args)


class ByteTokenizer(cli_testplugin.CharTokenizer):
    """cli-test-gpt's tokenizer with the bytes of its tokens, which a grammar needs."""

    def token_bytes(self) -> list[bytes | None]:
        return [ch.encode() for ch in cli_testplugin.ALPHABET]


def test_a_grammar_constrains_a_line_of_ids_as_a_line_of_text(tmp_path: Path) -> None:
    def with_bytes(argument: object, params: object) -> Any:
        model = cli_testplugin.load_model()
        model.tokenizer = ByteTokenizer()
        return model

    source, output = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    lines = _as_pairs([{"prompt": "A", "regex": "[a-z]+"}, {"prompt": "B", "json_schema": {"type": "integer"}}])
    source.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert _main_with_model(with_bytes, "--input", str(source), "--output", str(output), "--max-new-tokens", "6") == 0
    records = [json.loads(line) for line in output.read_text().splitlines()]
    assert [_but_prompt(r) for r in records[::2]] == [_but_prompt(r) for r in records[1::2]]
    assert records[1]["text"].isalpha() and records[1]["text"].islower()


def test_a_model_without_a_tokenizer_takes_lines_of_ids(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Its lines of text are errors that say how to give ids; its lines of ids decode, with no text."""

    def untokenized(argument: object, params: object) -> Any:
        model = cli_testplugin.load_model()
        model.tokenizer = None
        return model

    source, output = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    source.write_text('{"prompt_token_ids": [53, 26, 22], "seed": 4}\n{"prompt": "ROMEO"}\n')
    args = ["--input", str(source), "--output", str(output), "--on-error", "skip", "--max-new-tokens", "4"]
    assert _main_with_model(untokenized, *args) == 0
    ids, text = [json.loads(line) for line in output.read_text().splitlines()]
    alone = dk.generate(untokenized(None, None), [[53, 26, 22]], chain=CHAIN, max_new_tokens=4, seed=[4])
    assert ids["text"] is None and ids["tokens"] == list(map(int, alone.tokens[0]))
    no_tokenizer = "prompt: the model has no tokenizer, and the command line takes text prompts"
    assert text["error"]["message"].startswith(no_tokenizer)
    assert '"prompt_token_ids": [1, 2, 3]' in text["error"]["message"]
    assert "Traceback" not in capsys.readouterr().err

    # before: "stop_strings: the model has no tokenizer to decode text with; use stop_tokens", a library option
    # that no line field nor flag sets
    source.write_text('{"prompt_token_ids": [53, 26], "stop": ["a"]}\n{"prompt_token_ids": [53, 26]}\n')
    refused = "is invalid: the model has no tokenizer to decode text with; allowed: no stop strings (a line of "
    own, job = tmp_path / "own.jsonl", tmp_path / "job.jsonl"
    options = ["--input", str(source), "--on-error", "skip", "--max-new-tokens", "4"]
    assert _main_with_model(untokenized, *options, "--output", str(own)) == 0
    assert _main_with_model(untokenized, *options, "--output", str(job), "--stop", "b") == 0
    with_own, with_job = ([json.loads(text) for text in out.read_text().splitlines()] for out in (own, job))
    assert with_own[0]["error"]["message"].startswith(f'prompt line: stop=["a"] {refused}')
    assert "error" not in with_own[1]  # the line without stop strings decodes
    assert with_job[1]["error"]["message"].startswith(f"--stop 'b' {refused}")
