"""Incremental detokenization in the decode loop: the same text as decoding everything, no
half characters streamed, stop strings across tokens, and a bounded cost per token."""

from __future__ import annotations

from collections.abc import Sequence
from typing import SupportsIndex

import pytest

from decodekit.outputs import RowOutput
from decodekit.text import TextTracker

CORPUS = (
    "To be, or not to be, that is the question: naïve café, déjà vu, Straße, "
    "日本語のテキスト, emoji 😀🎉, Ελληνικά, русский текст. " * 20
)
TEXT = "Whether 'tis nobler — naïve café 日本語 😀🎉 in the mind to suffer, Ελληνικά, русский."


class ByteBPE:
    """A byte-level BPE tokenizer trained here (no hub): multi-byte characters can span tokens."""

    def __init__(self) -> None:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

        tk = Tokenizer(models.BPE())
        tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tk.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=320, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        tk.train_from_iterator([CORPUS], trainer)
        self.tk = tk
        self.decoded: list[int] = []  # the length of every decode call's input

    def encode(self, text: str) -> list[int]:
        return list(self.tk.encode(text).ids)

    def decode(self, ids: Sequence[int]) -> str:
        self.decoded.append(len(ids))
        return str(self.tk.decode(list(ids)))


@pytest.fixture(scope="module")
def bpe() -> ByteBPE:
    return ByteBPE()


def stream_text(tok: ByteBPE, ids: list[int], stops: Sequence[str] = ()) -> tuple[list[str], str | None]:
    tracker = TextTracker(tok, stops)
    deltas = []
    for i, token in enumerate(ids):
        delta, hit = tracker.push(token, final=i == len(ids) - 1)
        deltas.append(delta)
        if hit is not None:
            return deltas, hit
    return deltas, None


def test_multi_byte_characters_do_span_tokens(bpe: ByteBPE) -> None:
    ids = bpe.encode(TEXT)
    assert any("\ufffd" in bpe.decode(ids[:n]) for n in range(1, len(ids)))  # the case under test occurs


def test_streamed_text_is_the_whole_decode_and_never_half_a_character(bpe: ByteBPE) -> None:
    ids = bpe.encode(TEXT)
    deltas, hit = stream_text(bpe, ids)
    assert hit is None
    assert "".join(deltas) == bpe.decode(ids) == TEXT
    assert not any("\ufffd" in d for d in deltas)


@pytest.mark.parametrize("stop", ["日本", "😀🎉", "café", "suffer,", "Ελλ"])
def test_stop_strings_across_tokens_and_characters(bpe: ByteBPE, stop: str) -> None:
    ids = bpe.encode(TEXT)
    deltas, hit = stream_text(bpe, ids, [stop])
    assert hit == stop
    assert "".join(deltas) == TEXT[: TEXT.index(stop)]


def test_a_step_decodes_a_few_tokens_however_long_the_text(bpe: ByteBPE) -> None:
    ids = bpe.encode(TEXT * 40)  # thousands of tokens
    bpe.decoded.clear()
    deltas, _ = stream_text(bpe, ids)
    assert "".join(deltas) == TEXT * 40
    assert len(ids) > 2000 and max(bpe.decoded) <= 8  # a window, not the whole text


class Letters:
    """Token i is the i-th character of "xa<" (2, "<", stands for an end-of-text token)."""

    def encode(self, text: str) -> list[int]:
        return ["xa<".index(c) for c in text]

    def decode(self, ids: Sequence[int]) -> str:
        return "".join("xa<"[i] for i in ids)


def test_a_stop_token_lets_out_the_text_held_back_for_a_stop_string() -> None:
    """ "a" was held back as the possible start of the stop string "ab"; the stop token ended the row and lost it."""
    out = RowOutput(10, frozenset({2}), TextTracker(Letters(), ["ab"]))
    assert [out.push(token).text for token in (0, 1, 2)] == ["x", "", "a"]
    assert (out.text, out.tokens, out.finish_reason, out.stopped_by) == ("xa", [0, 1, 2], "stop", 2)


class _CountedStop(str):
    """A stop string that counts the prefixes taken of it."""

    taken = 0

    def __getitem__(self, key: SupportsIndex | slice) -> str:
        _CountedStop.taken += 1
        return str.__getitem__(self, key)


