"""Prompts: text or token ids into checked rows of ids, and rows into one left-padded batch whose padding has
negative positions, so every row decodes as it would alone (docs/concepts.md, "Models")."""

from __future__ import annotations

import operator
import reprlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol, SupportsIndex, cast

import torch
from torch import Tensor

from decodekit.errors import ParameterError, PluginError

__all__ = ["Prompts", "TokenIds", "Tokenizer", "as_index", "left_pad", "prompt_rows", "token_ids", "tokenizer_ids"]

TokenIds = Sequence[SupportsIndex] | Tensor
"""Token ids as the checks read them: integers (Python's, NumPy's, 0-d tensors) in a sequence, or a tensor."""
Prompts = str | TokenIds | Sequence[str | TokenIds]
"""One prompt (text or ids) or several, each text or ids; a 2-D tensor is one prompt per row."""


class Tokenizer(Protocol):
    """What decodekit needs of a model's `tokenizer`. Optional members it reads where present: `eos_token_ids` and
    `special_token_ids` (ids that render no text at the end of a row, None: none; docs/concepts.md), `token_bytes()`
    (grammars: docs/grammar.md)."""

    def encode(self, text: str) -> list[int]: ...
    def decode(self, ids: Sequence[int]) -> str: ...


def prompt_rows(model: Any, prompts: Prompts) -> list[list[int]]:
    """One list of token ids per prompt: text is encoded with `model.tokenizer`, and every id
    must be an int in [0, vocab_size)."""
    rows = _rows(prompts)
    tokenizer = getattr(model, "tokenizer", None)
    V = model.spec.vocab_size
    out = []
    for b, row in enumerate(rows):
        if isinstance(row, str):
            if tokenizer is None:
                raise ParameterError(
                    f"prompts: row {b}={reprlib.repr(row)} is text, but the model has no tokenizer; allowed: token ids "
                    "(a list of ints per prompt)"
                )
            row = tokenizer.encode(row)
        ids = token_ids(f"prompts: row {b}", row, V)
        if not ids:
            raise ParameterError(f"prompts: row {b} is empty; allowed: at least one token")
        out.append(ids)
    if not out:
        raise ParameterError("prompts: no rows; allowed: at least one prompt")
    return out


def _rows(prompts: Prompts) -> list[Any]:
    """`prompts` as one item per prompt, each text or ids, unchecked: one prompt or several, a 2-D tensor by row."""
    if isinstance(prompts, Tensor):
        if prompts.dim() == 1:
            prompts = prompts[None]
        if prompts.dim() != 2 or prompts.dtype.is_floating_point or prompts.dtype.is_complex:
            raise ParameterError(
                f"prompts: tensor of shape {tuple(prompts.shape)} and dtype {prompts.dtype}; allowed: integer [B, T]"
            )
        rows: list[Any] = prompts.tolist()
    elif isinstance(prompts, str):
        rows = [prompts]
    elif isinstance(prompts, (bytes, bytearray)):  # a Sequence of ints, which would pass for token ids
        raise ParameterError(f"prompts={prompts!r} is bytes; allowed: text (decode the bytes first) or token ids")
    elif isinstance(prompts, Sequence):
        rows = list(prompts)
        if rows and not isinstance(rows[0], (str, Sequence, Tensor)):  # one prompt of ids
            rows = [rows]
    elif isinstance(prompts, Mapping) and "input_ids" in prompts:  # transformers' BatchEncoding
        raise ParameterError(
            f"prompts={reprlib.repr(prompts)} is a mapping (what a transformers tokenizer and apply_chat_template "
            "return); allowed: text, a list of texts or of token-id lists: pass its ['input_ids']"
        )
    else:
        raise ParameterError(f"prompts={prompts!r} is invalid; allowed: text, a list of texts or of token-id lists")
    return rows


def left_pad(rows: Sequence[Sequence[int]], total: int, device: torch.device | str) -> tuple[Tensor, Tensor]:
    """`buf [B, total]`: each prompt right-aligned at column P (the longest prompt), id 0 before it;
    `positions [B, total]`: column minus the row's padding, so negative on the padding."""
    P = max(len(r) for r in rows)
    buf = torch.zeros(len(rows), total, dtype=torch.long, device=device)
    for b, r in enumerate(rows):
        buf[b, P - len(r) : P] = torch.tensor(r, dtype=torch.long)
    pads = torch.tensor([P - len(r) for r in rows], device=device)  # [B] padding columns per row
    positions = torch.arange(total, device=device)[None, :] - pads[:, None]
    return buf, positions


def token_ids(name: str, values: object, vocab_size: int) -> list[int]:
    """`values` (a sequence or a tensor) as a list of token ids, each an int in [0, V)."""
    items = values.tolist() if hasattr(values, "tolist") and not isinstance(values, list) else values
    if isinstance(items, (str, bytes, bytearray)) or not isinstance(items, Sequence):
        raise ParameterError(f"{name}: {values!r} is invalid; allowed: a sequence of token ids")
    ids = []
    for t in items:
        i = as_index(t)
        if i is None:
            raise ParameterError(f"{name}: token id {t!r} ({type(t).__name__}) is invalid; allowed: an int")
        if not 0 <= i < vocab_size:
            raise ParameterError(f"{name}: token id {i} is invalid; allowed: 0 <= id < vocab_size={vocab_size}")
        ids.append(i)
    return ids


def as_index(x: object) -> int | None:
    """`x` as a Python int if it is an integer (an int, a NumPy or 0-d tensor integer), not a bool."""
    # a tensor of one element has __index__ too: tensor([11]) would be the integer 11 where [11] is a list of one
    if isinstance(x, bool) or getattr(x, "dtype", None) == torch.bool or getattr(x, "ndim", 0) != 0:
        return None
    try:
        return operator.index(x)  # type: ignore[arg-type]
    except TypeError:
        return None


def tokenizer_ids(tokenizer: object, name: str) -> list[int]:
    """The tokenizer's optional member `name` (`eos_token_ids`, `special_token_ids`), token ids; absent or None
    (transformers' way): none."""
    ids = getattr(tokenizer, name, None)
    if ids is None:
        return []
    listed = isinstance(ids, Iterable) and not isinstance(ids, (str, bytes))
    items = [as_index(i) for i in ids] if listed else [None]
    if None in items:
        raise PluginError(f"model tokenizer: {name}={ids!r} is invalid; allowed: a sequence of int token ids, or None")
    return cast(list[int], items)
