"""The conformance kit on each grammar stage, over tiny-shakespeare's 84 characters: random histories are
mostly outside a grammar (their rows come out all -inf), so regexes that accept more are checked too."""

from __future__ import annotations

import subprocess
import sys
from typing import Any, ClassVar

import pytest

import decodekit as dk
from decodekit.testing import ProcessorConformance
from decodekit.testing.registry import check_hook_imports_no_torch

SCHEMA = {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer"}}}}


class GrammarKit(ProcessorConformance):
    vocab_size: ClassVar[int] = 84
    reads_back = "the parser runs on the host, over each row's generated tokens"

    @pytest.fixture(autouse=True)
    def _tokenizer(self, shakespeare: Any) -> None:
        self.tokenizer = shakespeare.tokenizer

    def make_context(self, **fields: Any) -> dk.DecodeContext:
        return dk.DecodeContext(tokenizer=self.tokenizer, **fields)


class TestJsonSchema(GrammarKit):
    spec = ("json_schema", {"schema": SCHEMA})


class TestJson(GrammarKit):
    spec = ("json", {"whitespace": "flexible"})


class TestRegex(GrammarKit):
    spec = ("regex", {"pattern": "[A-Za-z ,.!?'\\n-]*"})


class TestRegexAnyText(GrammarKit):
    spec = ("regex", {"pattern": "(.|\\n)*"})


class TestGrammar(GrammarKit):
    spec = ("grammar", {"lark": 'start: WORD (" " WORD)*\nWORD: /[A-Za-z]+/'})


def test_the_hook_imports_no_torch_and_no_engine() -> None:
    registered = check_hook_imports_no_torch("decodekit_grammar.plugin", "register_samplers")
    assert [name for name, *_ in registered] == ["json_schema", "json", "regex", "grammar"]
    code = "import sys, decodekit_grammar.plugin; print('llguidance' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"
