"""`include_stop_str_in_output` (vLLM's): the text keeps the stop string or the stop token that ended its row; by
default it ends before it. Pinned on tiny-shakespeare's characters against the text generated without any stop.

vLLM V1 (vllm/v1/engine/detokenizer.py, `BaseIncrementalDetokenizer.update(new_token_ids, stop_terminated)`)
detokenizes the token that stop-terminated a request only under include_stop_str_in_output, then looks for the stop
strings in the text as ever; the token is the output's last token id either way."""

from __future__ import annotations

import re
from typing import Any

import pytest

import decodekit as dk
from decodekit.testing.tiny_lm import Letters, TinyLM

OPTIONS: dict[str, Any] = {"chain": "temperature(0.9)", "max_new_tokens": 40, "seed": 7, "cache": "dense"}


@pytest.fixture(scope="module")
def model() -> Any:
    return dk.load_model("tiny-shakespeare")


@pytest.fixture(scope="module")
def free(model: Any) -> str:
    """The text without stop strings: a stop string only cuts it, the tokens before it are the same."""
    texts = dk.generate(model, ["ROMEO:"], **OPTIONS).text
    assert texts is not None
    text = texts[0]
    assert len(text) == 40  # one character per token
    return text


def test_the_text_keeps_the_stop_string_only_when_asked(model: Any, free: str) -> None:
    stop = free[20:23]
    end = free.find(stop)
    cut = dk.generate(model, ["ROMEO:"], stop_strings=[stop], **OPTIONS)
    kept = dk.generate(model, ["ROMEO:"], stop_strings=[stop], include_stop_str_in_output=True, **OPTIONS)
    assert cut.text == [free[:end]] and kept.text == [free[: end + 3]] and kept.text[0].endswith(stop)
    assert kept.tokens == cut.tokens and kept.stopped_by == cut.stopped_by == [stop]
    assert kept.finish_reasons == cut.finish_reasons == ["stop"]


def test_streaming_holds_nothing_back_when_the_stop_string_is_kept(model: Any, free: str) -> None:
    """Held back, a text that may start a stop string would come later; kept, each event is its own character."""
    stop = free[20:23]
    events = list(dk.stream(model, ["ROMEO:"], stop_strings=[stop], include_stop_str_in_output=True, **OPTIONS))
    assert [ev.text for ev in events] == list(free[: free.find(stop) + 3])
    held = list(dk.stream(model, ["ROMEO:"], stop_strings=[stop], **OPTIONS))
    assert "".join(ev.text or "" for ev in held) == free[: free.find(stop)]


def test_without_a_stop_string_hit_the_text_is_the_same(model: Any, free: str) -> None:
    out = dk.generate(model, ["ROMEO:"], stop_strings=["\x00"], include_stop_str_in_output=True, **OPTIONS)
    assert out.text == [free] and out.finish_reasons == ["length"]


def test_a_value_other_than_a_bool_is_refused(model: Any) -> None:
    with pytest.raises(dk.ParameterError, match=r"include_stop_str_in_output='yes' is invalid; allowed: True or False"):
        dk.generate(model, ["ROMEO:"], include_stop_str_in_output="yes")  # type: ignore[arg-type]


def _first_new(text: str, start: int) -> int:
    """The first position from `start` whose character did not occur before it: its token first ends a row there."""
    return next(i for i in range(start, len(text)) if text[i] not in text[:i])


def test_the_text_keeps_the_stop_token_that_ended_the_row_only_when_asked(model: Any, free: str) -> None:
    at = _first_new(free, 10)
    stop = model.tokenizer.encode(free[at])
    cut = dk.generate(model, ["ROMEO:"], stop_tokens=stop, **OPTIONS)
    kept = dk.generate(model, ["ROMEO:"], stop_tokens=stop, include_stop_str_in_output=True, **OPTIONS)
    assert cut.text == [free[:at]] and kept.text == [free[: at + 1]]
    assert kept.tokens == cut.tokens and kept.tokens[0][-1] == stop[0] and len(kept.tokens[0]) == at + 1
    assert kept.stopped_by == cut.stopped_by == stop and kept.finish_reasons == cut.finish_reasons == ["stop"]


