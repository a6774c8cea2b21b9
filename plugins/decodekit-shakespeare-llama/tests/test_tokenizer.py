"""The shipped tokenizer: one id per character of the 84-character alphabet, exact round trips, no BOS."""

from __future__ import annotations

from typing import Any

from decodekit_hf import HFModel

# The sorted set of characters of shakespeare-train.txt: the vocabulary, id = index.
ALPHABET = "\n !\"&'()*,-./0123456789:;?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[]_abcdefghijklmnopqrstuvwxyz{}"


def test_vocabulary_is_the_alphabet(hf_tokenizer: Any) -> None:
    assert len(ALPHABET) == 84 and "".join(sorted(ALPHABET)) == ALPHABET
    assert hf_tokenizer.get_vocab() == {c: i for i, c in enumerate(ALPHABET)}
    assert len(hf_tokenizer) == 84
    assert hf_tokenizer.all_special_ids == [] and hf_tokenizer.bos_token_id is None


def test_hamlet_round_trips_char_for_char(hf_tokenizer: Any, hamlet_slice: str) -> None:
    ids = hf_tokenizer.encode(hamlet_slice)
    assert ids == [ALPHABET.index(c) for c in hamlet_slice]  # no BOS, nothing merged or dropped
    assert hf_tokenizer.decode(ids) == hamlet_slice


def test_whitespace_survives(hf_tokenizer: Any) -> None:
    text = "  \n\nHAMLET:\n  To be,  or not\tto be \n"  # tab is outside the alphabet: it becomes a space
    ids = hf_tokenizer.encode(text)
    assert len(ids) == len(text)
    assert hf_tokenizer.decode(ids) == text.replace("\t", " ")


def test_outside_the_alphabet_becomes_a_space(hf_tokenizer: Any) -> None:
    assert hf_tokenizer.encode("O’er—é😀") == [ALPHABET.index(c) for c in "O er   "]


def test_decodekit_tokenizer_is_the_same(dk_model: HFModel, hf_tokenizer: Any, hamlet_slice: str) -> None:
    assert dk_model.tokenizer is not None
    ids = dk_model.tokenizer.encode(hamlet_slice[:2000])
    assert ids == hf_tokenizer.encode(hamlet_slice[:2000])
    assert dk_model.tokenizer.decode(ids) == hamlet_slice[:2000]
