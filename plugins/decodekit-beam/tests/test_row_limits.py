"""`max_new_tokens` per prompt under beam search: every beam's last step is the one max_new_tokens, so limits that
differ are refused naming the option; one value repeated is the same search as the int."""

from __future__ import annotations

import pytest

import decodekit as dk
from tinymodels import tiny_gpt

PROMPTS = [[1, 2, 3], [4, 5], [6, 7, 8, 9]]


def test_limits_that_differ_are_refused_naming_them() -> None:
    model = tiny_gpt()
    for call in (dk.validate, dk.decode):
        with pytest.raises(dk.ParameterError, match=r"max_new_tokens=\[3, 7, 0\] differ between prompts"):
            call(model, PROMPTS, strategy="beam", num_beams=2, max_new_tokens=[3, 7, 0])


def test_one_limit_per_prompt_all_equal_is_the_int() -> None:
    model = tiny_gpt()
    listed = dk.decode(model, PROMPTS, strategy="beam", num_beams=3, max_new_tokens=[5, 5, 5], stop_tokens=[])
    one = dk.decode(model, PROMPTS, strategy="beam", num_beams=3, max_new_tokens=5, stop_tokens=[])
    assert listed.tokens == one.tokens and [len(t) for t in listed.tokens] == [5, 5, 5]
