"""What the sampler checks run on: logits (continuous, tied, in every float dtype), ragged token
histories with per-row seeds, candidate sets, and `ctx_for` for hand-made tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import torch
from torch import Tensor

from decodekit.context import DecodeContext, row_generators
from decodekit.stage import Candidates

__all__ = [
    "DISTRIBUTION_LOGITS",
    "FLOAT_DTYPES",
    "NEG",
    "ContextFactory",
    "TokenHistory",
    "candidates_from",
    "cases",
    "ctx_for",
    "edge_logits",
    "random_logits",
    "selector_logits",
    "tolerance",
]

NEG = float("-inf")
"""A removed token's logit."""

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
"""The dtypes logits come in; the suites check each by default."""

ContextFactory = Callable[..., DecodeContext]
"""Called as `factory(tokens=, prompt_lengths=, step=, generators=)`; `DecodeContext` itself by default."""

_HISTORY = 12  # columns of the token history the checks build
_STEP = 3  # generated tokens in the ragged history

DISTRIBUTION_LOGITS = torch.tensor([[2.0, 1.0, 0.5, NEG, -1.0, 1.0]])
"""The default row of the chi-square test: a tie, a removed token, probabilities from 0.03 to 0.5."""


def ctx_for(batch: int = 1, *, seed: int | None = 0, step: int = 0, history: int | None = None) -> DecodeContext:
    """A context for a hand-made test: `history` token ids per row (None: `max(step, 1)`), counting on across the rows
    (`0, 1, 2, ...` mod 97: row b starts at `b * history`), the last `step` of them generated, and one generator per row
    from `seed` (None: no generators)."""
    history = max(step, 1) if history is None else history
    tokens = torch.arange(batch * history).view(batch, history) % 97
    generators = None if seed is None else row_generators(seed, batch)
    return DecodeContext(tokens=tokens, step=step, generators=generators)


def tolerance(dtype: torch.dtype) -> tuple[float, float]:
    """(rtol, atol) for comparing two computations of the same logits."""
    if dtype in (torch.float16, torch.bfloat16):
        return 1e-2, 1e-2
    return 1e-5, 1e-6


def random_logits(
    batch_size: int,
    vocab_size: int,
    *,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
    ties: bool = False,
    removed: float = 0.25,
) -> Tensor:
    """Logits `[B, V]` ~ 3·N(0, 1), a fraction `removed` of each row -inf (never the whole row).

    `ties=True` rounds them to multiples of 1/2, so many tokens share a value, as with
    logits a model computed in bfloat16.
    """
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch_size, vocab_size, generator=g) * 3
    if ties:
        x = (x * 2).round() / 2
    n_removed = min(int(removed * vocab_size), vocab_size - 1)
    if n_removed:
        cols = torch.rand(batch_size, vocab_size, generator=g).argsort(-1)[:, :n_removed]
        x.scatter_(1, cols, NEG)
    return x.to(dtype)


def edge_logits(vocab_size: int, *, seed: int, dtype: torch.dtype = torch.float32) -> Tensor:
    """Rows `[12, V]` (V >= 16) where a truncation's cut is easy to get wrong, for comparing with a reference.

    Rows: 0-2 continuous at scales 0.5, 2 and 6; 3-4 rounded to 1 and 1/2 (ties at any cut);
    5 half removed; 6 all equal; 7 a single finite token; 8 three finite tokens, two tied;
    9 five tied maxima; 10 logits in steps of 1e4 (one-hot probabilities, tied); 11 one far
    outlier (the rest underflow to p = 0).
    """
    g = torch.Generator().manual_seed(seed)
    V = vocab_size
    x = torch.randn(12, V, generator=g)
    x[:3] *= torch.tensor([[0.5], [2.0], [6.0]])
    x[3] = (x[3] * 2).round()
    x[4] = (x[4] * 3).round() / 2
    x[5] = torch.where(torch.rand(V, generator=g) < 0.5, NEG, 2 * x[5])
    x[6] = 0.0
    x[7:9] = NEG
    x[7, 7] = 1.5
    x[8, [3, 9, 11]] = torch.tensor([0.5, 0.2, 0.2])
    x[9, torch.randperm(V, generator=g)[:5]] = 4.0
    x[10] = 1e4 * x[10].round()
    x[11, 5] = 60.0
    return x.to(dtype)


