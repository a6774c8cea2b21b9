"""The constraint samplers as the spellings of transformers options that have no sampler of their own
(docs/samplers.md, "Coming from another library"), checked against transformers' processors on the edge rows."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

import decodekit as dk
from decodekit.testing.inputs import edge_logits

logits_process = pytest.importorskip("transformers.generation.logits_process")

VOCAB = 300
SEEDS = range(3)
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
TOKENS = [7, 3, 299, 11, 7]  # row 7's and 8's finite tokens among them; one listed twice


def history(rows: int, length: int, seed: int) -> Tensor:
    return torch.randint(0, VOCAB, (rows, length), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", SEEDS)
def test_suppress_tokens_is_bad_words_of_single_tokens(seed: int, dtype: torch.dtype) -> None:
    x, ids = edge_logits(VOCAB, seed=seed, dtype=dtype), history(12, 5, seed)
    ours = dk.create("bad_words", [[t] for t in TOKENS])(x.clone(), dk.DecodeContext(tokens=ids))
    assert torch.equal(ours, logits_process.SuppressTokensLogitsProcessor(TOKENS)(ids, x.clone()))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("generated", [0, 1, 2])
def test_begin_suppress_tokens_is_min_new_tokens_of_one(generated: int, dtype: torch.dtype) -> None:
    prompt = 6
    x, ids = edge_logits(VOCAB, seed=generated, dtype=dtype), history(12, prompt + generated, generated)
    ours = dk.create("min_new_tokens", 1, TOKENS)(x.clone(), dk.DecodeContext(tokens=ids, step=generated))
    theirs = logits_process.SuppressTokensAtBeginLogitsProcessor(TOKENS, begin_index=prompt)(ids, x.clone())
    assert torch.equal(ours, theirs)
    assert torch.equal(ours, x) == (generated > 0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", SEEDS)
def test_logit_bias_is_sequence_bias_of_single_tokens(seed: int, dtype: torch.dtype) -> None:
    bias = {7: 2.5, 3: -100.0, 299: 0.125, 11: -3.0}
    x, ids = edge_logits(VOCAB, seed=seed, dtype=dtype), history(12, 5, seed)
    ours = dk.create("logit_bias", bias)(x.clone(), dk.DecodeContext(tokens=ids))
    theirs = logits_process.SequenceBiasLogitsProcessor([[[t], b] for t, b in bias.items()])(ids, x.clone())
    assert torch.equal(ours, theirs)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", SEEDS)
def test_allowed_tokens_is_a_constant_prefix_constraint(seed: int, dtype: torch.dtype) -> None:
    x, ids = edge_logits(VOCAB, seed=seed, dtype=dtype), history(12, 5, seed)
    ours = dk.create("allowed_tokens", TOKENS)(x.clone(), dk.DecodeContext(tokens=ids))
    hf = logits_process.PrefixConstrainedLogitsProcessor(lambda batch, sent: TOKENS, num_beams=1)
    assert torch.equal(ours, hf(ids, x.clone()))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("generated", [0, 3, 4, 5, 9, 30])
@pytest.mark.parametrize("factor", [1.6, 1.01, 0.8])
def test_exponential_decay_matches_transformers(factor: float, generated: int, dtype: torch.dtype) -> None:
    """HF `exponential_decay_length_penalty=(3, factor)` with `eos_token_id=TOKENS`; prompts of 6 tokens."""
    prompt, start = 6, 3
    x, ids = edge_logits(VOCAB, seed=generated, dtype=dtype), history(12, prompt + generated, generated)
    ours = dk.create("exponential_decay", start, factor, TOKENS)(
        x.clone(), dk.DecodeContext(tokens=ids, step=generated)
    )
    hf = logits_process.ExponentialDecayLengthPenalty((start, factor), TOKENS, prompt)
    theirs = hf(ids, x.clone())
    finite = torch.isfinite(theirs)  # float16 rows of 30000 times 1.6**27 overflow there: pinned below
    assert torch.equal(ours[finite], theirs[finite])
    assert torch.equal(ours, x) == (generated <= start)


def test_exponential_decay_saturates_where_transformers_overflows() -> None:
    """1.6**200 overflows float32 times a logit of 2: transformers' +inf makes softmax NaN; ours is float32's largest.
    At 2000 steps transformers' Python pow overflows (OverflowError); ours saturates the same way."""
    x = torch.tensor([[2.0, -1.0, 0.0, 3.0]])
    for generated in (200, 2000):
        out = dk.create("exponential_decay", 0, 1.6, [0, 2])(
            x.clone(), dk.DecodeContext(tokens=torch.zeros(1, generated + 1, dtype=torch.long), step=generated)
        )
        assert out[0].tolist() == [torch.finfo(torch.float32).max, -1.0, 0.0, 3.0]  # a logit of 0 stays 0, as HF
    hf = logits_process.ExponentialDecayLengthPenalty((0, 1.6), [0, 2], 1)
    assert torch.isposinf(hf(torch.zeros(1, 201, dtype=torch.long), x.clone())[0, 0])
