"""Incremental detokenization in the decode loop: the same text as decoding everything, no
half characters streamed, stop strings across tokens, and a bounded cost per token."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

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


def test_drop_last_removes_only_the_last_tokens_text(bpe: ByteBPE) -> None:
    ids = bpe.encode("abc def")
    tracker = TextTracker(bpe, [])
    for token in ids:
        tracker.push(token, final=False)
    before = tracker.text
    tracker.push(bpe.encode(" ghi")[0], final=False)
    tracker.drop_last()
    assert tracker.text == before and tracker.tokens == ids
