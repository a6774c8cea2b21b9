"""Scoring's numbers are those of the plain computation, bit for bit: a prompt token's log-probability, rank and top n
(`prompt_logprobs`) and a generated token's raw ones (`logprobs`) against `log_softmax` over the whole logits in
float32, `gather`, the strictly larger entries counted as a bool mask and `topk`, written out here; whatever blocks
and counting decodekit scores them with (`decodekit.results`)."""

from __future__ import annotations

import pytest
import torch

import decodekit as dk
from decodekit.results import SCORED_BLOCK, PromptLogprobs, prompt_logprobs, token_logprobs
from tinymodels import tiny_gpt


def plain(logits: torch.Tensor, tokens: torch.Tensor, n: int) -> list[PromptLogprobs]:
    """Each row of `logits` `[T, V]` scored at once, the rank as one plus `lp > chosen` summed."""
    lp = torch.log_softmax(logits.float(), -1)
    chosen = lp.gather(1, tokens[:, None])
    ranks = (lp > chosen).sum(-1) + 1
    top = lp.topk(n, -1)
    rows = zip(chosen[:, 0].tolist(), ranks.tolist(), top.indices.tolist(), top.values.tolist())
    return [PromptLogprobs(c, r, list(zip(i, v))) for c, r, i, v in rows]


def bits(entries: list[PromptLogprobs]) -> list[tuple[str, ...]]:
    """Every float by its hex form: NaN equals NaN, -0.0 differs from 0.0."""
    return [(e.logprob.hex(), str(e.rank), *(f"{i}:{v.hex()}" for i, v in e.top)) for e in entries]


def adversarial(rows: int, vocab: int, seed: int) -> torch.Tensor:
    """Logits of few distinct values (ties everywhere), some -inf (a masked token, the chosen one among them), a
    row of NaN and a row of -inf; the rest normal."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, vocab, generator=g) * 4
    logits[::3] = torch.randint(-2, 3, (len(logits[::3]), vocab), generator=g).float() / 2  # ties
    logits[:, ::7] = float("-inf")
    logits[1] = float("nan")
    logits[2] = float("-inf")
    logits[3, 5] = float("nan")
    return logits


@pytest.mark.parametrize(("rows", "vocab"), [(40, 84), (9, 101), (70, 32_000), (5, 400_000)])
@pytest.mark.parametrize("n", [0, 3])
def test_prompt_scores_are_the_plain_computations_bits(rows: int, vocab: int, n: int) -> None:
    """Blocks of rows or one block, ties, masked tokens, NaN: every field as the plain computation gives it."""
    logits = adversarial(rows, vocab, seed=rows)
    tokens = torch.randint(0, vocab, (rows,), generator=torch.Generator().manual_seed(1))
    tokens[0] = 0  # -inf: a masked token chosen
    assert (rows * vocab > SCORED_BLOCK) == (vocab >= 32_000)  # 3 blocks of 32 rows; 3 of 2
    assert bits(prompt_logprobs(logits, tokens, n)) == bits(plain(logits, tokens, n))
    half = logits.bfloat16()  # the model's dtype, scored in float32
    assert bits(prompt_logprobs(half, tokens, n)) == bits(plain(half, tokens, n))


def test_a_vocabulary_past_float32s_integers_is_counted_exactly() -> None:
    """2**24 + 1 tokens more likely than the chosen one: a float32 count cannot hold it (rounds to 2**24 or more)."""
    V = 2**24 + 2
    logits = torch.zeros(1, V)
    logits[0, 0] = -1.0
    got = prompt_logprobs(logits, torch.tensor([0]), 0)
    assert got[0].rank == V == plain(logits, torch.tensor([0]), 0)[0].rank


def test_a_generated_tokens_raw_scores_are_the_plain_computations_bits() -> None:
    logits = adversarial(12, 500, seed=3)
    tokens = torch.randint(0, 500, (12,), generator=torch.Generator().manual_seed(2))
    tokens[0] = 0
    got = token_logprobs(logits, logits.clone(), tokens, 4)
    want = bits(plain(logits, tokens, 4))
    assert [(s.raw.hex(), str(s.rank), *(f"{i}:{v.hex()}" for i, v in s.raw_top)) for s in got] == want


@pytest.mark.parametrize("cache", ["dense", "none"])
def test_scoring_a_prompt_is_a_plain_forwards_log_softmax_and_gather(cache: str) -> None:
    """dk.generate(max_new_tokens=0, prompt_logprobs=n) against the model's own forward over the same batch (no
    cache), its log_softmax and gather by hand, to the bit; a vocabulary that takes several blocks."""
    model = tiny_gpt(vocab_size=40_000, n_layer=1)
    prompts = torch.randint(0, 40_000, (2, 48), generator=torch.Generator().manual_seed(0))
    scored = dk.generate(model, prompts.tolist(), cache=cache, max_new_tokens=0, prompt_logprobs=2).prompt_logprobs
    with torch.inference_mode():
        logits = model(prompts, torch.arange(48)[None].expand(2, 48), None)
    assert scored is not None
    for row, entries in enumerate(scored):
        assert entries[0] is None
        want = plain(logits[row, :-1], prompts[row, 1:], 2)
        assert bits([e for e in entries[1:] if e is not None]) == bits(want)
