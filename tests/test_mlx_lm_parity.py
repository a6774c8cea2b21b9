"""mlx-lm's sampling options as decodekit chains (docs/samplers.md, "mlx-lm"), checked against the real mlx-lm.

`tests/fixtures/mlx_lm_golden.json` holds what mlx-lm 0.32.2's own processors and samplers made of fixed
logits and a fixed history (`benchmarks/mlx_lm_golden.py`, run in a venv with mlx-lm). `mlx_lm_chain` is the
table in the docs as code; each case's chain must give mlx-lm's processed logits and final probabilities
(its kept set exactly), or its greedy token. The hand-worked cases pin each option's rule as mlx-lm's
source has it, independently of the fixture.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import Tensor

import decodekit as dk

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "mlx_lm_golden.json").read_text())
CASES = {case["name"]: case for case in FIXTURE["cases"]}
NEG_INF = float("-inf")


def mlx_lm_chain(processors: dict[str, Any], sampler: dict[str, Any], *, only_processors: bool = False) -> dk.Chain:
    """The docs' table: `make_logits_processors(**processors)` then `make_sampler(**sampler)`, as one chain."""
    stages = []
    if processors.get("logit_bias"):
        bias = ", ".join(f"{int(t)}: {b}" for t, b in processors["logit_bias"].items())
        stages.append(f"logit_bias({{{bias}}})")
    # mlx-lm: each penalty skipped when None or 0; window: the last n of prompt + generated (0 or None: all).
    for name, default_on in (("repetition", False), ("presence", True), ("frequency", True)):
        value = processors.get(f"{name}_penalty")
        if value:
            last_n = processors.get(f"{name}_context_size", 20) or None
            stages.append(f"{name}_penalty({value}, {last_n}{', true' if default_on else ''})")
    if only_processors:
        return dk.Chain.parse(" | ".join([*stages, "sample"]))
    temp = sampler.get("temp", 0.0)
    if temp == 0:  # greedy_sampler: every truncation is skipped
        return dk.Chain.parse(" | ".join([*stages, "greedy"]))
    if 0 < sampler.get("top_p", 0.0) < 1:
        stages.append(f"top_p({sampler['top_p']})")
    if sampler.get("min_p", 0.0) != 0:
        stages.append(f"min_p({sampler['min_p']}, {sampler.get('min_tokens_to_keep', 1)})")
    if sampler.get("xtc_probability", 0.0) > 0:
        special = sampler.get("xtc_special_tokens") or []
        stages.append(f"xtc({sampler['xtc_probability']}, {sampler.get('xtc_threshold', 0.1)}, 1, {special})")
    if sampler.get("top_k", 0) > 0:
        stages.append(f"top_k({sampler['top_k']})")
    return dk.Chain.parse(" | ".join([*stages, f"temperature({temp})", "sample"]))


def row(values: list[float | None]) -> Tensor:
    return torch.tensor([[NEG_INF if v is None else v for v in values]], dtype=torch.float32)


def context(history: list[int]) -> dk.DecodeContext:
    return dk.DecodeContext(tokens=torch.tensor([history]), generators=dk.context.row_generators([0], 1))


def probabilities(chain: dk.Chain, logits: Tensor, history: list[int]) -> Tensor:
    return torch.softmax(chain.process(logits, context(history)), -1)[0]


def case_inputs(case: dict[str, Any]) -> tuple[Tensor, list[int]]:
    return row(FIXTURE["rows"][case["row"]]), FIXTURE["history"]


