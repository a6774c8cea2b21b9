"""Shared fixtures: tiny random-init reference GPTs (MHA, GQA, MQA) and a character tokenizer."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from decodekit_gpt.gpt import GPT

# torch is imported in the fixtures: this file is also loaded by xdist's controller, which runs no test and
# would spend seconds importing torch before it starts the workers.


@pytest.fixture(params=[None, 2, 1], ids=["mha", "gqa", "mqa"])
def model(request: pytest.FixtureRequest) -> GPT:
    from tinymodels import tiny_gpt

    return tiny_gpt(request.param)


@pytest.fixture
def text_model() -> GPT:
    from tinymodels import CharTokenizer, tiny_gpt

    m = tiny_gpt(2, vocab_size=95)
    m.tokenizer = CharTokenizer()  # type: ignore[assignment]
    return m
