from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest
from decodekit_shakespeare.tokenizer import CharTokenizer

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="session")
def hamlet_slice() -> str:
    return (DATA / "hamlet_slice.txt").read_text(encoding="utf-8")


@pytest.fixture(scope="session")
def shipped_tokenizer() -> CharTokenizer:
    raw = json.loads(resources.files("decodekit_shakespeare").joinpath("config.json").read_text(encoding="utf-8"))
    return CharTokenizer(raw["alphabet"])
