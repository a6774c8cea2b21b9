from __future__ import annotations

import pytest
from decodekit_shakespeare.tokenizer import REPLACEMENT_CHAR, CharTokenizer, UnknownCharacterError


def test_shipped_alphabet(shipped_tokenizer: CharTokenizer) -> None:
    alphabet = shipped_tokenizer.alphabet
    assert shipped_tokenizer.vocab_size == len(alphabet) == 84
    assert list(alphabet) == sorted(set(alphabet))
    assert "\n" in alphabet and " " in alphabet


def test_round_trip(shipped_tokenizer: CharTokenizer, hamlet_slice: str) -> None:
    ids = shipped_tokenizer.encode(hamlet_slice)
    assert len(ids) == len(hamlet_slice)
    assert all(0 <= i < shipped_tokenizer.vocab_size for i in ids)
    assert shipped_tokenizer.decode(ids) == hamlet_slice


def test_from_text_is_sorted_set() -> None:
    tok = CharTokenizer.from_text("banana\n")
    assert tok.alphabet == "\nabn"
    assert tok.encode("nab") == [3, 1, 2]
    assert CharTokenizer.from_text(["ban", "ana\n"]).alphabet == tok.alphabet


def test_unknown_character_is_a_clear_error(shipped_tokenizer: CharTokenizer) -> None:
    with pytest.raises(UnknownCharacterError) as info:
        shipped_tokenizer.encode("To be, or not — to be")
    message = str(info.value)
    assert "'—'" in message and "U+2014" in message
    assert "position 14" in message
    assert "allowed" in message and "errors='replace'" in message
    assert isinstance(info.value, ValueError)


def test_unknown_character_is_a_parameter_error(shipped_tokenizer: CharTokenizer) -> None:
    errors = pytest.importorskip("decodekit.errors")
    with pytest.raises(errors.ParameterError):
        shipped_tokenizer.encode("é")


def test_replace(shipped_tokenizer: CharTokenizer) -> None:
    ids = shipped_tokenizer.encode("a—b", errors="replace")
    assert shipped_tokenizer.decode(ids) == f"a{REPLACEMENT_CHAR}b"


def test_decode_rejects_out_of_range(shipped_tokenizer: CharTokenizer) -> None:
    with pytest.raises(ValueError, match="id 84 at position 1"):
        shipped_tokenizer.decode([0, 84])
