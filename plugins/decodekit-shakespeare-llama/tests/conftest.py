"""Fixtures: the shipped folder loaded by transformers and by decodekit, and a 30 KB slice of Hamlet."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from decodekit_hf import HFModel
from decodekit_shakespeare_llama import model_dir
from transformers import AutoModelForCausalLM, AutoTokenizer

import decodekit as dk

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="session", autouse=True)
def one_thread() -> None:
    torch.set_num_threads(1)  # a model this small runs fastest on one core


@pytest.fixture(scope="session")
def hamlet_slice() -> str:
    """30,044 contiguous characters of Hamlet (Act II scene 2 to Act III scene 3), held out of training."""
    return (DATA / "hamlet_slice.txt").read_text(encoding="utf-8")


@pytest.fixture(scope="session")
def hf_model() -> Any:
    return AutoModelForCausalLM.from_pretrained(str(model_dir()), local_files_only=True)  # eval mode


@pytest.fixture(scope="session")
def hf_tokenizer() -> Any:
    return AutoTokenizer.from_pretrained(str(model_dir()), local_files_only=True)


@pytest.fixture(scope="session")
def dk_model() -> HFModel:
    model = dk.load_model("tiny-shakespeare-llama")
    assert isinstance(model, HFModel)
    return model