def test_the_stop_tokens_text_streams_as_its_own_event(model: Any, free: str) -> None:
    at = _first_new(free, 10)
    stop = model.tokenizer.encode(free[at])
    events = list(dk.stream(model, ["ROMEO:"], stop_tokens=stop, include_stop_str_in_output=True, **OPTIONS))
    assert [ev.text for ev in events] == list(free[: at + 1]) and events[-1].stopped_by == stop[0]
    cut = list(dk.stream(model, ["ROMEO:"], stop_tokens=stop, **OPTIONS))
    assert [ev.text for ev in cut] == [*free[:at], ""]


def test_a_stop_token_kept_that_completes_a_stop_string_reports_the_string(model: Any, free: str) -> None:
    """vLLM looks for the stop strings in the stop token's text too, and names the string it finds (stop_reason)."""
    at = _first_new(free, 10)
    stop, string = model.tokenizer.encode(free[at]), free[at - 1 : at + 1]
    options = {"stop_tokens": stop, "stop_strings": [string], **OPTIONS}
    kept = dk.generate(model, ["ROMEO:"], include_stop_str_in_output=True, **options)
    assert kept.text == [free[: at + 1]] and kept.stopped_by == [string] and kept.finish_reasons == ["stop"]
    cut = dk.generate(model, ["ROMEO:"], **options)  # the stop token is not text: no stop string completed
    assert cut.text == [free[:at]] and cut.stopped_by == stop and cut.tokens == kept.tokens


@pytest.mark.parametrize("strategy", ["beam(num_beams=2)", "speculative(draft=ngram)"])
def test_every_strategy_keeps_the_stop_token_alike(model: Any, strategy: str) -> None:
    """The strategies share the engine's row outputs: a row a stop token ended keeps its text, whatever chose it."""
    texts = dk.generate(model, ["ROMEO:"], chain="greedy", max_new_tokens=40, cache="dense").text
    assert texts is not None
    greedy = texts[0]
    stop = model.tokenizer.encode("e")
    options: dict[str, Any] = {"chain": "greedy", "max_new_tokens": 40, "cache": "dense", "stop_tokens": stop}
    kept = dk.decode(model, ["ROMEO:"], strategy=strategy, include_stop_str_in_output=True, **options)
    cut = dk.decode(model, ["ROMEO:"], strategy=strategy, **options)
    tokens = kept.tokens[0]
    assert tokens == cut.tokens[0] and tokens[-1] == stop[0] and kept.finish_reasons == ["stop"]
    assert kept.text == [model.tokenizer.decode(tokens)] and cut.text == [model.tokenizer.decode(tokens[:-1])]
    if strategy.startswith("speculative"):  # greedy drafts verified greedily: the greedy text, to its first "e"
        assert kept.text == [greedy[: greedy.index("e") + 1]]


class _Ids(Letters):
    """`Letters` with the optional members given set (the others absent)."""

    def __init__(self, vocab_size: int, **members: object) -> None:
        super().__init__(vocab_size)
        for name, value in members.items():
            setattr(self, name, value)


@pytest.mark.parametrize("name", ["eos_token_ids", "special_token_ids"])
def test_a_tokenizer_whose_optional_ids_are_none_has_none(name: str) -> None:
    """None is a tokenizer's way to say it has none (transformers' eos_token_id): every decode raised TypeError ('Value
    after * must be an iterable') once the row outputs read both members, with or without include_stop_str_in_output."""
    lm = TinyLM(26)
    options: dict[str, Any] = {"chain": "temperature(1.5)", "max_new_tokens": 12, "seed": 3, "cache": "none"}
    lm.tokenizer = _Ids(26)  # type: ignore[assignment]
    plain = dk.generate(lm, ["ab"], stop_tokens=[4], include_stop_str_in_output=True, **options)
    lm.tokenizer = _Ids(26, **{name: None})  # type: ignore[assignment]
    out = dk.generate(lm, ["ab"], stop_tokens=[4], include_stop_str_in_output=True, **options)
    assert (out.text, out.tokens, out.stopped_by) == (plain.text, plain.tokens, plain.stopped_by)


@pytest.mark.parametrize("value", [4, 0, "e", [4, "e"]])
def test_a_tokenizer_whose_optional_ids_are_no_ids_is_refused_naming_them(value: object) -> None:
    lm = TinyLM(26)
    lm.tokenizer = _Ids(26, special_token_ids=value)  # type: ignore[assignment]
    with pytest.raises(dk.PluginError, match=rf"special_token_ids={re.escape(repr(value))} is invalid; allowed: "):
        dk.generate(lm, ["ab"], max_new_tokens=3, cache="none")
