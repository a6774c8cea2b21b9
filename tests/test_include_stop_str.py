"""`include_stop_str_in_output` (vLLM's): the text keeps the stop string that ended its row; by default it ends
before it. Pinned on tiny-shakespeare's characters against the text generated without any stop string."""

from __future__ import annotations

from typing import Any

import pytest

import decodekit as dk

OPTIONS: dict[str, Any] = {"chain": "temperature(0.9)", "max_new_tokens": 40, "seed": 7, "cache": "dense"}


@pytest.fixture(scope="module")
def model() -> Any:
    return dk.load_model("tiny-shakespeare")


@pytest.fixture(scope="module")
def free(model: Any) -> str:
    """The text without stop strings: a stop string only cuts it, the tokens before it are the same."""
    text = dk.generate(model, ["ROMEO:"], **OPTIONS).text[0]
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
        dk.generate(model, ["ROMEO:"], include_stop_str_in_output="yes")  # type: ignore[typeddict-item]
