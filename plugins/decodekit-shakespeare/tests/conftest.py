from __future__ import annotations

import json
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import pytest
from decodekit_shakespeare.tokenizer import CharTokenizer

DATA = Path(__file__).parent / "data"


@pytest.fixture(autouse=True)
def _one_torch_thread() -> Iterator[None]:
    """Run each test on one intra-op thread (this tiny model is fastest so, above all on a busy
    machine), and give the rest of the suite back the thread count it had."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@pytest.fixture(scope="session")
def hamlet_slice() -> str:
    return (DATA / "hamlet_slice.txt").read_text(encoding="utf-8")


@pytest.fixture(scope="session")
def shipped_tokenizer() -> CharTokenizer:
    raw = json.loads(resources.files("decodekit_shakespeare").joinpath("config.json").read_text(encoding="utf-8"))
    return CharTokenizer(raw["alphabet"])
