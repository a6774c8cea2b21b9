"""The rejection rule on hand-worked distributions, its output distribution, and prompt lookup."""

from __future__ import annotations

import pytest
import torch
from decodekit_speculative.drafts import NgramIndex
from decodekit_speculative.rejection import draw, verify_argmax, verify_softmax
from scipy.stats import chisquare

P = torch.tensor([0.5, 0.3, 0.2, 0.0])
Q = torch.tensor([0.25, 0.25, 0.25, 0.25])


def uniforms(*values: float):  # type: ignore[no-untyped-def]
    it = iter(values)
    return lambda: torch.tensor([next(it)])


def test_accept_below_ratio_reject_above() -> None:
    # x = 1: p/q = 0.3/0.25 >= 1, always accepted; then the bonus is drawn from p at position 1.
    assert verify_softmax([1], [Q], lambda j: P, uniforms(0.99, 0.0)) == (1, 0)
    # x = 2: p/q = 0.8; u = 0.79 accepts, u = 0.81 rejects.
    assert verify_softmax([2], [Q], lambda j: P, uniforms(0.79, 0.0))[0] == 1
    n, token = verify_softmax([2], [Q], lambda j: P, uniforms(0.81, 0.0))
    # residual max(0, p - q) = [0.25, 0.05, 0, 0] / 0.3: u = 0 draws token 0, u = 0.9 token 1
    assert (n, token) == (0, 0)
    assert verify_softmax([2], [Q], lambda j: P, uniforms(0.81, 0.9)) == (0, 1)
    # x = 3 has p = 0: always rejected.
    assert verify_softmax([3], [Q], lambda j: P, uniforms(0.0, 0.0))[0] == 0


def test_one_hot_draft_accepts_with_probability_p() -> None:
    # q one-hot at x = 0: accept iff u < p(0) = 0.5; the residual is p without token 0.
    assert verify_softmax([0], [None], lambda j: P, uniforms(0.49, 0.0))[0] == 1
    n, token = verify_softmax([0], [None], lambda j: P, uniforms(0.51, 0.0))
    assert (n, token) == (0, 1)


def test_argmax_keeps_the_agreeing_prefix() -> None:
    picks = [4, 7, 1, 9]
    assert verify_argmax([4, 7, 2], lambda j: picks[j]) == (2, 1)
    assert verify_argmax([4, 7, 1], lambda j: picks[j]) == (3, 9)
    assert verify_argmax([], lambda j: picks[j]) == (0, 4)


def test_draw_never_picks_a_zero() -> None:
    probs = torch.tensor([0.0, 1.0, 0.0])
    assert {draw(probs, torch.tensor([u])) for u in (0.0, 0.5, 0.999999)} == {1}
    assert draw(torch.zeros(3), torch.tensor([0.5])) == -1


@pytest.mark.parametrize("one_hot", [False, True])
def test_the_rule_samples_p_whatever_q(one_hot: bool) -> None:
    """One drafted position, 5,000 draws: the first emitted token is distributed as p, not q.

    With `one_hot` the rule is told q is one-hot at the proposal (as for a deterministic draft):
    it holds for a proposal chosen in any way independent of the rule's own draws."""
    g = torch.Generator().manual_seed(0)
    p = torch.tensor([0.05, 0.4, 0.3, 0.2, 0.05])
    q = torch.tensor([0.3, 0.1, 0.1, 0.2, 0.3])
    counts = torch.zeros(5)
    u = torch.rand(5_000, 3, generator=g)
    for row in u:
        x = draw(q, row[0:1])
        n, token = verify_softmax([x], [None if one_hot else q], lambda j: p, iter(row[1:].split(1)).__next__)
        counts[x if n == 1 else token] += 1  # the first emitted token: the accepted draft, or the residual's
    assert chisquare(counts.numpy(), (p * 5_000).numpy()).pvalue > 1e-3
    # the same test tells q apart from p: it can fail
    assert chisquare(counts.numpy(), (q * 5_000).numpy()).pvalue < 1e-6


def test_ngram_proposes_the_latest_continuation() -> None:
    index = NgramIndex(2)
    index.extend([1, 2, 3, 9, 1, 2, 4, 5, 1, 2])
    assert index.propose(3) == [4, 5, 1]  # the latest earlier [1, 2] is followed by 4 5 1
    assert index.propose(10) == [4, 5, 1, 2]  # up to the end of the history
    index.extend([7])
    assert index.propose(3) == []  # [2, 7] never occurred before
