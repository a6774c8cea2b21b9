"""`HFTokenizer`: a transformers tokenizer behind decodekit's `encode`/`decode` protocol, and the bytes
each of its tokens stands for (what a grammar works on)."""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Sequence
from functools import cached_property
from numbers import Integral
from typing import Any

from decodekit.errors import ParameterError

__all__ = ["HFTokenizer", "as_ids", "byte_level_alphabet", "eos_token_ids"]


class HFTokenizer:
    """`encode(text) -> ids` and `decode(ids) -> text` with the tokenizer's own defaults.

    `encode` adds the special tokens the tokenizer adds by default (a Llama tokenizer's BOS,
    nothing for GPT-2), as `tokenizer(text)` does; `decode` keeps special tokens (transformers' default), so
    a stop string can name one (`<|im_end|>` on a model whose EOS it is not), and the space a SentencePiece
    tokenizer drops at a text's start (see `decode`).
    """

    def __init__(self, tokenizer: Any) -> None:
        self.hf = tokenizer

    def encode(self, text: str) -> list[int]:
        ids = [int(i) for i in self.hf.encode(text)]
        bos = getattr(self.hf, "bos_token_id", None)
        doubled = bos is not None and ids[:2] == [bos, bos]
        if doubled and len(self.hf.encode(text, add_special_tokens=False)) < len(ids):  # one BOS added: llama.cpp warns
            warnings.warn(
                f"decodekit: the prompt starts with two BOS tokens ({self.hf.bos_token!r}): its text holds one (a chat "
                "template's) and encode adds the tokenizer's own, as tokenizer(text) does; pass the template's token "
                "ids instead (apply_chat_template(...)['input_ids']; a batch line's prompt_token_ids), or the text "
                "without its BOS",
                stacklevel=2,
            )
        return ids

    def decode(self, ids: Sequence[int]) -> str:
        """The text `ids` add after the text before them (a generated row's after its prompt), as vLLM and llama.cpp
        show it: a SentencePiece decoder (`Strip`, `Metaspace`) drops the space a whole text starts with, so
        `ids` are decoded after a word of one token (`_anchor`) and that word cut off."""
        if self._anchor is None:
            return str(self.hf.decode(list(ids)))
        word, text = self._anchor
        return str(self.hf.decode([word, *ids]))[len(text) :]

    @cached_property
    def _anchor(self) -> tuple[int, str] | None:
        """A word of one token (letters or digits: no space to drop) and its text, for a decoder that drops a text's
        first space; None for any other, or a vocabulary without such a word (decoded as the tokenizer decodes)."""
        backend = getattr(self.hf, "backend_tokenizer", None)
        if backend is None or not _strips_start(json.loads(backend.to_str()).get("decoder")):
            return None
        words = (i for token, i in backend.get_vocab(with_added_tokens=False).items() if token.isalnum())
        word = min(words, default=None)
        return None if word is None else (word, str(self.hf.decode([word])))

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        """The tokenizer's end-of-sequence ids (none: empty)."""
        return tuple(as_ids(getattr(self.hf, "eos_token_id", None)))

    @property
    def special_token_ids(self) -> tuple[int, ...]:
        """The special tokens' ids (EOS, `<|im_end|>`, ...): `decode(..., skip_special_tokens=True)` leaves them out,
        as vLLM decodes, so one that ends a row adds no text to it, even under include_stop_str_in_output."""
        backend = getattr(self.hf, "backend_tokenizer", None)
        added = {} if backend is None else backend.get_added_tokens_decoder()
        return tuple(sorted({*self.hf.all_special_ids, *(i for i, token in added.items() if token.special)}))

    def token_bytes(self) -> list[bytes | None]:
        """Each id's bytes, None for a special token (it has no text): what a grammar reads (`decodekit_grammar`).

        Read from the fast tokenizer's vocabulary through its decoder, as llguidance reads it: a byte-level BPE
        (GPT-2's scheme) writes each byte as one character of `byte_level_alphabet`; `Fuse`, `Replace`,
        `ByteFallback` (`<0x0A>`) and SentencePiece's `Metaspace` (`▁` a space) spell tokens as text. A token's
        bytes are those it adds inside a text: the space `Strip` or `Metaspace` drops at a text's start is kept,
        as `decode` keeps it. Another decoder (WordPiece's `##`) is refused: its bytes would depend on its place.
        """
        backend = getattr(self.hf, "backend_tokenizer", None)
        if backend is None:
            raise ParameterError(
                f"HFTokenizer.token_bytes: {type(self.hf).__name__} is not a fast tokenizer (no backend_tokenizer), "
                "so its tokens' bytes are unknown; allowed: a tokenizers-backed tokenizer"
            )
        spell = _speller(json.loads(backend.to_str()).get("decoder"))
        added = backend.get_added_tokens_decoder()
        vocab = backend.get_vocab(with_added_tokens=False)
        out: list[bytes | None] = [None] * (max([*vocab.values(), *added, -1]) + 1)
        for text, i in vocab.items():
            out[i] = spell(text)
        for i, token in added.items():
            out[i] = None if token.special else token.content.encode("utf-8")
        return out


