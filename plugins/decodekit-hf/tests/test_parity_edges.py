"""The standard five and greedy against transformers on the rows where a cut goes wrong
(`decodekit.testing.inputs.edge_logits`), in float32, float16 and bfloat16, and on ragged batches.

Exact wherever transformers is deterministic. Pinned differences (docs/concepts.md):
- `top_p` keeps every token tied with the last one kept; transformers keeps the ones its (unstable)
  sort puts last, a subset that depends on the sort;
- `temperature(0)` is greedy; transformers refuses 0;
- a quotient past the dtype's range saturates at its largest value; transformers' is +inf, whose softmax is NaN;
- half-precision logits are cut in float32 by `top_p` (transformers sums their probabilities in the
  input dtype), so its kept set is transformers' on the float32 copy.
"""

from __future__ import annotations

from typing import cast

import pytest
import torch
from torch import Tensor
from transformers import (
    LogitsProcessorList,
    MinPLogitsWarper,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

import decodekit as dk
from decodekit.testing.inputs import edge_logits

VOCAB = 300
SEEDS = range(6)
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def history(rows: int, seed: int, length: int = 30) -> Tensor:
    return torch.randint(0, VOCAB, (rows, length), generator=torch.Generator().manual_seed(seed))


def run(name: str, x: Tensor, tokens: Tensor, **params: object) -> Tensor:
    out: Tensor = dk.create(name, **params)(x.clone(), dk.DecodeContext(tokens=tokens))
    return out


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", SEEDS)
def test_temperature_top_k_and_repetition_penalty_equal_transformers_bit_for_bit(seed: int, dtype: torch.dtype) -> None:
    x, ids = edge_logits(VOCAB, seed=seed, dtype=dtype), history(12, seed)
    for value in (0.05, 0.7, 1.9):
        ours, theirs = run("temperature", x, ids, value=value), TemperatureLogitsWarper(value)(ids, x.clone())
        # Past the dtype's range transformers' quotient is +inf (softmax: NaN); ours saturates at the largest value.
        overflow = torch.isposinf(theirs)
        assert torch.equal(ours[~overflow], theirs[~overflow])
        assert (ours[overflow] == torch.finfo(dtype).max).all()
        assert overflow.any() == (dtype == torch.float16 and value == 0.05)  # row 10: 30000 / 0.05, in float16
    for k in (1, 2, 5, 7, VOCAB):  # 5: the five tied maxima of row 9; 2 and 7 above row 7's and 8's finite tokens
        assert torch.equal(run("top_k", x, ids, k=k), TopKLogitsWarper(k)(ids, x.clone()))
    for penalty in (0.7, 1.3):
        ours = run("repetition_penalty", x, ids, penalty=penalty)
        assert torch.equal(ours, RepetitionPenaltyLogitsProcessor(penalty)(ids, x.clone()))
        assert ours.dtype == dtype


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("p", [0.3, 0.5, 0.9])
@pytest.mark.parametrize("min_keep", [1, 5])
def test_top_p_is_transformers_plus_the_ties_at_its_cut(p: float, min_keep: int, dtype: torch.dtype) -> None:
    differ = 0
    for seed in SEEDS:
        x, ids = edge_logits(VOCAB, seed=seed, dtype=dtype), history(12, seed)
        ours = run("top_p", x, ids, p=p, min_keep=min_keep)
        theirs = TopPLogitsWarper(p, min_tokens_to_keep=min_keep)(ids, x.float())
        floor = theirs.masked_fill(torch.isneginf(theirs), float("inf")).amin(-1, keepdim=True)  # its last kept
        kept = ~torch.isneginf(ours)
        assert torch.equal(kept, x.float() >= floor)
        assert torch.equal(ours[kept], x[kept]) and ours.dtype == dtype
        differ += int((kept != ~torch.isneginf(theirs)).any(-1).sum())
    assert differ > 0  # ties at the cut do occur in these rows


def test_top_p_on_equal_logits_keeps_all_transformers_half() -> None:
    x = torch.zeros(1, 300)
    assert not torch.isneginf(run("top_p", x, history(1, 0), p=0.5)).any()
    assert torch.isneginf(TopPLogitsWarper(0.5)(history(1, 0), x.clone())).sum() == 150


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("chain", ["greedy", "top_k(5) | greedy", "temperature(0)", "temperature(0.0) | sample"])
def test_greedy_is_transformers_argmax(chain: str, seed: int, dtype: torch.dtype) -> None:
    """transformers' greedy search picks `torch.argmax` of the processed scores: the lowest id among tied maxima."""
    x = edge_logits(VOCAB, seed=seed, dtype=dtype)
    tokens = dk.Chain.parse(chain)(x.clone(), dk.DecodeContext(tokens=history(12, seed)))
    assert torch.equal(tokens, x.argmax(-1))


def test_temperature_zero_is_refused_by_transformers() -> None:
    with pytest.raises(ValueError, match="temperature"):
        TemperatureLogitsWarper(0.0)


def unpadded_rows() -> tuple[list[Tensor], Tensor, Tensor]:
    """Four histories of different lengths, left-padded with 0 as the decode loop does; id 0 is a real token of two."""
    g = torch.Generator().manual_seed(3)
    rows = [torch.randint(1, 20, (n,), generator=g) for n in (3, 25, 12, 2)]
    rows[1][4] = 0
    rows[2][-1] = 0
    T = max(len(r) for r in rows)
    padded = torch.stack([torch.cat([torch.zeros(T - len(r), dtype=torch.long), r]) for r in rows])
    return rows, padded, torch.tensor([len(r) for r in rows])


@pytest.mark.parametrize("params", [{}, {"last_n": 4}, {"include_prompt": False}])
def test_repetition_penalty_ragged_batch_equals_transformers_row_by_row(params: dict[str, object]) -> None:
    """Each row as transformers sees it alone (no padding): `last_n` is its last n tokens, `include_prompt=False`
    its `prompt_ignore_length` (the prompt's length)."""
    rows, padded, lengths = unpadded_rows()
    step = 2  # the last two tokens of each row were generated
    x = torch.randn(len(rows), 20, generator=torch.Generator().manual_seed(4))
    ctx = dk.DecodeContext(tokens=padded, prompt_lengths=lengths - step, step=step)
    ours = dk.create("repetition_penalty", penalty=1.5, **params)(x.clone(), ctx)
    for b, r in enumerate(rows):
        if "last_n" in params:
            hf, ids = RepetitionPenaltyLogitsProcessor(1.5), r[-cast(int, params["last_n"]) :]
        elif "include_prompt" in params:
            hf, ids = RepetitionPenaltyLogitsProcessor(1.5, prompt_ignore_length=len(r) - step), r
        else:
            hf, ids = RepetitionPenaltyLogitsProcessor(1.5), r
        assert torch.equal(ours[b : b + 1], hf(ids[None], x[b : b + 1].clone())), b
    assert not torch.equal(ours, x)


FAST_CHAINS = {
    "top_k(20) | min_p(0.1)": lambda: [TopKLogitsWarper(20), MinPLogitsWarper(0.1)],
    "top_k(20) | temperature(0.7) | min_p(0.2)": lambda: [
        TopKLogitsWarper(20),
        TemperatureLogitsWarper(0.7),
        MinPLogitsWarper(0.2),
    ],
    "repetition_penalty(1.3) | top_k(8) | temperature(1.5)": lambda: [
        RepetitionPenaltyLogitsProcessor(1.3),
        TopKLogitsWarper(8),
        TemperatureLogitsWarper(1.5),
    ],
}


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("chain", FAST_CHAINS)
def test_chains_on_the_fast_path_equal_transformers_lists(chain: str, seed: int) -> None:
    """`distribution` takes the candidate fast path (and redoes marked rows densely): the same as `process` and
    as transformers' processors in the same order, on the edge rows."""
    x, ids = edge_logits(VOCAB, seed=seed), history(12, seed)
    theirs = LogitsProcessorList(FAST_CHAINS[chain]())(cast(torch.LongTensor, ids), x.clone())
    c = dk.Chain.parse(chain)
    for ours in (
        c.distribution(x.clone(), dk.DecodeContext(tokens=ids)),
        c.process(x.clone(), dk.DecodeContext(tokens=ids)),
    ):
        removed = torch.isneginf(ours)
        assert torch.equal(removed, torch.isneginf(theirs))
        torch.testing.assert_close(ours[~removed], theirs[~removed], rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_top_p_half_precision_transformers_in_its_dtype_differs(dtype: torch.dtype) -> None:
    """Why top_p's half-precision reference is transformers on the float32 copy: its own cut moves with the dtype."""
    moved = 0
    for seed in SEEDS:
        x, ids = edge_logits(VOCAB, seed=seed, dtype=dtype), history(12, seed)
        for p in (0.3, 0.5, 0.9):
            in_dtype, in_float32 = TopPLogitsWarper(p)(ids, x.clone()), TopPLogitsWarper(p)(ids, x.float())
            moved += int((torch.isneginf(in_dtype) != torch.isneginf(in_float32)).sum())
    assert moved > 0
