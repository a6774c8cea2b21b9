"""Shared fixtures: tiny random-init reference GPTs (MHA, GQA, MQA) and a character tokenizer."""

from __future__ import annotations

import pytest
from decodekit_gpt.gpt import GPT

from tinymodels import CharTokenizer, tiny_gpt


@pytest.fixture(params=[None, 2, 1], ids=["mha", "gqa", "mqa"])
def model(request: pytest.FixtureRequest) -> GPT:
    return tiny_gpt(request.param)


@pytest.fixture
def text_model() -> GPT:
    m = tiny_gpt(2, vocab_size=95)
    m.tokenizer = CharTokenizer()  # type: ignore[assignment]
    return m
