"""Parity with transformers' warpers: the same removed set, the same surviving values."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import Tensor

import decodekit as dk

logits_process = pytest.importorskip("transformers.generation.logits_process")

SEEDS = range(4)


def random_logits(seed: int, batch: int = 4, vocab: int = 2000) -> Tensor:
    """Rows from flat to peaked (scales 0.5 .. 8), one with a block of already removed tokens."""
    g = torch.Generator().manual_seed(seed)
    scales = torch.tensor([0.5, 2.0, 4.0, 8.0])[:batch, None]
    x = torch.randn(batch, vocab, generator=g) * scales
    x[1, : vocab // 4] = float("-inf")
    return x


def history(seed: int, batch: int = 4, length: int = 16, vocab: int = 2000) -> Tensor:
    return torch.randint(0, vocab, (batch, length), generator=torch.Generator().manual_seed(seed + 100))


CASES: list[tuple[str, dict[str, Any], Callable[[], Any]]] = [
    ("min_p", {"p": 0.05}, lambda: logits_process.MinPLogitsWarper(0.05)),
    ("min_p", {"p": 0.3, "min_keep": 5}, lambda: logits_process.MinPLogitsWarper(0.3, min_tokens_to_keep=5)),
    ("typical", {"mass": 0.9}, lambda: logits_process.TypicalLogitsWarper(0.9)),
    ("typical", {"mass": 0.2, "min_keep": 3}, lambda: logits_process.TypicalLogitsWarper(0.2, min_tokens_to_keep=3)),
    ("epsilon", {"epsilon": 3e-4}, lambda: logits_process.EpsilonLogitsWarper(3e-4)),
    (
        "epsilon",
        {"epsilon": 0.05, "min_keep": 4},
        lambda: logits_process.EpsilonLogitsWarper(0.05, min_tokens_to_keep=4),
    ),
    ("eta", {"epsilon": 3e-4}, lambda: logits_process.EtaLogitsWarper(3e-4)),
    ("eta", {"epsilon": 4e-3, "min_keep": 4}, lambda: logits_process.EtaLogitsWarper(4e-3, min_tokens_to_keep=4)),
    ("top_h", {"h": 0.4}, lambda: logits_process.TopHLogitsWarper(0.4)),
]


@pytest.mark.parametrize(("name", "params", "make_hf"), CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
@pytest.mark.parametrize("seed", SEEDS)
def test_matches_transformers(name: str, params: dict[str, Any], make_hf: Callable[[], Any], seed: int) -> None:
    x, ids = random_logits(seed), history(seed)
    ours = dk.create(name, **params)(x, dk.DecodeContext(tokens=ids))
    theirs = make_hf()(ids, x.clone())
    removed = torch.isneginf(ours)
    assert torch.equal(removed, torch.isneginf(theirs))
    assert torch.allclose(ours[~removed], theirs[~removed])
    # Not vacuous: every case removes something and keeps more than one token somewhere.
    assert removed.any() and (~removed).sum(-1).max() > 1
