"""The unconditional prompts: the `negative` parameter as one row of token ids per prompt."""

from __future__ import annotations

from collections.abc import Sequence

from decodekit.errors import ParameterError
from decodekit.prompts import Tokenizer, token_ids
from decodekit_guidance.params import NEGATIVE_ALLOWED, Negative

__all__ = ["negative_rows"]


def negative_rows(
    negative: Negative, prompts: Sequence[Sequence[int]], tokenizer: Tokenizer | None, vocab_size: int
) -> list[list[int]]:
    """One row of ids per prompt: `negative` (the same for every prompt, or one each), or, when None, the
    prompt's last token (transformers' unconditional input without `negative_prompt_ids`)."""
    if negative is None:
        return [[p[-1]] for p in prompts]
    if isinstance(negative, str) or not negative or not isinstance(negative[0], (str, list)):
        row = _row("negative", negative, tokenizer, vocab_size)  # one for all
        return [row] * len(prompts)
    if len(negative) != len(prompts):
        raise ParameterError(
            f"strategy cfg: negative: {len(negative)} negative prompts for {len(prompts)} prompts; allowed: one "
            "for all prompts (text or a list of token ids) or one per prompt"
        )
    return [_row(f"negative[{b}]", item, tokenizer, vocab_size) for b, item in enumerate(negative)]


def _row(name: str, item: object, tokenizer: Tokenizer | None, vocab_size: int) -> list[int]:
    """One negative prompt as checked token ids."""
    shown = item
    if isinstance(item, str):
        if tokenizer is None:
            raise ParameterError(f"strategy cfg: {name}={item!r} is text, but the model has no tokenizer; allowed: ids")
        item = tokenizer.encode(item)  # checked below as given ids are
    ids = token_ids(f"strategy cfg: {name}", item, vocab_size)
    if not ids:
        raise ParameterError(
            f"strategy cfg: {name}={shown!r} is empty; allowed: at least one token ({NEGATIVE_ALLOWED})"
        )
    return ids
