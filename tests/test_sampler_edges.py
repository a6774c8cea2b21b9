"""Parameter values at the edges of what the samplers' models accept, and inputs that broke them:
every one works, never revives a removed token (also not as NaN), and the fast path agrees."""

from __future__ import annotations

import pytest
import torch

import decodekit as dk
from decodekit.stage import Candidates, densify
from decodekit.testing import NEG, ctx_for
from tinymodels import tiny_gpt


def logits_with_edges(dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Rows with zeros, -inf, large and tiny magnitudes (within the dtype's range)."""
    big = torch.finfo(dtype).max / 8
    x = torch.tensor(
        [
            [0.0, 1.0, -1.0, NEG, 2.0, 0.5, NEG, -3.0],
            [big, -big, 0.0, NEG, 1e-30, -1e-30, 3.0, 2.0],
        ],
        dtype=torch.float64,
    )
    return x.to(dtype)


EDGE_CHAINS = [
    "temperature(1e4)",
    "temperature(5e-324)",
    "temperature(1e-5)",
    "repetition_penalty(1e4)",
    "repetition_penalty(1e-4)",
    "dynamic_temperature(1.0, 1.0, exponent=100.0)",
    "top_p(0.5, min_keep=1000000000000000000000000000000)",
    "min_p(0.1, min_keep=1000000000000000000000000000000)",
    "epsilon(0.1, min_keep=1000000000000000000000000000000)",
    "xtc(1.0, threshold=1e-320)",
    "xtc(1.0, threshold=0.0)",
    "top_k(1000000000000000000000000000000)",
]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
@pytest.mark.parametrize("text", EDGE_CHAINS)
def test_edge_parameters_work_and_never_revive(text: str, dtype: torch.dtype) -> None:
    chain = dk.Chain.parse(text)
    x = logits_with_edges(dtype)
    out, ctx = x.clone(), ctx_for(2, history=6)
    for stage in chain.processors:  # each in the logits' dtype (`process`, like `step`, works in float32 at least)
        out = stage(out, ctx)
    assert out.dtype == dtype
    assert not bool((torch.isposinf(out) & ~torch.isposinf(x)).any()), f"{text}: made +inf"
    assert not bool((torch.isneginf(x) & ~torch.isneginf(out)).any()), f"{text}: revived a removed token"
    assert not bool(torch.isnan(out).any()), f"{text}: made NaN"
    fast = chain._process_fast(x.clone(), ctx_for(2, history=6))
    if isinstance(fast, Candidates):
        fast = densify(fast, x.shape[1])
    held = ~torch.isnan(fast).any(-1)
    assert torch.equal(fast[held], out[held]), f"{text}: fast path != process"
    tokens = chain(x.clone(), ctx_for(2, history=6))
    assert not bool(torch.isneginf(x.gather(1, tokens[:, None])).any())


def test_a_tiny_temperature_is_greedy_and_bounds_name_the_range() -> None:
    x = torch.tensor([[0.0, 2.0, NEG, 2.0 - 1e-6]])
    assert torch.equal(dk.create("temperature", value=5e-324)(x, ctx_for()), torch.tensor([[NEG, 2.0, NEG, NEG]]))
    with pytest.raises(dk.ParameterError, match=r"value=3.4e\+38.*value <= 10000$"):
        dk.create("temperature", value=3.4e38)


def test_history_ids_outside_the_vocabulary_count_nowhere() -> None:
    x = torch.randn(2, 10, generator=torch.Generator().manual_seed(0))
    history = torch.tensor([[3, 12, 3, 50, 12], [1, 2, 99, 1, 2]])  # ids 12, 50, 99 are >= V = 10
    ctx = dk.DecodeContext(tokens=history, step=3)  # generated: [3, 50, 12] and [99, 1, 2]
    seen = torch.zeros(2, 10)
    seen[0, 3], seen[1, 1], seen[1, 2] = 1, 1, 1  # the ids in the vocabulary, once each in the window
    rp = torch.where(x > 0, x / 1.5, x * 1.5)
    expected = {
        "repetition_penalty(1.5)": torch.where(seen > 0, rp, x),
        "frequency_penalty(0.5)": x - 0.5 * seen,
        "presence_penalty(0.5)": x - 0.5 * seen,
    }
    for text, want in expected.items():
        torch.testing.assert_close(dk.Chain.parse(text).process(x, ctx), want, msg=text)
    for text in ("no_repeat_ngram(2)", "dry(0.8)"):
        out = dk.Chain.parse(text).process(x, ctx)
        assert out.shape == x.shape and not bool(torch.isnan(out).any()), text


def test_token_ids_past_int64_are_parameter_errors() -> None:
    with pytest.raises(dk.ParameterError, match="tokens"):
        dk.create("allowed_tokens", tokens=[2**63])
    with pytest.raises(dk.ParameterError, match="bias"):
        dk.create("logit_bias", bias={2**64: 1.0})


def test_a_selector_on_a_row_it_cannot_sample_is_a_numerics_error_in_generate() -> None:
    model = tiny_gpt(2)
    for selector in ("mirostat_v2", "adaptive_p(0.3)", "gumbel", "sample", "greedy"):
        with pytest.raises(dk.NumericsError, match=r"step \d+, row 0: .*every token was removed"):
            dk.generate(model, [[1, 2, 3]], chain=f"no_repeat_ngram(1) | {selector}", max_new_tokens=200, cache="none")


def test_gumbel_on_float64_beyond_float32_never_picks_a_removed_token() -> None:
    x = torch.tensor([[1e300, NEG, 1e299, NEG]], dtype=torch.float64)
    for seed in range(20):
        assert int(dk.create("gumbel")(x, ctx_for(seed=seed))) == 0


def test_quotients_above_the_range_saturate() -> None:
    x = torch.tensor([[10.0, -1.0, NEG]], dtype=torch.float16)
    top = torch.finfo(torch.float16).max
    rp = dk.create("repetition_penalty", penalty=1e-4)(x, dk.DecodeContext(tokens=torch.tensor([[0, 1, 2]])))
    assert rp[0, 0] == top and rp[0, 2] == NEG  # 10 / 1e-4 saturates; -inf stays removed
    assert rp[0, 1] == torch.tensor(-1e-4, dtype=torch.float16)  # -1 * 1e-4
    t = dk.create("temperature", value=1e-5)(x, ctx_for())
    assert t[0, 0] == top and t[0, 2] == NEG
