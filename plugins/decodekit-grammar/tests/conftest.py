"""Fixtures: the tiny-shakespeare model and its character tokenizer (84 ids, no end-of-sequence token), the
byte-level BPE of 50,000 tokens trained on the same text (`data/train_bpe50k.py`), and a random model
over that vocabulary that uses it."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import pytest

import decodekit as dk

DATA = Path(__file__).with_name("data")


def bpe50k() -> Any:
    """The shipped byte-level BPE as an `HFTokenizer` (end of text: id 0, `<|endoftext|>`)."""
    from decodekit_hf.tokenizer import HFTokenizer
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    text = gzip.decompress((DATA / "bpe50k.json.gz").read_bytes()).decode()
    fast = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(text), eos_token="<|endoftext|>")
    return HFTokenizer(fast)


@pytest.fixture(scope="session")
def shakespeare() -> Any:
    return dk.load_model("tiny-shakespeare")


@pytest.fixture(scope="session")
def bpe() -> Any:
    return bpe50k()


@pytest.fixture(scope="session")
def bpe_model(bpe: Any) -> Any:
    """A random TinyLM over the 50,000-token vocabulary, with the BPE as its tokenizer."""
    from decodekit.testing.tiny_lm import TinyLM

    model = TinyLM(50_000, dim=16, max_positions=256)
    model.tokenizer = bpe
    return model