def test_a_long_stop_string_costs_a_step_only_the_text_not_yet_shown() -> None:
    """Every step checked each of a stop string's prefixes against the text's end: a service's request with a
    100,000-character stop string took 4 s over 20 tokens (1,000,000: minutes). Shown text never ends in the
    start of one, so the prefixes as long as the text not yet shown are all there is to check."""
    _CountedStop.taken = 0
    tracker = TextTracker(Letters(), [_CountedStop("ax" * 5000)])
    shown = [tracker.push(token, final=False)[0] for token in (0, 0, 1, 0, 1)]
    assert shown == ["x", "x", "", "", ""] and tracker.text == "xxaxa"  # "axa" may start "axax...": held back
    assert _CountedStop.taken == 1 + 1 + 1 + 2 + 3  # each step: as many prefixes as characters not yet shown


class Bytes:
    """Token i < 256 is byte i, decoded as HF's byte-level tokenizers do (an incomplete character: U+FFFD);
    token 256 stands for an end-of-text token."""

    def encode(self, text: str) -> list[int]:
        return list(text.encode())

    def decode(self, ids: Sequence[int]) -> str:
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")


def test_a_stop_token_after_half_a_character_lets_it_out_as_the_replacement_character() -> None:
    """The first two bytes of "€" (e2 82 ac) waited for the third; the stop token ended the row and they vanished."""
    out = RowOutput(10, frozenset({256}), TextTracker(Bytes(), ["zz"]))
    assert [out.push(token).text for token in (ord("a"), 0xE2, 0x82, 256)] == ["a", "", "", "\ufffd"]
    assert (out.text, out.finish_reason, out.stopped_by) == ("a\ufffd", "stop", 256)
    assert out.text == bytes([ord("a"), 0xE2, 0x82]).decode("utf-8", errors="replace")  # as decoding them all gives
    held = RowOutput(10, frozenset({256}), TextTracker(Bytes(), ["b\ufffd"]))  # the flushed text still stops
    assert [held.push(token).text for token in (ord("a"), ord("b"), 0xE2, 256)] == ["a", "", "", ""]
    assert (held.text, held.stopped_by) == ("a", "b\ufffd")  # the string the flushed text hit


class Pieces:
    """Token 0 is "x", 1 the bytes "ab" and the first of "€" (e2 82 ac), 2 the last two, 3 an end-of-text token."""

    PIECES = (b"x", b"ab\xe2", b"\x82\xac", b"")

    def encode(self, text: str) -> list[int]:
        raise NotImplementedError

    def decode(self, ids: Sequence[int]) -> str:
        return b"".join(self.PIECES[i] for i in ids).decode("utf-8", errors="replace")


def row(stops: Sequence[str], keep: bool, stop_tokens: Sequence[int] = (3,)) -> RowOutput:
    return RowOutput(10, frozenset(stop_tokens), TextTracker(Pieces(), stops, keep), textless=frozenset({3}))


def test_a_stop_string_in_the_text_a_stop_token_lets_out_names_the_end() -> None:
    """ "ab" waited with half a "€"; the end-of-text token let it out as "ab\ufffd", whose "a" cut the text there, but
    stopped_by named the token: vLLM names the stop string found in a step's text, stop token or not."""
    out = row(["a"], keep=False)
    assert [out.push(token).text for token in (0, 1, 3)] == ["x", "", ""]
    assert (out.text, out.finish_reason, out.stopped_by) == ("x", "stop", "a")


def test_kept_the_end_shows_no_character_whose_bytes_never_came_as_vllm() -> None:
    """Under include_stop_str_in_output the text is vLLM's incremental detokenizer's: the end-of-text token (no text:
    skip_special_tokens) lets nothing out, so "ab" with half a "€" is not shown, nor cut at the stop string "a"
    (it was "xa", stopped_by the token); a kept stop token that ends inside a character adds no U+FFFD."""
    special = row(["a"], keep=True)
    assert [special.push(token).text for token in (0, 1, 3)] == ["x", "", ""]
    assert (special.text, special.finish_reason, special.stopped_by) == ("x", "stop", 3)
    ordinary = row(["zz"], keep=True, stop_tokens=(1,))  # the stop token "ab" + half a "€": "ab\ufffd" before
    assert [ordinary.push(token).text for token in (0, 1)] == ["x", ""]
    assert (ordinary.text, ordinary.finish_reason, ordinary.stopped_by) == ("x", "stop", 1)
    completed = row(["zz"], keep=True, stop_tokens=(2,))  # a kept stop token that completes the character shows it
    assert [completed.push(token).text for token in (0, 1, 2)] == ["x", "", "ab€"]
    length = RowOutput(2, frozenset(), TextTracker(Pieces(), ["zz"], keep_stop=True))  # nor at the length
    assert [length.push(token).text for token in (0, 1)] == ["x", ""] and length.finish_reason == "length"
