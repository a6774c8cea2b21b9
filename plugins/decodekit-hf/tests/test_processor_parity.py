"""Cross-checks: each standard decodekit processor against its transformers counterpart.

Same removed set (-inf), and the surviving values equal to float32 precision, on random
logits (some tokens already removed) and random histories.

top-p's cut is compared away from its boundary. transformers sums the probabilities in
ascending order in float32 over the whole vocabulary, which is off by up to ~1e-4 at
V = 50,257, so a token whose preceding mass lies within 2e-4 of p is not judged against
it; decodekit's cut is also checked against the exact (float64) rule, within 1e-5.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import pytest
import torch
from torch import Tensor
from transformers import (
    LogitsProcessorList,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

import decodekit as dk
from decodekit.stage import Candidates, densify

T = 40  # history length


def random_case(vocab: int, scale: float, seed: int, rows: int = 48) -> tuple[Tensor, Tensor]:
    """`(logits [rows, V], history [rows, T])`; about 2% of the logits already removed (-inf)."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, vocab, generator=g) * scale
    removed = torch.rand(rows, vocab, generator=g) < 0.02
    removed[:, 0] = False  # every row keeps a token
    history = torch.randint(0, vocab, (rows, T), generator=g)
    return logits.masked_fill(removed, float("-inf")), history


def assert_same(ours: Tensor, theirs: Tensor, judged: Tensor | None = None) -> None:
    """Same removed set (where judged) and the kept values equal to float32 precision."""
    judged = torch.ones_like(ours, dtype=torch.bool) if judged is None else judged
    removed_ours, removed_theirs = torch.isneginf(ours), torch.isneginf(theirs)
    assert torch.equal(removed_ours[judged], removed_theirs[judged])
    assert not (torch.isnan(ours).any() or torch.isnan(theirs).any())
    both = ~removed_ours & ~removed_theirs
    torch.testing.assert_close(ours[both], theirs[both], rtol=2e-6, atol=1e-6)


def run_ours(name: str, logits: Tensor, history: Tensor, **params: object) -> Tensor:
    out: Tensor = dk.create(name, **params)(logits.clone(), dk.DecodeContext(tokens=history))
    return out


def run_theirs(processor: Callable[[Tensor, Tensor], Tensor], logits: Tensor, history: Tensor) -> Tensor:
    return processor(history, logits.clone())


@pytest.mark.parametrize("value", [0.3, 1.0, 1.7])
@pytest.mark.parametrize("seed", [0, 1])
def test_temperature(value: float, seed: int) -> None:
    logits, history = random_case(1000, 3.0, seed)
    assert_same(
        run_ours("temperature", logits, history, value=value),
        run_theirs(TemperatureLogitsWarper(value), logits, history),
    )


@pytest.mark.parametrize("k", [1, 5, 50, 999, 1000, 5000])
def test_top_k(k: int) -> None:
    logits, history = random_case(1000, 2.0, k)
    ours = run_ours("top_k", logits, history, k=k)
    assert_same(ours, run_theirs(TopKLogitsWarper(k), logits, history))
    if k < 900:
        assert (~torch.isneginf(ours)).sum(-1).eq(k).all()  # continuous logits: no ties, exactly k kept


def _mass_before(logits: Tensor) -> Tensor:
    """`[B, V]` float64: the probability of the tokens more likely than each token."""
    values, order = logits.double().sort(-1, descending=True)
    probs = values.softmax(-1)
    return torch.empty_like(probs).scatter_(1, order, probs.cumsum(-1) - probs)


TOP_P_CASES = [(1000, scale, p) for scale in (1.0, 4.0) for p in (0.1, 0.5, 0.9, 0.99)] + [
    (50257, scale, p)
    for scale in (1.0, 6.0)
    for p in (0.5, 0.9)  # partial top-k and full-sort paths
]


@pytest.mark.parametrize(("vocab", "scale", "p"), TOP_P_CASES)
def test_top_p(vocab: int, scale: float, p: float) -> None:
    logits, history = random_case(vocab, scale, int(p * 100) + vocab, rows=48 if vocab <= 1000 else 8)
    before = _mass_before(logits)
    judged = (before - p).abs() > 2e-4
    assert judged.float().mean() > 0.99  # the test judges nearly every token
    ours = run_ours("top_p", logits, history, p=p)
    assert_same(ours, run_theirs(TopPLogitsWarper(p), logits, history), judged)
    exact_removed = (before >= p) | torch.isneginf(logits)  # the rule, in float64
    exact_judged = (before - p).abs() > 1e-5
    assert torch.equal(torch.isneginf(ours)[exact_judged], exact_removed[exact_judged])
    kept = (~torch.isneginf(ours)).sum(-1)
    assert (kept >= 1).all() and (kept < vocab).any()  # the cut is real somewhere


@pytest.mark.parametrize("penalty", [0.6, 1.3, 2.0])
@pytest.mark.parametrize("seed", [0, 1])
def test_repetition_penalty(penalty: float, seed: int) -> None:
    logits, history = random_case(200, 2.0, seed)  # small vocabulary: tokens repeat within a history
    ours = run_ours("repetition_penalty", logits, history, penalty=penalty)
    assert_same(ours, run_theirs(RepetitionPenaltyLogitsProcessor(penalty), logits, history))
    assert not torch.equal(ours, logits)


def test_full_chain_dense_and_fast_path_equal_transformers() -> None:
    """The benchmark's chain, as transformers orders the same four processors."""
    chain = dk.Chain.parse("repetition_penalty(1.1) | temperature(0.8) | top_k(50) | top_p(0.9)")
    theirs_list = [
        RepetitionPenaltyLogitsProcessor(1.1),
        TemperatureLogitsWarper(0.8),
        TopKLogitsWarper(50),
        TopPLogitsWarper(0.9),
    ]
    logits, history = random_case(50257, 3.0, 7, rows=8)
    ids = cast(torch.LongTensor, history)
    before_top_p = LogitsProcessorList(theirs_list[:3])(ids, logits.clone())
    theirs = LogitsProcessorList(theirs_list)(ids, logits.clone())
    judged = (_mass_before(before_top_p) - 0.9).abs() > 2e-4
    ctx = dk.DecodeContext(tokens=history)
    fast = chain._process_fast(logits.clone(), ctx)
    assert isinstance(fast, Candidates)  # top-k handed candidates to top-p
    for ours in (chain.process(logits.clone(), ctx), densify(fast, 50257)):
        assert_same(ours, theirs, judged)
