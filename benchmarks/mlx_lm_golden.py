"""Golden data from the real mlx-lm: its logits processors and samplers on fixed logits and histories.

mlx-lm does not install in decodekit's environment (it pins other transformers versions, and runs on
Apple's mlx), so this script runs in a scratch venv of its own and writes a JSON fixture that
`tests/test_mlx_lm_parity.py` checks decodekit's chains against (docs/samplers.md, "mlx-lm"):

    python3 -m venv /tmp/mlx-venv && /tmp/mlx-venv/bin/pip install 'mlx[cpu]==0.32.4' mlx-lm==0.32.2
    /tmp/mlx-venv/bin/python benchmarks/mlx_lm_golden.py tests/fixtures/mlx_lm_golden.json

It does what `mlx_lm.generate.generate_step` does with each step's logits, with mlx-lm's own functions:
the processors of `make_logits_processors(...)` in their order on `(tokens, logits [1, V])` (`tokens` the
prompt and the generated tokens), then `logprobs = logits - logsumexp(logits)`, then the sampler
`make_sampler(...)`: its truncations (the list `sampling_methods` in the sampler's closure, in mlx-lm's
order) and `categorical_sampling(logprobs, temp)`, which draws from `softmax(logprobs * (1 / temp))`
(20,000 draws of it are recorded for one case, to check that). With `temp == 0` the sampler is
`greedy_sampler` and the token is recorded. Each case records the processed logits and the final
probabilities (None: -inf, zero probability). numpy only builds the inputs (seeded).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import mlx.core as mx
import numpy as np
from mlx_lm import sample_utils as su

V = 40


def f32(values: Any) -> list[float | None]:
    """A float32 row as JSON: 9 significant digits (float32 round-trips), None for -inf."""
    return [None if v == -np.inf else float(f"{v:.9g}") for v in np.asarray(values, np.float32).ravel()]


def inputs() -> dict[str, Any]:
    rng = np.random.default_rng(20261204)
    plain = rng.normal(0, 2, V)  # continuous, no ties
    peaked = rng.normal(0, 1, V)
    peaked[[4, 9, 17, 30]] = [3.4, 3.1, 2.9, 2.2]  # several tokens above p = 0.1: XTC has work
    ties = np.round(rng.normal(0, 1.5, V) * 2) / 2  # many ties
    ties[[2, 5, 13]] = 3.0  # three tokens tied at the top
    history = rng.integers(0, V, 34)
    history[-12:] = history[-24:-12]  # a repeat, so counts reach 2 and 3
    return {
        "rows": {
            "plain": f32(plain),
            "peaked": f32(peaked),
            "ties": f32(ties),
            "at_threshold": f32(np.log(np.array([0.5, 0.25, 0.25], np.float32))),  # p exact in float32
        },
        "history": [int(t) for t in history],
    }


def sampler_methods(sampler: Any) -> tuple[list[Any], float]:
    """The truncations a `make_sampler` sampler applies, in its order, and its temperature (its closure)."""
    cells = dict(zip(sampler.__code__.co_freevars, (c.cell_contents for c in sampler.__closure__)))
    return cells["sampling_methods"], cells["temp"]


def run_case(case: dict[str, Any], data: dict[str, Any]) -> dict[str, Any]:
    logits = mx.array([data["rows"][case["row"]]], dtype=mx.float32)
    tokens = mx.array(data["history"])
    for processor in su.make_logits_processors(**case.get("processors", {})):
        logits = processor(tokens, logits)
    out = dict(case, processed=f32(logits))
    logprobs = logits - mx.logsumexp(logits, keepdims=True)  # generate_step's normalisation
    sampler = su.make_sampler(**case.get("sampler", {}))
    if sampler is su.greedy_sampler:
        out["token"] = int(sampler(logprobs).item())
        return out
    methods, temp = sampler_methods(sampler)
    for method in methods:
        logprobs = method(logprobs)
    scaled = logprobs * (1.0 / temp)  # categorical_sampling's logits
    out["probs"] = f32(mx.where(scaled == -mx.inf, -mx.inf, mx.softmax(scaled, axis=-1)))
    if case.get("draws"):
        mx.random.seed(0)
        drawn = su.categorical_sampling(mx.repeat(logprobs, case["draws"], axis=0), temp)
        out["counts"] = np.bincount(np.array(drawn), minlength=V).tolist()
    return out


def xtc_applied_fraction(data: dict[str, Any], probability: float, calls: int) -> dict[str, Any]:
    """How often `apply_xtc` changes the row when it may (`probability` is the chance it applies)."""
    logits = mx.array([data["rows"]["peaked"]])
    logprobs = logits - mx.logsumexp(logits, keepdims=True)
    mx.random.seed(1)
    applied = sum(bool(mx.any(su.apply_xtc(logprobs, probability, 0.1, []) != logprobs).item()) for _ in range(calls))
    return {"probability": probability, "calls": calls, "applied": applied}


def cases() -> list[dict[str, Any]]:
    ctx20 = {"repetition_context_size": 20}
    return [
        # One option at a time (temp 1 where a sampler is needed).
        {"name": "temp", "row": "plain", "sampler": {"temp": 0.7}, "draws": 20000},
        {"name": "temp_hot", "row": "peaked", "sampler": {"temp": 1.6}},
        {"name": "greedy", "row": "plain", "sampler": {"temp": 0.0}},
        {"name": "greedy_ties", "row": "ties", "sampler": {"temp": 0.0}},
        {"name": "top_p", "row": "plain", "sampler": {"temp": 1.0, "top_p": 0.8}},
        {"name": "top_p_ties", "row": "ties", "sampler": {"temp": 1.0, "top_p": 0.2}},  # cut inside a 4-way tie
        {"name": "top_p_one", "row": "peaked", "sampler": {"temp": 1.0, "top_p": 1.0}},
        {"name": "min_p", "row": "plain", "sampler": {"temp": 1.0, "min_p": 0.1}},
        {"name": "min_p_keep", "row": "plain", "sampler": {"temp": 1.0, "min_p": 0.5, "min_tokens_to_keep": 5}},
        {"name": "min_p_ties", "row": "ties", "sampler": {"temp": 1.0, "min_p": 0.3}},
        {
            "name": "min_p_keep_ties",
            "row": "ties",
            "sampler": {"temp": 1.0, "min_p": 0.9, "min_tokens_to_keep": 7},
            "mlx_picks_among_ties": True,
        },
        {"name": "top_k", "row": "plain", "sampler": {"temp": 1.0, "top_k": 7}},
        {"name": "top_k_ties", "row": "ties", "sampler": {"temp": 1.0, "top_k": 3}, "mlx_picks_among_ties": True},
        {"name": "xtc", "row": "peaked", "sampler": {"temp": 1.0, "xtc_probability": 1.0, "xtc_threshold": 0.1}},
        {"name": "xtc_ties", "row": "ties", "sampler": {"temp": 1.0, "xtc_probability": 1.0, "xtc_threshold": 0.03}},
        {
            "name": "xtc_special",
            "row": "peaked",
            "sampler": {"temp": 1.0, "xtc_probability": 1.0, "xtc_threshold": 0.1, "xtc_special_tokens": [4, 17]},
        },
        {
            "name": "xtc_special_least",
            "row": "peaked",
            "sampler": {"temp": 1.0, "xtc_probability": 1.0, "xtc_threshold": 0.08, "xtc_special_tokens": [30]},
        },
        {
            "name": "xtc_probability_at_threshold",
            "row": "at_threshold",
            "sampler": {"temp": 1.0, "xtc_probability": 1.0, "xtc_threshold": 0.25},
            "differs": "xtc_threshold_is_strict",
        },
        {"name": "logit_bias", "row": "plain", "processors": {"logit_bias": {3: 2.5, 7: -1.0, 11: 10.0}}},
        {"name": "repetition_penalty", "row": "plain", "processors": {"repetition_penalty": 1.5, **ctx20}},
        {"name": "repetition_penalty_below_1", "row": "ties", "processors": {"repetition_penalty": 0.8, **ctx20}},
        {
            "name": "repetition_penalty_whole_context",
            "row": "plain",
            "processors": {"repetition_penalty": 1.3, "repetition_context_size": 0},
        },
        {
            "name": "presence_penalty",
            "row": "plain",
            "processors": {"presence_penalty": 0.7, "presence_context_size": 20},
        },
        {
            "name": "frequency_penalty",
            "row": "plain",
            "processors": {"frequency_penalty": 0.4, "frequency_context_size": 20},
        },
        {
            "name": "frequency_penalty_short",
            "row": "ties",
            "processors": {"frequency_penalty": -0.5, "frequency_context_size": 5},
        },
        {
            "name": "penalties_default_windows",  # each context size left at mlx-lm's default, 20
            "row": "ties",
            "processors": {"repetition_penalty": 1.2, "presence_penalty": 0.3, "frequency_penalty": 0.2},
        },
        # Chains.
        {
            "name": "chain_hf_like",
            "row": "plain",
            "processors": {"logit_bias": {3: 2.5, 11: -4.0}, "repetition_penalty": 1.3, **ctx20},
            "sampler": {"temp": 0.8, "top_p": 0.9, "min_p": 0.05, "top_k": 10},
        },
        {
            "name": "chain_openai_like",
            "row": "peaked",
            "processors": {
                "presence_penalty": 0.5,
                "presence_context_size": 16,
                "frequency_penalty": 0.3,
                "frequency_context_size": 16,
            },
            "sampler": {
                "temp": 1.2,
                "min_p": 0.02,
                "min_tokens_to_keep": 3,
                "xtc_probability": 1.0,
                "xtc_threshold": 0.1,
                "top_k": 8,
            },
        },
        {
            "name": "chain_everything",
            "row": "peaked",
            "processors": {
                "logit_bias": {9: 0.5, 20: 1.5},
                "repetition_penalty": 1.2,
                "repetition_context_size": 24,
                "presence_penalty": 0.2,
                "presence_context_size": 30,
                "frequency_penalty": 0.1,
                "frequency_context_size": 10,
            },
            "sampler": {
                "temp": 0.6,
                "top_p": 0.95,
                "min_p": 0.01,
                "xtc_probability": 1.0,
                "xtc_threshold": 0.08,
                "xtc_special_tokens": [9],
                "top_k": 20,
            },
            "draws": 20000,
        },
        {
            "name": "chain_greedy_ignores_sampler_options",
            "row": "peaked",
            "processors": {"repetition_penalty": 1.4, **ctx20},
            "sampler": {"temp": 0.0, "top_p": 0.5, "xtc_probability": 1.0, "xtc_threshold": 0.1, "top_k": 3},
        },
    ]


def main() -> None:
    start = time.perf_counter()
    data = inputs()
    out = {
        "mlx": mx.__version__,
        "mlx_lm": __import__("mlx_lm").__version__,
        **data,
        "cases": [run_case(case, data) for case in cases()],
        "xtc_draws": xtc_applied_fraction(data, 0.3, 4000),
    }
    text = json.dumps(out, indent=None, separators=(",", ":"))
    with open(sys.argv[1], "w") as f:
        f.write(text + "\n")
    print(f"{len(out['cases'])} cases, {len(text)} bytes, {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
