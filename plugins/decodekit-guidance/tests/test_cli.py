"""`decodekit generate --strategy "cfg(...)"`: the string form reaches the strategy, and its errors are one line."""

from __future__ import annotations

import json

import pytest
from decodekit_cli import main

import decodekit as dk

ARGS = ["--chain", "greedy", "--max-new-tokens", "30", "--json"]


def test_generate_with_a_negative_prompt_gives_the_strategys_tokens(capsys: pytest.CaptureFixture[str]) -> None:
    strategy = 'cfg(scale=1.5, negative="JULIET:")'
    assert main(["generate", "ROMEO:", "--strategy", strategy, *ARGS]) == 0  # in this process: a new one costs seconds
    document = json.loads(capsys.readouterr().out)
    assert document["strategy"].startswith("cfg")
    model = dk.load_model("tiny-shakespeare")
    want = dk.decode(model, "ROMEO:", strategy="cfg", scale=1.5, negative="JULIET:", chain="greedy", max_new_tokens=30)
    assert document["samples"][0]["tokens"] == want.tokens[0]
    plain = dk.generate(model, "ROMEO:", chain="greedy", max_new_tokens=30)
    assert want.tokens != plain.tokens  # the negative prompt changed the text


def test_a_bad_scale_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["generate", "ROMEO:", "--strategy", "cfg(scale=nan)", *ARGS]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert (
        line == "decodekit: error: strategy cfg: scale=nan is invalid: Input should be a finite number; allowed: "
        "a number -10000 <= scale <= 10000"
    )
