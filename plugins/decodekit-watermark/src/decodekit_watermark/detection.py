"""`detect`: whether a text carries a watermark (transformers' `WatermarkDetector`).

Each token after the first `context_width` is scored: green if it is in the list its context seeds (`greenlist`).
Without the watermark a token is green with probability gamma (`greenlist_ratio`), so the green count of `n` scored
tokens has z = (green - gamma n) / sqrt(n gamma (1 - gamma)); the text is called watermarked when z exceeds
`z_threshold`. With `ignore_repeated_ngrams`, each distinct (context, token) n-gram counts once.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from numbers import Integral
from typing import SupportsIndex

import torch

from decodekit.errors import ParameterError
from decodekit_watermark.greenlist import Greenlists
from decodekit_watermark.params import WatermarkParams
from decodekit_watermark.stage import Watermark

__all__ = ["Detection", "detect"]


@dataclass(frozen=True)
class Detection:
    """What `detect` found in one text."""

    scored: int  # tokens scored (distinct n-grams with ignore_repeated_ngrams)
    green: int  # of them, green
    z_score: float
    p_value: float  # the chance of a z this high without the watermark (one-sided, normal)
    watermarked: bool  # z_score > z_threshold

    @property
    def green_fraction(self) -> float:
        return self.green / self.scored


def detect(
    tokens: Iterable[SupportsIndex] | torch.Tensor,
    *,
    vocab_size: int,
    watermark: WatermarkParams | Watermark | None = None,
    ignore_repeated_ngrams: bool = False,
    z_threshold: float = 3.0,
    device: torch.device | str = "cpu",
) -> Detection:
    """Score `tokens` (the generated text's ids, without the prompt) against `watermark`'s green lists (the stage
    it was generated with, or its parameters; None: the defaults) over a vocabulary of `vocab_size` tokens. The
    lists are drawn on `device`, which must be the one the text was marked on: a CUDA draw differs from a CPU one
    (transformers' `WatermarkDetector(device=...)`)."""
    params = watermark.params if isinstance(watermark, Watermark) else watermark or WatermarkParams()
    if not isinstance(params, WatermarkParams):
        raise ParameterError(
            f"detect: watermark={watermark!r} is invalid; allowed: None, a WatermarkParams or a watermark stage"
        )
    if not isinstance(z_threshold, (int, float)) or isinstance(z_threshold, bool) or not math.isfinite(z_threshold):
        raise ParameterError(f"detect: z_threshold={z_threshold!r} is invalid; allowed: a finite number")
    ids = _checked(tokens, vocab_size, params)
    lists = Greenlists(params, vocab_size, _device(device))
    self_hash = params.seeding_scheme == "selfhash"
    n = params.context_width + (0 if self_hash else 1)  # selfhash's context holds the token itself
    ngrams = Counter(tuple(ids[i : i + n]) for i in range(len(ids) - n + 1))
    green_of = {g: lists.is_green(torch.tensor(g if self_hash else g[:-1]), g[-1]) for g in ngrams}
    if ignore_repeated_ngrams:
        scored, green = len(ngrams), sum(green_of.values())
    else:
        scored, green = sum(ngrams.values()), sum(count for g, count in ngrams.items() if green_of[g])
    gamma = params.greenlist_ratio
    z = (green - gamma * scored) / math.sqrt(scored * gamma * (1 - gamma))
    return Detection(scored, green, z, 0.5 * math.erfc(z / math.sqrt(2)), z > z_threshold)


def _device(device: torch.device | str) -> torch.device:
    """`device` if torch can draw a green list there (a generator of its own)."""
    try:
        torch.Generator(device=device)
        return torch.device(device)
    except (RuntimeError, TypeError) as exc:
        why = str(exc).split(". ")[0].rstrip(".") or type(exc).__name__  # torch's first sentence
        raise ParameterError(
            f"detect: device={device!r} is invalid ({why}); allowed: a device torch draws on here, the one the text "
            "was marked on ('cpu', 'cuda', 'cuda:1')"
        ) from None


def _checked(tokens: Iterable[SupportsIndex] | torch.Tensor, vocab_size: int, params: WatermarkParams) -> list[int]:
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 1:
        raise ParameterError(f"detect: vocab_size={vocab_size!r} is invalid; allowed: an integer >= 1")
    try:
        ids = tokens.tolist() if isinstance(tokens, torch.Tensor) else list(tokens)
    except TypeError:  # not iterable: one id, None
        raise ParameterError(f"detect: tokens={tokens!r} is invalid; allowed: a sequence of token ids") from None
    # numpy's integers too (a row of a tokenizer's array); not bool, not float
    wrong = next(
        (t for t in ids if isinstance(t, bool) or not isinstance(t, Integral) or not 0 <= int(t) < vocab_size), None
    )
    if wrong is not None:
        raise ParameterError(
            f"detect: tokens hold {wrong!r}; allowed: a sequence of token ids, integers in [0, {vocab_size})"
            " (one text: a batch's row, tokens[0])"
        )
    ids = [int(t) for t in ids]
    if len(ids) <= params.context_width:
        raise ParameterError(
            f"detect: tokens of length {len(ids)} is invalid; allowed: more than context_width="
            f"{params.context_width} tokens (the first {params.context_width} only seed the green lists)"
        )
    return ids
