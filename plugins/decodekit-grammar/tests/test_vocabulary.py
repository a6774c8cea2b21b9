"""Tokenizers state their tokens' bytes: the character tokenizer, a byte-level BPE (the 50,000-token one
trained here), a tokenizers char-level BPE with a `Fuse` decoder; one that cannot is refused with the reason."""

from __future__ import annotations

from typing import Any, cast

import pytest
import torch
from decodekit_grammar.vocabulary import token_table

import decodekit as dk
from decodekit.testing.tiny_lm import TinyLM

TEXTS = ["ROMEO: But soft!", '{"name": "Juliet", "act": 2}\n', "café ☃ naïve", "\n\n  x"]


def test_the_character_tokenizer_states_each_character(shakespeare: Any) -> None:
    tok = shakespeare.tokenizer
    table = token_table(tok, 84, "json")
    assert table.size == 84 and table.eos == ()
    assert table.tokens[tok.encode("{")[0]] == b"{" and table.tokens[tok.encode("\n")[0]] == b"\n"


@pytest.mark.parametrize("which", ["bpe", "bpe50k"])
@pytest.mark.parametrize("text", TEXTS)
def test_a_byte_level_bpe_states_the_bytes_it_decodes_to(request: pytest.FixtureRequest, which: str, text: str) -> None:
    bpe = request.getfixturevalue(which)
    table = token_table(bpe, len(bpe.hf), "json")
    ids = bpe.encode(text)
    assert b"".join(table.tokens[i] or b"" for i in ids) == text.encode() == bpe.decode(ids).encode()
    assert len(ids) < len(text.encode()) or text.isspace() or text.startswith("\n")  # merged: bytes per token


@pytest.mark.parametrize(("which", "size"), [("bpe", 46_896), ("bpe50k", 50_000)])
def test_the_bpes_sizes_and_their_end_of_text(request: pytest.FixtureRequest, which: str, size: int) -> None:
    bpe = request.getfixturevalue(which)
    table = token_table(bpe, size, "json")
    assert len(bpe.hf) == size and table.tokens[0] is None and table.eos == (0,)
    assert sum(t is None for t in table.tokens) == 1
    assert len({t for t in table.tokens if t is not None}) == size - 1  # every other token: distinct bytes


def test_a_model_larger_than_its_tokenizer_has_special_ids_past_it(bpe: Any) -> None:
    table = token_table(bpe, 46_912, "json")
    assert table.size == 46_912 and table.tokens[46_896:] == (None,) * 16


def test_a_char_level_tokenizers_bpe_with_a_fuse_decoder() -> None:
    llama = dk.load_model("tiny-shakespeare-llama")
    tok = llama.tokenizer
    table = token_table(tok, llama.spec.vocab_size, "json")
    ids = tok.encode("ROMEO: {1}")
    assert b"".join(table.tokens[i] or b"" for i in ids) == b"ROMEO: {1}"


class NoBytes:
    def encode(self, text: str) -> list[int]:
        return [ord(c) % 64 for c in text]

    def decode(self, ids: Any) -> str:
        return "".join(chr(48 + i) for i in ids)


@pytest.mark.parametrize(
    ("tokenizer", "message"),
    [
        (None, r"json_schema: the model has no tokenizer; a grammar constrains text"),
        (NoBytes(), r"json_schema: tokenizer NoBytes cannot state its tokens' bytes \(it has no token_bytes\(\)\)"),
    ],
)
def test_a_tokenizer_that_cannot_state_its_bytes_is_refused(tokenizer: Any, message: str) -> None:
    model = TinyLM(64)
    if tokenizer is not None:
        model.tokenizer = tokenizer
    with pytest.raises(dk.ParameterError, match=message):
        chain = dk.Chain([dk.create("json_schema", schema={"type": "integer"})])
        dk.generate(model, [[1, 2]], chain=chain, max_new_tokens=4)


def test_dk_validate_refuses_a_tokenizer_that_cannot_state_its_bytes() -> None:
    """Before any model work, as a batch job checks each line: it was found only at the first step (the job
    decoded the other lines, then failed these)."""
    model, tokenizer = TinyLM(64), NoBytes()
    model.tokenizer = cast(Any, tokenizer)  # a module's attribute, as the test above sets it
    with pytest.raises(dk.ParameterError, match=r"regex: tokenizer NoBytes cannot state its tokens' bytes"):
        dk.validate(model, [[1, 2]], chain="regex('a+')", max_new_tokens=4)


def test_a_wordpiece_tokenizer_is_refused_with_its_decoder() -> None:
    from decodekit_hf.tokenizer import HFTokenizer
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(models.WordPiece({"[UNK]": 0, "a": 1, "##b": 2}, unk_token="[UNK]"))
    raw.decoder = decoders.WordPiece()
    tok = HFTokenizer(PreTrainedTokenizerFast(tokenizer_object=raw))
    with pytest.raises(dk.ParameterError, match=r"regex: HFTokenizer.token_bytes: the tokenizer's decoder 'WordPiece'"):
        dk.create("regex", pattern="a+")(torch.zeros(1, 3), dk.DecodeContext(tokens=torch.tensor([[1]]), tokenizer=tok))


def test_a_tokenizer_with_more_tokens_than_the_model_is_refused(bpe: Any) -> None:
    ctx = dk.DecodeContext(tokens=torch.tensor([[1]]), tokenizer=bpe)
    with pytest.raises(dk.ParameterError, match=r"json: tokenizer HFTokenizer states 46896 tokens for a model of 100"):
        dk.create("json")(torch.zeros(1, 100), ctx)


def test_the_table_init_state_builds_serves_a_model_of_the_tokenizers_size(shakespeare: Any) -> None:
    """`init_state` asks for the tokenizer's own table (the model's size is not known there); the step then asks
    for the model's, which for a model of as many ids is the same object, so the grammar's vocabulary and book are
    built once, and a model of more ids gets a table of its own, its extra ids special."""
    tok = shakespeare.tokenizer
    own = token_table(tok, None, "json")
    assert own.size == 84 and token_table(tok, 84, "json") is own
    wider = token_table(tok, 90, "json")
    assert wider is not own and wider.tokens[:84] == own.tokens and wider.tokens[84:] == (None,) * 6
