"""Parity with transformers' warpers on the rows where a cut goes wrong (`decodekit.testing.inputs.edge_logits`):
ties at the cut, tokens already removed, all-equal logits, one finite token, `min_keep` above the finite
tokens, one-hot rows; and in float16/bfloat16.

Exact: the same removed set and, where both keep a token, the same value (the input's). Two documented
differences are pinned here instead (docs/samplers.md, each sampler's section):
- `min_keep` keeps every token tied with the last of the `min_keep` (transformers: exactly `min_keep`, the
  ties chosen by the order `torch.topk` / `torch.sort` returns them);
- half-precision logits are judged in float32 (transformers computes the softmax in the input dtype), so the
  kept set is transformers' on the float32 copy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import Tensor

import decodekit as dk
from decodekit.testing.inputs import edge_logits

logits_process = pytest.importorskip("transformers.generation.logits_process")

VOCAB = 300
SEEDS = range(6)
Case = tuple[str, dict[str, Any], Callable[[], Any]]

EXACT: list[Case] = [
    ("min_p", {"p": 0.1}, lambda: logits_process.MinPLogitsWarper(0.1)),
    ("min_p", {"p": 1.0}, lambda: logits_process.MinPLogitsWarper(1.0)),
    ("typical", {"mass": 0.9}, lambda: logits_process.TypicalLogitsWarper(0.9)),
    ("typical", {"mass": 0.3}, lambda: logits_process.TypicalLogitsWarper(0.3)),
    ("epsilon", {"epsilon": 3e-3}, lambda: logits_process.EpsilonLogitsWarper(3e-3)),
    # Epsilon's and eta's min_keep keep ties in transformers too (`scores < kth largest`).
    (
        "epsilon",
        {"epsilon": 0.05, "min_keep": 5},
        lambda: logits_process.EpsilonLogitsWarper(0.05, min_tokens_to_keep=5),
    ),
    ("eta", {"epsilon": 3e-3}, lambda: logits_process.EtaLogitsWarper(3e-3)),
    ("eta", {"epsilon": 0.05, "min_keep": 5}, lambda: logits_process.EtaLogitsWarper(0.05, min_tokens_to_keep=5)),
]
MIN_KEEP: list[Case] = [
    ("min_p", {"p": 0.3, "min_keep": 5}, lambda: logits_process.MinPLogitsWarper(0.3, min_tokens_to_keep=5)),
    ("min_p", {"p": 0.9, "min_keep": 2}, lambda: logits_process.MinPLogitsWarper(0.9, min_tokens_to_keep=2)),
    ("typical", {"mass": 0.3, "min_keep": 4}, lambda: logits_process.TypicalLogitsWarper(0.3, min_tokens_to_keep=4)),
]


def ids(cases: list[Case]) -> list[str]:
    return [f"{name}-{params}" for name, params, _ in cases]


def run(name: str, params: dict[str, Any], x: Tensor) -> Tensor:
    history = torch.zeros(x.shape[0], 1, dtype=torch.long)
    out: Tensor = dk.create(name, **params)(x.clone(), dk.DecodeContext(tokens=history))
    return out


def reference(make_hf: Callable[[], Any], x: Tensor) -> Tensor:
    """transformers' result on the float32 copy of `x`."""
    out: Tensor = make_hf()(torch.zeros(x.shape[0], 1, dtype=torch.long), x.float())
    return out


def assert_values_kept(ours: Tensor, x: Tensor) -> None:
    """Same dtype, every kept value the input's, nothing revived, no NaN."""
    assert ours.dtype == x.dtype
    kept = ~torch.isneginf(ours)
    assert torch.equal(ours[kept], x[kept])
    assert not (kept & torch.isneginf(x)).any()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize(("name", "params", "make_hf"), EXACT, ids=ids(EXACT))
@pytest.mark.parametrize("seed", SEEDS)
def test_edge_rows_match_transformers(
    name: str, params: dict[str, Any], make_hf: Callable[[], Any], seed: int, dtype: torch.dtype
) -> None:
    x = edge_logits(VOCAB, seed=seed, dtype=dtype)
    ours = run(name, params, x)
    assert torch.equal(torch.isneginf(ours), torch.isneginf(reference(make_hf, x)))
    assert_values_kept(ours, x)
    assert (~torch.isneginf(ours)).sum(-1).min() >= 1


