"""Parity with transformers' NoRepeatNGramLogitsProcessor, including left-padded ragged batches."""

from __future__ import annotations

import pytest
import torch

import decodekit as dk

logits_process = pytest.importorskip("transformers.generation.logits_process")

VOCAB = 12  # small, so n-grams repeat often


@pytest.mark.parametrize("ngram_size", [1, 2, 3, 4])
@pytest.mark.parametrize("seed", range(4))
def test_matches_transformers(ngram_size: int, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 3, (5, 40), generator=g)  # three distinct ids: repeats of every size
    x = torch.randn(5, VOCAB, generator=g)
    ours = dk.create("no_repeat_ngram", ngram_size)(x, dk.DecodeContext(tokens=ids))
    theirs = logits_process.NoRepeatNGramLogitsProcessor(ngram_size)(ids, x.clone())
    assert torch.equal(torch.isneginf(ours), torch.isneginf(theirs))
    assert torch.equal(ours[torch.isfinite(ours)], x[torch.isfinite(ours)])
    assert torch.isneginf(ours).any()


@pytest.mark.parametrize(
    ("ngram_size", "context", "banned"), [(2, [5, 5], [5]), (3, [1, 1, 1], [1]), (3, [1, 2, 1], [])]
)
def test_a_context_exactly_one_ngram_long_is_that_ngram(ngram_size: int, context: list[int], banned: list[int]) -> None:
    # The context is the one n-gram: (5, 5) starts with the last token, 5, so 5 would repeat it; (1, 2, 1)'s
    # start (1, 2) is not the context's last two tokens (2, 1): nothing is banned.
    ids = torch.tensor([context])
    x = torch.zeros(1, VOCAB)
    ours = dk.create("no_repeat_ngram", ngram_size)(x, dk.DecodeContext(tokens=ids))
    theirs = logits_process.NoRepeatNGramLogitsProcessor(ngram_size)(ids, x.clone())
    assert torch.isneginf(ours[0]).nonzero().flatten().tolist() == banned
    assert torch.equal(torch.isneginf(ours), torch.isneginf(theirs))


@pytest.mark.parametrize("ngram_size", [2, 3])
def test_ragged_rows_match_transformers_on_each_unpadded_row(ngram_size: int) -> None:
    g = torch.Generator().manual_seed(7)
    lengths = [3, 25, 12, 1]
    rows = [torch.randint(0, VOCAB, (n,), generator=g) for n in lengths]
    T = max(lengths)
    padded = torch.stack([torch.cat([torch.zeros(T - len(r), dtype=torch.long), r]) for r in rows])
    x = torch.randn(len(rows), VOCAB, generator=g)
    ctx = dk.DecodeContext(tokens=padded, prompt_lengths=torch.tensor(lengths))
    ours = dk.create("no_repeat_ngram", ngram_size)(x, ctx)
    hf = logits_process.NoRepeatNGramLogitsProcessor(ngram_size)
    for b, r in enumerate(rows):
        theirs = hf(r[None], x[b : b + 1].clone())
        assert torch.equal(torch.isneginf(ours[b : b + 1]), torch.isneginf(theirs)), b


def test_hand_worked_bigram() -> None:
    # Context 1 2 3 1: the bigram (1, 2) occurred, so after the final 1 token 2 is banned.
    x = torch.zeros(1, 5)
    out = dk.create("no_repeat_ngram", 2)(x, dk.DecodeContext(tokens=torch.tensor([[1, 2, 3, 1]])))
    assert torch.isneginf(out).tolist() == [[False, False, True, False, False]]
    # With last_n = 3 the context is 2 3 1: the (1, 2) bigram is out of the window.
    out = dk.create("no_repeat_ngram", 2, 3)(x, dk.DecodeContext(tokens=torch.tensor([[1, 2, 3, 1]])))
    assert not torch.isneginf(out).any()