def byte_level_alphabet() -> dict[str, int]:
    """GPT-2's byte-level alphabet (`bytes_to_unicode` of its `encoder.py`), inverted: the character that stands
    for each byte in a byte-level BPE's vocabulary, mapped to the byte. Printable Latin-1 bytes stand for
    themselves; the other 68 are written as U+0100 onwards, in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    rest = [b for b in range(256) if b not in printable]
    return {**{chr(b): b for b in printable}, **{chr(256 + n): b for n, b in enumerate(rest)}}


def _speller(decoder: Any) -> Callable[[str], bytes]:
    """A token's bytes from its vocabulary string, for a tokenizer with `decoder` (its JSON form)."""
    kind = None if decoder is None else decoder.get("type")
    if kind == "ByteLevel":
        alphabet = byte_level_alphabet()
        return lambda text: bytes(alphabet[c] for c in text)
    steps = decoder.get("decoders", []) if kind == "Sequence" else [decoder]
    replace: list[tuple[str, str]] = []
    fallback = False
    for step in steps:
        if step.get("type") == "Replace" and "String" in step.get("pattern", {}):
            replace.append((step["pattern"]["String"], step["content"]))
        elif step.get("type") == "Metaspace":
            replace.append((step["replacement"], " "))
        elif step.get("type") == "ByteFallback":
            fallback = True
        elif step.get("type") != "Fuse" and not (step.get("type") == "Strip" and step.get("stop") == 0):
            raise ParameterError(
                f"HFTokenizer.token_bytes: the tokenizer's decoder {_named(step)} does not spell each token "
                "on its own, so its tokens' bytes are unknown; allowed: ByteLevel (a byte-level BPE), or "
                "Fuse, Replace, ByteFallback, Metaspace and Strip of a text's start"
            )

    def spell(text: str) -> bytes:
        if fallback and len(text) == 6 and text.startswith("<0x") and text.endswith(">"):
            return bytes([int(text[3:5], 16)])
        for old, new in replace:
            text = text.replace(old, new)
        return text.encode("utf-8")

    return spell


def _strips_start(decoder: Any) -> bool:
    """Whether `decoder` (JSON) drops what a text starts with: `Strip` of its first spaces, `Metaspace`'s of its
    first token (its `prepend_scheme` undone)."""
    if decoder is None:
        return False
    steps = decoder.get("decoders", []) if decoder.get("type") == "Sequence" else [decoder]
    return any(step.get("type") in ("Strip", "Metaspace") for step in steps)


def _named(step: Any) -> str:
    """A decoder step as the refusal names it: its type, and a `Strip`'s end too (a text's end would change)."""
    kind = step.get("type")
    return f"'Strip' (stop={step.get('stop')})" if kind == "Strip" else repr(kind)


def as_ids(value: Any, name: str = "token ids") -> list[int]:
    """Token ids as transformers configs give them: None, one id, or a list; another value (a float, a string: a
    config file written by hand) is a `ParameterError` naming `name`, never an id read into it."""
    ids = [] if value is None else [value] if isinstance(value, Integral) else value  # True too: refused below
    if not isinstance(ids, (list, tuple)) or not all(isinstance(v, Integral) and not isinstance(v, bool) for v in ids):
        raise ParameterError(f"{name}={value!r} is invalid; allowed: a token id or a list of token ids")
    return [int(v) for v in ids]


def eos_token_ids(model: Any, tokenizer: Any, vocab_size: int) -> tuple[int, ...]:
    """The end-of-sequence ids: the generation config's, else the model config's, else the tokenizer's.

    Ids outside the vocabulary (a random-init config keeps GPT-2's 50256 with a small vocab) are dropped.
    """
    owners = {
        "the generation config's": getattr(model, "generation_config", None),
        "the model config's": getattr(model, "config", None),
        "the tokenizer's": tokenizer,
    }
    for owner, source in owners.items():
        ids = [i for i in as_ids(getattr(source, "eos_token_id", None), f"{owner} eos_token_id") if 0 <= i < vocab_size]
        if ids:
            return tuple(dict.fromkeys(ids))
    return ()