def typical_distance(x: Tensor) -> Tensor:
    """|surprise - entropy| `[B, V]`, the order typical sampling keeps tokens in (as transformers computes it)."""
    logp = x.float().log_softmax(-1)
    return (-logp + (logp.exp() * logp).nansum(-1, keepdim=True)).abs()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("name", "params", "make_hf"), MIN_KEEP, ids=ids(MIN_KEEP))
def test_min_keep_keeps_the_ties_transformers_chooses_among(
    name: str, params: dict[str, Any], make_hf: Callable[[], Any], dtype: torch.dtype
) -> None:
    """Ours = transformers' kept set plus exactly the tokens tied with its last kept one (the documented difference)."""
    differ = 0
    for seed in SEEDS:
        x = edge_logits(VOCAB, seed=seed, dtype=dtype)
        if name == "min_p":  # transformers ranks by probability: rows where it underflows to 0 are pinned below
            x = x[((x.float().softmax(-1) > 0) | torch.isneginf(x)).all(-1)]
        ours, theirs = ~torch.isneginf(run(name, params, x)), ~torch.isneginf(reference(make_hf, x))
        order = -x.float() if name != "typical" else typical_distance(x)  # smaller: kept first
        last = order.masked_fill(~theirs, float("-inf")).amax(-1, keepdim=True)  # transformers' last kept
        assert torch.equal(ours, theirs | ((order == last) & torch.isfinite(x)))
        assert not torch.isneginf(run(name, params, x)[ours & ~theirs]).any()
        differ += int((ours != theirs).any(-1).sum())
    assert differ > 0  # the edge rows do reach the difference


def test_min_p_min_keep_ranks_by_logit_where_probabilities_underflow() -> None:
    """Logits 30000, 30000, 20000, 20000, 20000, 0, ...: p = 0.5, 0.5, then 0 for every other token in float32.
    min_keep = 4 keeps the four largest logits and the tie (five); transformers ranks the zero probabilities
    by whatever `torch.topk` returns, here the logit 0 before the 20000s."""
    x = torch.zeros(1, 8)
    x[0, [6, 7]] = 30000.0
    x[0, [1, 3, 5]] = 20000.0
    ours = torch.isfinite(run("min_p", {"p": 0.3, "min_keep": 4}, x))[0].nonzero().flatten().tolist()
    assert ours == [1, 3, 5, 6, 7]
    theirs = torch.isfinite(reference(lambda: logits_process.MinPLogitsWarper(0.3, min_tokens_to_keep=4), x))
    assert theirs.sum() == 4 and theirs[0, [0, 2, 4]].any()  # a logit-0 token kept over a 20000 one


def typical_cut_is_clear(x: Tensor, mass: float) -> Tensor:
    """`[B]`: no cumulative mass (float64, in typical's order) within 1e-5 of `mass`.

    Both implementations sum in float32, each off by ~1e-7 over thousands of tokens, so the position
    where the sum reaches `mass` is theirs to round differently (seed 1 has such a row: exactly 0.8999999,
    ours 0.9000002, transformers' 0.8999999) and is not judged."""
    logp = x.double().log_softmax(-1)
    distance = (-logp + (logp.exp() * logp).nansum(-1, keepdim=True)).abs()
    cum = logp.exp().gather(-1, distance.argsort(-1)).cumsum(-1)
    return ((cum - mass).abs() > 1e-5).all(-1)


@pytest.mark.parametrize("seed", range(2))
def test_many_continuous_rows_match_transformers(seed: int) -> None:
    """512 rows from flat to peaked, a vocabulary of 4,000: not one token on the other side of the cut."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(512, 4000, generator=g) * torch.linspace(0.3, 8.0, 512)[:, None]
    for name, params, make_hf in EXACT:
        judged = typical_cut_is_clear(x, params["mass"]) if name == "typical" else torch.ones(512, dtype=torch.bool)
        assert judged.float().mean() > 0.95
        ours, theirs = run(name, params, x[judged]), reference(make_hf, x[judged])
        assert torch.equal(torch.isneginf(ours), torch.isneginf(theirs)), (name, params)


def test_half_precision_transformers_in_its_dtype_differs() -> None:
    """Why the reference for half precision is the float32 copy: transformers' own cut moves with the dtype."""
    moved = 0
    for seed in SEEDS:
        x = edge_logits(VOCAB, seed=seed, dtype=torch.bfloat16)
        for _, _, make_hf in EXACT:
            in_dtype = make_hf()(torch.zeros(x.shape[0], 1, dtype=torch.long), x.clone())
            moved += int((torch.isneginf(in_dtype) != torch.isneginf(reference(make_hf, x))).sum())
    assert moved > 0