@pytest.mark.parametrize("name", sorted(CASES))
def test_processed_logits_match_mlx_lm(name: str) -> None:
    case = CASES[name]
    logits, history = case_inputs(case)
    chain = mlx_lm_chain(case.get("processors", {}), {}, only_processors=True)
    ours = chain.process(logits, context(history))
    # mlx-lm's frequency penalty subtracts once per occurrence (x - f - f - f): a few ulps from x - 3f.
    torch.testing.assert_close(ours, row(case["processed"]), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", sorted(n for n, c in CASES.items() if "probs" in c and "differs" not in c))
def test_final_distribution_matches_mlx_lm(name: str) -> None:
    case = CASES[name]
    logits, history = case_inputs(case)
    ours = probabilities(mlx_lm_chain(case.get("processors", {}), case["sampler"]), logits, history)
    theirs = torch.tensor([0.0 if p is None else p for p in case["probs"]])
    kept_ours, kept_theirs = ours > 0, theirs > 0
    if case.get("mlx_picks_among_ties"):
        # mlx-lm's argpartition keeps exactly k (or min_tokens_to_keep) and picks among the tied; we keep the ties.
        extra = kept_ours & ~kept_theirs
        assert bool((kept_theirs <= kept_ours).all()) and extra.any()
        tied = logits[0][extra]
        assert bool((tied == logits[0][kept_theirs].min()).all()), "only tokens tied with mlx-lm's last one are extra"
        return
    assert kept_ours.tolist() == kept_theirs.tolist()
    torch.testing.assert_close(ours, theirs, rtol=2e-6, atol=1e-7)


def test_xtc_threshold_is_strict_in_mlx_lm() -> None:
    # The documented difference: p == threshold is a top choice here (llama.cpp), not in mlx-lm (p > threshold).
    case = CASES["xtc_probability_at_threshold"]
    logits, history = case_inputs(case)
    assert case["probs"] == [0.5, 0.25, 0.25]  # one top choice above 0.25 in mlx-lm: nothing removed
    ours = probabilities(mlx_lm_chain({}, case["sampler"]), logits, history)
    assert ours.tolist() == [0.0, 0.5, 0.5]  # three top choices here: 0.5 goes
    # What to do: a threshold 1e-6 above (float32 log-space resolution) gives mlx-lm's result.
    strict = dict(case["sampler"], xtc_threshold=0.25 + 1e-6)
    assert probabilities(mlx_lm_chain({}, strict), logits, history).tolist() == case["probs"]


@pytest.mark.parametrize("name", sorted(n for n, c in CASES.items() if "token" in c))
def test_greedy_token_matches_mlx_lm(name: str) -> None:
    case = CASES[name]
    logits, history = case_inputs(case)
    chain = mlx_lm_chain(case.get("processors", {}), case.get("sampler", {}))
    assert chain(logits, context(history)).item() == case["token"]


# Chi-square critical values at p = 0.001, by degrees of freedom (fixed draws: the statistic is fixed too).
CHI2_999 = {19: 43.82, 39: 72.05}


@pytest.mark.parametrize("name", sorted(n for n, c in CASES.items() if "counts" in c))
def test_categorical_sampling_draws_from_our_distribution(name: str) -> None:
    # mlx-lm's categorical_sampling (20,000 draws, mx.random.seed(0)) against our chain's probabilities.
    case = CASES[name]
    logits, history = case_inputs(case)
    ours = probabilities(mlx_lm_chain(case.get("processors", {}), case["sampler"]), logits, history).double()
    counts = torch.tensor(case["counts"], dtype=torch.float64)
    assert counts[ours == 0].sum() == 0
    expected = ours[ours > 0] * counts.sum()
    chi2 = float(((counts[ours > 0] - expected) ** 2 / expected).sum())
    assert chi2 < CHI2_999[int((ours > 0).sum()) - 1]


def test_xtc_applies_with_chance_probability_in_mlx_lm() -> None:
    # apply_xtc skips when its uniform > probability: it applies with chance `probability`, as ours.
    draws = FIXTURE["xtc_draws"]
    n, p = draws["calls"], draws["probability"]
    assert abs(draws["applied"] - n * p) < 4 * math.sqrt(n * p * (1 - p))


# Hand-worked, from mlx-lm's sample_utils.py: one case per option.

P = [0.5, 0.25, 0.15, 0.1]  # probabilities of tokens 0..3
HISTORY = [3, 1, 2, 1, 1]  # prompt and generated alike: mlx-lm's window reaches into the prompt


def hand(processors: dict[str, Any], sampler: dict[str, Any], logits: list[float] | None = None) -> list[float]:
    x = torch.tensor([logits]) if logits is not None else torch.tensor([P]).log()
    return [round(v, 6) for v in probabilities(mlx_lm_chain(processors, sampler), x, HISTORY).tolist()]


def norm(weights: list[float]) -> list[float]:
    return [round(w / sum(weights), 6) for w in weights]


def test_hand_temp_scales_after_the_truncations() -> None:
    # categorical_sampling(logprobs * (1 / temp)): p ** 2 at temp 0.5, after top_p has cut on the temp-1 p.
    assert hand({}, {"temp": 0.5}) == norm([p**2 for p in P])
    assert hand({}, {"temp": 2.0, "top_p": 0.7}) == norm([0.5**0.5, 0.25**0.5, 0, 0])


def test_hand_temp_zero_is_greedy_and_skips_the_sampler_options() -> None:
    chain = mlx_lm_chain({}, {"temp": 0.0, "top_k": 1, "xtc_probability": 1.0, "xtc_threshold": 0.1})
    assert str(chain) == "greedy"
    assert chain(torch.tensor([[1.0, 3.0, 3.0]]), context(HISTORY)).item() == 1  # mx.argmax: first of the tied


def test_hand_top_p() -> None:
    # dropped iff the mass above it (in sorted order) >= top_p: 0.5 < 0.7 keeps token 1; 0.75 >= 0.7 drops 2.
    assert hand({}, {"temp": 1.0, "top_p": 0.7}) == norm([0.5, 0.25, 0, 0])
    assert hand({}, {"temp": 1.0, "top_p": 0.5}) == norm([0.5, 0, 0, 0])  # 0.5 >= 0.5: token 1 dropped


def test_hand_min_p_and_min_tokens_to_keep() -> None:
    # keep logprob >= max + log(min_p): 0.5 * 0.4 = 0.2 keeps 0.25; min_tokens_to_keep 3 keeps 0.15 too.
    assert hand({}, {"temp": 1.0, "min_p": 0.4}) == norm([0.5, 0.25, 0, 0])
    assert hand({}, {"temp": 1.0, "min_p": 0.4, "min_tokens_to_keep": 3}) == norm([0.5, 0.25, 0.15, 0])


def test_hand_top_k_after_xtc() -> None:
    # xtc (threshold 0.2): 0.5 and 0.25 are top choices, 0.5 goes; then top_k(2) keeps 0.25 and 0.15.
    assert hand({}, {"temp": 1.0, "xtc_probability": 1.0, "xtc_threshold": 0.2, "top_k": 2}) == norm([0, 0.25, 0.15, 0])


def test_hand_xtc_special_tokens() -> None:
    # token 0 special: it stays, 0.25 (the least top choice) stays, nothing else was above it.
    sampler = {"temp": 1.0, "xtc_probability": 1.0, "xtc_threshold": 0.2, "xtc_special_tokens": [0]}
    assert hand({}, sampler) == norm(P)


def test_hand_logit_bias() -> None:
    assert hand({"logit_bias": {"3": math.log(5.0)}}, {"temp": 1.0}) == norm([0.5, 0.25, 0.15, 0.5])


def test_hand_repetition_penalty_window_includes_the_prompt() -> None:
    # Window 2: tokens 1, 1 -> logit 1 (2.0 > 0) / 2; window 0: the whole history, 3 and 2 (negative) * 2 too.
    x = [0.0, 2.0, -1.0, -0.5]
    assert hand({"repetition_penalty": 2.0, "repetition_context_size": 2}, {"temp": 1.0}, x) == hand(
        {}, {"temp": 1.0}, [0.0, 1.0, -1.0, -0.5]
    )
    assert hand({"repetition_penalty": 2.0, "repetition_context_size": 0}, {"temp": 1.0}, x) == hand(
        {}, {"temp": 1.0}, [0.0, 1.0, -2.0, -1.0]
    )


def test_hand_presence_and_frequency_penalties() -> None:
    # Window 4 = [1, 2, 1, 1]: presence subtracts 1 once from 1 and 2; frequency 0.5 per occurrence: 1.5 and 0.5.
    x = [0.0, 0.0, 0.0, 0.0]
    assert hand({"presence_penalty": 1.0, "presence_context_size": 4}, {"temp": 1.0}, x) == hand(
        {}, {"temp": 1.0}, [0.0, -1.0, -1.0, 0.0]
    )
    assert hand({"frequency_penalty": 0.5, "frequency_context_size": 4}, {"temp": 1.0}, x) == hand(
        {}, {"temp": 1.0}, [0.0, -1.5, -0.5, 0.0]
    )


# A second implementation of `make_sampler` (mlx_lm/sample_utils.py: apply_top_p, apply_min_p, apply_xtc,
# apply_top_k, categorical_sampling), in numpy, for the options' off values and seeded rows the fixture lacks.


def mlx_lm_probs(logits: Tensor, sampler: dict[str, Any], xtc_draw: float = 0.0) -> Tensor:
    """What `make_sampler(**sampler)` samples from, given one row of logits (`generate_step` passes logprobs)."""
    x = logits[0].double().log_softmax(-1).float().numpy()  # temp > 0 (temp 0 is argmax: the fixture's cases)
    top_p = sampler.get("top_p", 0.0)
    if 0 < top_p < 1:  # kept: ascending cumulative probability > 1 - top_p
        order = np.argsort(x, kind="stable")
        keep = np.empty(len(x), bool)
        keep[order] = np.cumsum(np.exp(x)[order], dtype=np.float32) > 1 - top_p
        x = np.where(keep, x, -np.inf)
    if sampler.get("min_p", 0.0) != 0:
        remove = x < x.max() + math.log(sampler["min_p"])
        keep_n = sampler.get("min_tokens_to_keep", 1)
        if keep_n > 1:
            remove[np.argpartition(x, -keep_n)[-keep_n:]] = False
        x = np.where(remove, -np.inf, x)
    if sampler.get("xtc_probability", 0.0) > 0 and not xtc_draw > sampler["xtc_probability"]:
        p = np.exp(x - x.max())
        p /= p.sum()
        mask = p > np.where(p > sampler.get("xtc_threshold", 0.1), p, np.inf).min()
        mask[sampler.get("xtc_special_tokens") or []] = False
        x = np.where(mask, -np.inf, x)
    top_k = sampler.get("top_k", 0)
    if top_k > 0:
        x[np.argpartition(-x, top_k - 1)[top_k:]] = -np.inf
    return torch.from_numpy(x).mul(1 / sampler["temp"]).softmax(-1)


SAMPLERS = {
    "top_p_0_off": {"temp": 0.9, "top_p": 0.0},
    "top_p_1_off": {"temp": 0.9, "top_p": 1.0},
    "min_p_0_off": {"temp": 1.3, "min_p": 0.0},
    "top_k_0_off": {"temp": 0.7, "top_k": 0},
    "xtc_0_off": {"temp": 1.0, "xtc_probability": 0.0, "xtc_threshold": 0.05},
    "top_p": {"temp": 0.8, "top_p": 0.85},
    "min_p_keep": {"temp": 1.0, "min_p": 0.3, "min_tokens_to_keep": 6},
    "xtc": {"temp": 1.0, "xtc_probability": 1.0, "xtc_threshold": 0.05},
    "top_k": {"temp": 1.5, "top_k": 9},
    "together": {"temp": 0.6, "top_p": 0.9, "min_p": 0.02, "xtc_probability": 1.0, "xtc_threshold": 0.06, "top_k": 12},
}


@pytest.mark.parametrize("name", sorted(SAMPLERS))
@pytest.mark.parametrize("seed", range(5))
def test_chain_samples_what_make_sampler_samples(name: str, seed: int) -> None:
    logits = torch.randn(1, 60, generator=torch.Generator().manual_seed(seed)) * 2.5
    sampler = SAMPLERS[name]
    ours = torch.softmax(mlx_lm_chain({}, sampler).process(logits, context(HISTORY)), -1)[0]
    theirs = mlx_lm_probs(logits, sampler)
    assert (ours > 0).tolist() == (theirs > 0).tolist()
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)


def test_top_p_keeps_ties_mlx_lm_keeps_those_its_sort_puts_last() -> None:
    # Four tokens of 0.25, top_p 0.6: ascending cumulative 0.25, 0.5, 0.75, 1 > 0.4 keeps three in mlx-lm;
    # here the third reaches 0.6 and every token tied with it stays (all four).
    logits = torch.zeros(1, 4)
    assert int((mlx_lm_probs(logits, {"temp": 1.0, "top_p": 0.6}) > 0).sum()) == 3
    assert int((probabilities(mlx_lm_chain({}, {"temp": 1.0, "top_p": 0.6}), logits, HISTORY) > 0).sum()) == 4
