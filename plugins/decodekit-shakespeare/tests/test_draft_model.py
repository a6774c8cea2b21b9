"""The shipped `tiny-shakespeare-draft` (an LSTM): shape, tokenizer shared with the target, size, its Hamlet loss."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest
from decodekit_shakespeare.model import (
    DRAFT_WEIGHTS_NAME,
    ShakespeareLSTM,
    load_tiny_shakespeare,
    load_tiny_shakespeare_draft,
    loss_per_char,
)

import decodekit as dk

MEASURED_SLICE_LOSS = 1.5645  # evaluate.py --draft --val tests/data/hamlet_slice.txt
SLICE_LOSS_BOUND = MEASURED_SLICE_LOSS + 0.03

WEIGHTS = Path(str(resources.files("decodekit_shakespeare"))) / DRAFT_WEIGHTS_NAME


@pytest.fixture(scope="module")
def draft() -> ShakespeareLSTM:
    model = load_tiny_shakespeare_draft()
    assert isinstance(model, ShakespeareLSTM)
    return model


def test_shape_and_tokenizer(draft: ShakespeareLSTM) -> None:
    spec = draft.spec  # one layer of recurrent state, 208 wide, per slot
    assert (spec.n_layers, spec.n_heads, spec.n_kv_heads, spec.head_dim) == (1, 1, 1, 208)
    assert draft.config.n_input == 32 and sum(p.numel() for p in draft.parameters()) == 221_588
    target = load_tiny_shakespeare()
    assert spec.vocab_size == target.spec.vocab_size == 84
    assert draft.tokenizer.decode(list(range(84))) == target.tokenizer.decode(list(range(84)))


def test_weights_file_under_one_megabyte() -> None:
    assert WEIGHTS.stat().st_size <= 1_000_000


def test_slice_loss_below_bound(draft: ShakespeareLSTM, hamlet_slice: str) -> None:
    loss = loss_per_char(draft, draft.tokenizer.encode(hamlet_slice))
    assert loss <= SLICE_LOSS_BOUND, f"loss {loss:.4f} on the Hamlet slice exceeds {SLICE_LOSS_BOUND:.4f}"


def test_registered() -> None:
    entry = dk.get_registry().models["tiny-shakespeare-draft"]
    assert (
        getattr(entry, "loader", getattr(entry, "impl", None))
        == "decodekit_shakespeare.model:load_tiny_shakespeare_draft"
    )