def selector_logits(batch_size: int, vocab_size: int, *, seed: int, dtype: torch.dtype) -> Tensor:
    """Logits with most tokens removed (at most 3 kept per row) and one row of extreme magnitude."""
    x = random_logits(batch_size, vocab_size, seed=seed, removed=max(0.0, 1 - 3 / vocab_size))
    x[-1] = x[-1] * 1e3  # |logits| in the thousands: exp overflows unless shifted; -inf stays -inf
    return x.to(dtype)


def _row_seeds(seed: int, batch_size: int) -> list[int]:
    return [seed * 7919 + 101 * b + 1 for b in range(batch_size)]


class TokenHistory:
    """A token history `[B, T]` and a seed per row, from which the checks build contexts.

    Ragged: rows are left-padded with id 0 to different prompt lengths (one row unpadded,
    one with a 1-token prompt) and `step` tokens were generated. Id 0 is never a real token
    of the even rows and is one of every odd row, so counting padding as a token shows.
    """

    def __init__(self, batch_size: int, vocab_size: int, *, seed: int, ragged: bool) -> None:
        g = torch.Generator().manual_seed(seed + 1)
        B, T = batch_size, _HISTORY
        tokens = torch.randint(1, vocab_size, (B, T), generator=g)  # even rows: the pad id never occurs
        tokens[1::2, -2] = 0  # odd rows: id 0 is a real token too
        self.step = _STEP if ragged else 0
        self.prompt_lengths: Tensor | None = None
        if ragged:
            lengths = torch.randint(1, T - self.step + 1, (B,), generator=g)
            lengths[0] = T - self.step  # one row unpadded, one padded as far as possible
            lengths[-1] = 1
            pad = torch.arange(T) < (T - self.step - lengths)[:, None]
            tokens = tokens.masked_fill(pad, 0)
            self.prompt_lengths = lengths
        self.tokens = tokens
        self.seeds = _row_seeds(seed, B)

    def context(self, factory: ContextFactory, rows: Sequence[int] | None = None) -> DecodeContext:
        """A fresh context for all rows, or for `rows` in that order (a single row without padding)."""
        if rows is None:
            rows = range(self.tokens.shape[0])
        index = torch.tensor(list(rows), dtype=torch.long)
        tokens = self.tokens[index]
        lengths = None if self.prompt_lengths is None else self.prompt_lengths[index]
        if lengths is not None and len(index) == 1:  # a lone row: its real tokens only
            tokens = tokens[:, tokens.shape[1] - self.step - int(lengths[0]) :]
            lengths = None
        seeds = [self.seeds[r] for r in rows]
        return factory(
            tokens=tokens, prompt_lengths=lengths, step=self.step, generators=row_generators(seeds, len(seeds))
        )


def candidates_from(logits: Tensor, k: int, *, seed: int = 0) -> Candidates:
    """The k largest logits of each row as `Candidates`, tied values in a random token order.

    A stage must not rely on ties coming in token order: `torch.topk` promises no order.
    """
    g = torch.Generator().manual_seed(seed)
    shuffle = torch.randperm(logits.shape[1], generator=g)
    values, pos = logits[:, shuffle].sort(dim=-1, descending=True, stable=True)
    return Candidates(values[:, :k], shuffle[pos[:, :k]])


def has_ties(logits: Tensor) -> bool:
    """Whether a row repeats a finite value."""
    s = logits.sort(-1).values
    return bool(((s[:, 1:] == s[:, :-1]) & torch.isfinite(s[:, 1:])).any())


def cases(
    batch_size: int, vocab_size: int, dtypes: Sequence[torch.dtype], seed: int, ragged: bool
) -> Iterator[tuple[Tensor, TokenHistory]]:
    """The logits the checks run on, continuous and tied, in each dtype, with a token history.

    In the tied logits row 0 is one value (every kept token tied): a truncation's ties then
    reach past any candidate set narrower than the row, and tied maxima come in random order.
    """
    history = TokenHistory(batch_size, vocab_size, seed=seed, ragged=ragged)
    for dtype in dtypes:
        for ties in (False, True):
            logits = random_logits(batch_size, vocab_size, seed=seed, dtype=dtype, ties=ties)
            if ties:
                logits[0] = torch.where(torch.isfinite(logits[0]), 0.0, logits[0])
            yield logits, history
