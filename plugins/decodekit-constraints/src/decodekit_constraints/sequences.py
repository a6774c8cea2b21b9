"""Token sequences matched against the end of the context (shared by sequence_bias and bad_words).

A sequence s_1..s_m applies to its last token s_m when the context ends with s_1..s_{m-1};
a one-token sequence always applies (HF `SequenceBiasLogitsProcessor`). Sequences are grouped
by length, so each group is matched against every row with one comparison.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from decodekit.errors import ParameterError

if TYPE_CHECKING:
    from decodekit.context import DecodeContext

__all__ = ["Completions", "SequenceTable", "check_token_ids", "real_lengths"]


def real_lengths(ctx: DecodeContext) -> Tensor | None:
    """`[B]` real (non-padding) tokens per row; None when no row is padded."""
    if ctx.prompt_lengths is None:
        return None
    return ctx.prompt_lengths.to(ctx.tokens.device) + ctx.step


def check_token_ids(owner: str, param: str, max_id: int, vocab_size: int) -> None:
    """Raise a `ParameterError` if a token id given in `param` does not fit the vocabulary."""
    if max_id >= vocab_size:
        raise ParameterError(
            f"{owner}: {param} holds token id {max_id}, outside the vocabulary of {vocab_size} tokens; "
            f"allowed: 0 <= token id < {vocab_size}"
        )


@dataclass(frozen=True)
class Completions:
    """The sequences of one length whose prefix the context ends with."""

    last: Tensor  # [S] the token each sequence completes
    matched: Tensor  # [B, S] True where row b's context ends with sequence s's prefix
    values: Tensor  # [S] the value attached to each sequence


class SequenceTable:
    """Token sequences with one value each; a later duplicate replaces an earlier one (as HF)."""

    def __init__(self, items: Iterable[tuple[tuple[int, ...], float]]) -> None:
        table = dict(items)
        self.max_id = max((max(seq) for seq in table), default=-1)
        singles = [(seq[0], v) for seq, v in table.items() if len(seq) == 1]
        self.single_ids = torch.tensor([t for t, _ in singles], dtype=torch.long)  # [S1]
        self.single_values = torch.tensor([v for _, v in singles], dtype=torch.float32)  # [S1]
        by_length: dict[int, list[tuple[tuple[int, ...], float]]] = {}
        for seq, v in table.items():
            if len(seq) > 1:
                by_length.setdefault(len(seq), []).append((seq, v))
        # (prefixes [S, m-1], last tokens [S], values [S]) per sequence length m
        self.groups = [
            (
                torch.tensor([seq[:-1] for seq, _ in group], dtype=torch.long),
                torch.tensor([seq[-1] for seq, _ in group], dtype=torch.long),
                torch.tensor([v for _, v in group], dtype=torch.float32),
            )
            for group in by_length.values()
        ]

    def completions(self, ctx: DecodeContext, generated_only: bool = False) -> list[Completions]:
        """For each group of multi-token sequences, which ones each row's context can complete;
        `generated_only`: only a prefix made of generated tokens counts (vLLM's bad_words)."""
        tokens = ctx.tokens
        T = tokens.shape[1]
        lengths = real_lengths(ctx)
        device = tokens.device
        out = []
        for prefixes, last, values in self.groups:
            m = prefixes.shape[1]
            if m > T or (generated_only and m > ctx.step):  # the prefix is longer than what counts
                continue
            matched = (tokens[:, None, T - m :] == prefixes.to(device)[None]).all(-1)  # [B, S]
            if lengths is not None:
                matched &= (lengths >= m)[:, None]  # the prefix may not reach into the padding
            out.append(Completions(last.to(device), matched, values.to(device)))
        return out
