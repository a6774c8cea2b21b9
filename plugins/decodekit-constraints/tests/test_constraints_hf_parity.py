"""Parity with transformers: SequenceBias, NoBadWords and MinNewTokensLength processors."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

import decodekit as dk

logits_process = pytest.importorskip("transformers.generation.logits_process")

VOCAB = 10
# Lengths 1, 2 and 3; two sequences completed by token 4; a duplicate (the later one wins, as HF).
BIASES = [[[4], 1.5], [[1, 4], -2.0], [[2, 1, 4], 3.0], [[0, 2], -1.0], [[3], 0.5], [[3], -4.0], [[1, 2, 3], 2.5]]
BAD = [[4], [1, 2], [0, 1, 3], [2, 2]]


def random_case(seed: int, batch: int = 6, length: int = 12) -> tuple[Tensor, Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 4, (batch, length), generator=g)  # ids 0..3: the prefixes match often
    return ids, torch.randn(batch, VOCAB, generator=g)


@pytest.mark.parametrize("seed", range(5))
def test_sequence_bias(seed: int) -> None:
    ids, x = random_case(seed)
    ours = dk.create("sequence_bias", BIASES)(x, dk.DecodeContext(tokens=ids))
    theirs = logits_process.SequenceBiasLogitsProcessor(BIASES)(ids, x.clone())
    assert torch.allclose(ours, theirs)
    assert not torch.allclose(ours - x, (ours - x)[:1])  # rows differ: the prefixes matter


@pytest.mark.parametrize("seed", range(5))
def test_bad_words(seed: int) -> None:
    ids, x = random_case(seed)
    ours = dk.create("bad_words", BAD)(x, dk.DecodeContext(tokens=ids))
    theirs = logits_process.NoBadWordsLogitsProcessor(BAD)(ids, x.clone())
    removed = torch.isneginf(ours)
    assert torch.equal(removed, torch.isneginf(theirs))
    assert torch.equal(ours[~removed], x[~removed])
    assert removed.sum() > x.shape[0]  # more than the always-banned token 4


@pytest.mark.parametrize("stage", ["sequence_bias", "bad_words"])
def test_ragged_rows_match_transformers_on_each_unpadded_row(stage: str) -> None:
    g = torch.Generator().manual_seed(11)
    # Row 0 is a single 2: padding zeros before it must not complete [0, 2] or [0, 1, 3].
    rows = [torch.tensor([2]), torch.tensor([0, 1]), torch.randint(0, 4, (9,), generator=g), torch.tensor([0, 2])]
    T = max(len(r) for r in rows)
    padded = torch.stack([torch.cat([torch.zeros(T - len(r), dtype=torch.long), r]) for r in rows])
    x = torch.randn(len(rows), VOCAB, generator=g)
    ctx = dk.DecodeContext(tokens=padded, prompt_lengths=torch.tensor([len(r) for r in rows]))
    if stage == "sequence_bias":
        ours = dk.create(stage, BIASES)(x, ctx)
        hf = logits_process.SequenceBiasLogitsProcessor(BIASES)
    else:
        ours = dk.create(stage, BAD)(x, ctx)
        hf = logits_process.NoBadWordsLogitsProcessor(BAD)
    for b, r in enumerate(rows):
        theirs = hf(r[None], x[b : b + 1].clone())
        assert torch.allclose(ours[b : b + 1], theirs), b


@pytest.mark.parametrize("generated", range(6))
def test_min_new_tokens(generated: int) -> None:
    prompt = 5
    ids = torch.randint(0, VOCAB, (3, prompt + generated), generator=torch.Generator().manual_seed(generated))
    x = torch.randn(3, VOCAB)
    ours = dk.create("min_new_tokens", 3, [7, 9])(x, dk.DecodeContext(tokens=ids, step=generated))
    theirs = logits_process.MinNewTokensLengthLogitsProcessor(prompt, 3, [7, 9])(ids, x.clone())
    assert torch.equal(ours, theirs)
    assert torch.isneginf(ours).any() == (generated < 3)
