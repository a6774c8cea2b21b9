"""Gumbel-max draws follow softmax(logits): chi-square against the probabilities and against `sample`."""

from __future__ import annotations

import pytest
import torch
from scipy import stats

import decodekit as dk
from decodekit.context import row_generators

LOGITS = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0, float("-inf")])
ROWS, CALLS = 4000, 5  # 20,000 draws


def draw(selector: str, seed: int) -> torch.Tensor:
    """Token counts over ROWS * CALLS draws, each row with its own generator."""
    stage = dk.create(selector)
    ctx = dk.DecodeContext(tokens=torch.zeros(ROWS, 1, dtype=torch.long), generators=row_generators(seed, ROWS))
    x = LOGITS.expand(ROWS, -1)
    picks = torch.cat([stage(x, ctx) for _ in range(CALLS)])
    return torch.bincount(picks, minlength=LOGITS.numel())


def test_gumbel_matches_softmax() -> None:
    counts = draw("gumbel", seed=0)
    assert counts[5] == 0  # the removed token is never drawn
    expected = LOGITS[:5].double().softmax(-1) * counts.sum()
    result = stats.chisquare(counts[:5].numpy(), expected.numpy())
    assert result.pvalue > 1e-3, result


def test_gumbel_and_sample_draw_the_same_distribution() -> None:
    table = torch.stack([draw("gumbel", seed=1)[:5], draw("sample", seed=2)[:5]]).numpy()
    result = stats.chi2_contingency(table)
    assert result.pvalue > 1e-3, result


@pytest.mark.parametrize("seed", [0, 1])
def test_a_rows_draw_does_not_depend_on_its_batch(seed: int) -> None:
    x = torch.randn(4, 100)
    stage = dk.create("gumbel")
    gens = row_generators(seed, 4)
    together = stage(x, dk.DecodeContext(tokens=torch.zeros(4, 1, dtype=torch.long), generators=gens))
    for b in range(4):
        g = row_generators(seed, 4)[b]
        alone = stage(x[b : b + 1], dk.DecodeContext(tokens=torch.zeros(1, 1, dtype=torch.long), generators=[g]))
        assert int(alone) == int(together[b])


@pytest.mark.parametrize("selector", ["sample", "gumbel"])
def test_a_step_drawn_ahead_picks_as_an_eager_step(selector: str) -> None:
    # compile=True draws each row's first uniform before the step (`draw_uniforms`); `sample` takes it
    # through `ctx.uniform()`, and so must gumbel, or its draws shift and the compiled decode differs.
    x = torch.randn(4, 100)
    stage = dk.create(selector)
    for steps in range(1, 4):
        eager = dk.DecodeContext(tokens=torch.zeros(4, 1, dtype=torch.long), generators=row_generators(0, 4))
        ahead = dk.DecodeContext(tokens=torch.zeros(4, 1, dtype=torch.long), generators=row_generators(0, 4))
        for _ in range(steps):
            ahead.draw_uniforms()
            assert torch.equal(stage(x, ahead), stage(x, eager))
