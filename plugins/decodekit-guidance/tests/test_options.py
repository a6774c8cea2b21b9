"""Bad parameters: a `dk.ParameterError` naming the parameter, the value and what is allowed, at the call
(`dk.stream`'s too); the registration."""

from __future__ import annotations

import re

import pytest
from decodekit_guidance.strategy import cfg

import decodekit as dk
from decodekit.engine import check_rows
from decodekit.strategies import strategy_params
from decodekit.testing.tiny_lm import TinyLM

PROMPTS = [[1, 2, 3], [4, 5]]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"scale": float("nan")},
            "strategy cfg: scale=nan is invalid: Input should be a finite number; allowed: a number",
        ),
        (
            {"scale": float("inf")},
            "strategy cfg: scale=inf is invalid: Input should be a finite number; allowed: a number",
        ),
        # found by the fuzzer: 1e300 times a log-probability gap overflowed to +inf, a NumericsError naming no option
        ({"scale": 1e300}, "strategy cfg: scale=1e+300 is invalid: Input should be less than or equal to 10000"),
        ({"scale": -1e300}, "strategy cfg: scale=-1e+300 is invalid: Input should be greater than or equal to -10000"),
        ({"scale": "2"}, "strategy cfg: scale='2' is invalid"),
        ({"scale": True}, "strategy cfg: scale=True is invalid"),
        (
            {"negative": [[1], [2], [3]]},
            "strategy cfg: negative: 3 negative prompts for 2 prompts; allowed: one for all",
        ),
        ({"negative": []}, "strategy cfg: negative=[] is empty; allowed: at least one token"),
        ({"negative": ""}, "strategy cfg: negative='' is empty; allowed: at least one token"),
        ({"negative": [[1], []]}, "strategy cfg: negative[1]=[] is empty"),
        ({"negative": [1, 99]}, "strategy cfg: negative: token id 99 is invalid; allowed: 0 <= id < vocab_size=40"),
        ({"negative": [[1], [-1]]}, "strategy cfg: negative[1]: token id -1 is invalid"),
        ({"negative": [1.5]}, "strategy cfg: negative=[1.5] is invalid; allowed: None, text or a list of token ids"),
        ({"guidance_scale": 2.0}, "strategy cfg: unknown parameter guidance_scale=2.0; allowed parameters: scale, "),
    ],
)
def test_bad_parameters_name_themselves(model: TinyLM, options: dict[str, object], message: str) -> None:
    with pytest.raises(dk.ParameterError, match="^" + re.escape(message)):
        dk.decode(model, PROMPTS, strategy="cfg", max_new_tokens=4, **options)  # type: ignore[arg-type]


def test_text_without_a_tokenizer_is_refused(model: TinyLM) -> None:
    bare = TinyLM(40, dim=16, n_layers=1, n_heads=2, max_positions=64, seed=0)
    with pytest.raises(
        dk.ParameterError, match=r"^strategy cfg: negative='sad' is text, but the model has no tokenizer; allowed: ids"
    ):
        cfg(bare, PROMPTS, negative="sad", max_new_tokens=4)
    assert cfg(model, PROMPTS, negative="sad", max_new_tokens=4, seed=0).tokens  # with one, text is encoded


def test_the_stream_refuses_at_its_call(model: TinyLM) -> None:
    """The policy checks and opens its decodings before it returns its rounds."""
    with pytest.raises(dk.ParameterError, match=r"negative: 3 negative prompts for 2 prompts"):
        dk.stream(model, PROMPTS, strategy="cfg", negative=[[1], [2], [3]], max_new_tokens=4)
    # it said "shorten the negative prompt or lower max_new_tokens", with no number
    fits = r"shorten the negative prompt to at most 88 tokens, or lower max_new_tokens to 6 or fewer$"
    with pytest.raises(dk.ContextLengthError, match=r"exceeds the model's context of 96 positions.*" + fits):
        dk.stream(model, PROMPTS, strategy="cfg", negative=[1] * 90, max_new_tokens=8)


def test_the_shared_options_are_checked_as_everywhere(model: TinyLM) -> None:
    with pytest.raises(dk.ParameterError, match=r"^max_new_tokens=-1 is invalid"):
        cfg(model, PROMPTS, max_new_tokens=-1)
    assert cfg(model, PROMPTS, max_new_tokens=0).tokens == [[], []]


def test_registered_through_the_entry_point() -> None:
    entry = dk.get_registry().strategies["cfg"]
    assert entry.distribution == "decodekit-guidance"
    assert strategy_params("cfg(scale=2, negative='no')").model_dump() == {"scale": 2.0, "negative": "no"}


def test_rows_that_cannot_fit_are_refused_by_the_number_of_prompts(
    model: TinyLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two rows per prompt: the most prompts that fit is half what `sample` could take."""
    # The engine's `device_memory`, where the strategy's `check_rows` and the pairs' `open` look it up.
    monkeypatch.setitem(check_rows.__globals__, "device_memory", lambda device: 30_000)
    assert dk.generate(model, PROMPTS * 4, max_new_tokens=2).tokens  # 8 rows fit
    with pytest.raises(
        dk.ParameterError, match=r"^strategy cfg: batch size=8 is invalid: its 16 rows .* batch size <= 6 here"
    ):
        dk.stream(model, PROMPTS * 4, strategy="cfg", max_new_tokens=2)
