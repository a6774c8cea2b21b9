"""Fixtures: the tiny-shakespeare model and its character tokenizer (84 ids, no end-of-sequence token), the
byte-level BPEs trained on the same text (`data/train_bpe.py`: GPT-2's scheme, 46,896 tokens; and one of
exactly 50,000 whose merges cross words), and a random model over the first that uses it."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import pytest

import decodekit as dk

DATA = Path(__file__).with_name("data")


def hf_bpe(name: str) -> Any:
    """A shipped byte-level BPE (`data/NAME`) as an `HFTokenizer` (end of text: id 0, `<|endoftext|>`)."""
    from decodekit_hf.tokenizer import HFTokenizer
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    text = gzip.decompress((DATA / name).read_bytes()).decode()
    fast = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(text), eos_token="<|endoftext|>")
    return HFTokenizer(fast)


@pytest.fixture(scope="session")
def shakespeare() -> Any:
    return dk.load_model("tiny-shakespeare")


@pytest.fixture(scope="session")
def bpe() -> Any:
    """GPT-2's scheme: 46,896 tokens."""
    return hf_bpe("bpe-words.json.gz")


@pytest.fixture(scope="session")
def bpe50k() -> Any:
    """Merges across words: 50,000 tokens."""
    return hf_bpe("bpe-50k.json.gz")


@pytest.fixture(scope="session")
def bpe_model(bpe: Any) -> Any:
    """A random TinyLM over the BPE's vocabulary, with the BPE as its tokenizer."""
    from decodekit.testing.tiny_lm import TinyLM

    model = TinyLM(len(bpe.hf), dim=16, max_positions=256)
    model.tokenizer = bpe
    return model
