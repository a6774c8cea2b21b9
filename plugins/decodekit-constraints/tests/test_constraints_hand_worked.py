"""logit_bias, allowed_tokens and the vocabulary checks, on small hand-made cases."""

from __future__ import annotations

import pytest
import torch

import decodekit as dk

INF = float("-inf")
CTX = dk.DecodeContext(tokens=torch.tensor([[1, 2]]))


def test_logit_bias_adds_per_token() -> None:
    x = torch.tensor([[0.0, 1.0, INF, 3.0]])
    out = dk.create("logit_bias", {1: -100.0, 2: 5.0, 3: 0.5})(x, CTX)
    assert out.tolist() == [[0.0, -99.0, INF, 3.5]]  # a removed token stays removed
    assert x.tolist() == [[0.0, 1.0, INF, 3.0]]


def test_logit_bias_from_a_chain_string_and_json_spec() -> None:
    chain = dk.Chain.parse("logit_bias({3: -100}) | sample")
    assert dk.Chain.from_spec(chain.to_spec()) == chain
    assert chain.process(torch.zeros(1, 4), CTX).tolist() == [[0.0, 0.0, 0.0, -100.0]]


def test_allowed_tokens() -> None:
    x = torch.tensor([[0.5, 1.0, INF, 3.0, -2.0]])
    out = dk.create("allowed_tokens", [4, 1, 2])(x, CTX)
    assert out.tolist() == [[INF, 1.0, INF, INF, -2.0]]  # 2 was removed before: it stays removed


def test_min_new_tokens_counts_generated_tokens() -> None:
    x = torch.zeros(1, 5)
    stage = dk.create("min_new_tokens", n=2, stop_tokens=[4])
    for step, banned in [(0, True), (1, True), (2, False), (3, False)]:
        ctx = dk.DecodeContext(tokens=torch.zeros(1, 3 + step, dtype=torch.long), step=step)
        assert bool(torch.isneginf(stage(x, ctx)[0, 4])) == banned


def test_bad_words_single_and_multi_token() -> None:
    # Context "1 2". [3] is always banned; [1, 2, 4] bans 4 and [2, 1] bans 1 (the context ends with
    # their prefixes); [1, 0] would need the context to end with 1, so 0 stays.
    out = dk.create("bad_words", [[3], [1, 2, 4], [2, 1], [1, 0]])(torch.zeros(1, 5), CTX)
    assert torch.isneginf(out).tolist() == [[False, True, False, True, True]]


@pytest.mark.parametrize(
    ("name", "params", "param"),
    [
        ("logit_bias", {"bias": {7: 1.0}}, "bias"),
        ("sequence_bias", {"biases": [[[1, 9], 1.0]]}, "biases"),
        ("bad_words", {"sequences": [[9]]}, "sequences"),
        ("allowed_tokens", {"tokens": [0, 8]}, "tokens"),
        ("min_new_tokens", {"n": 1, "stop_tokens": [5]}, "stop_tokens"),
        ("min_new_tokens", {"n": 0, "stop_tokens": [5]}, "stop_tokens"),  # n = 0 removes nothing, but the id is bad
    ],
)
def test_token_ids_outside_the_vocabulary_are_a_parameter_error(
    name: str, params: dict[str, object], param: str
) -> None:
    with pytest.raises(dk.ParameterError, match=rf"{name}: {param} holds token id \d+, outside the vocabulary of 5"):
        dk.create(name, **params)(torch.zeros(1, 5), CTX)
