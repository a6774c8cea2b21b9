"""Adversarial inputs: logits in every float dtype (NaN, ±inf, huge, tiny, denormals, all-removed
rows, one-token vocabularies, batches of mixed rows) and token histories (ids near V, long, empty).

Each is drawn as a small recipe and built from a seed, so hypothesis draws a few numbers, not V·B,
and a recipe's `repr` is a reproducer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from hypothesis import strategies as st
from torch import Tensor

from decodekit.context import DecodeContext, row_generators

__all__ = ["DTYPES", "History", "Logits", "Row", "histories", "logits", "vocab_sizes"]

DTYPES = ("float32", "float64", "float16", "bfloat16")
# One token; tiny; around the top-k grid search's threshold (k·R·4 <= V) and past it.
VOCAB_SIZES = (1, 2, 3, 5, 17, 64, 130, 257, 600, 4096)
_SCALES = (0.0, 1e-300, 5e-324, 1e-40, 1e-3, 1.0, 3.0, 30.0, 1e4, 1e30, 3e38, 1e300)
_SHIFTS = (0.0, 0.0, 1e4, -1e30, 3e38, -3e38, 1e300)
_SPECIALS = (
    math.nan, math.inf, -math.inf, 0.0, -0.0, 5e-324, 1e-45, 6e-8, 1e-40, 65504.0, -65504.0,
    3.4e38, -3.4e38, 3.5e38, 1.7976931348623157e308, -1.7976931348623157e308, 1e30,
)  # fmt: skip
_REMOVED = (0.0, 0.0, 0.25, 0.9, 1.0)
_HISTORY_LENGTHS = (0, 1, 2, 3, 8, 64, 300)


@dataclass(frozen=True)
class Row:
    """One row: `shift + scale · N(0, 1)`, a fraction `removed` set to -inf, then `specials` at random tokens."""

    scale: float = 1.0
    shift: float = 0.0
    removed: float = 0.0
    specials: tuple[float, ...] = ()


@dataclass(frozen=True)
class Logits:
    """Logits `[len(rows), vocab_size]` of `dtype`, built in float64 and then cast (so 1e30 overflows float16)."""

    rows: tuple[Row, ...]
    vocab_size: int
    dtype: str = "float32"
    seed: int = 0
    layout: str = "contiguous"  # or "strided" (every other column of a wider tensor), "column-major"

    def tensor(self) -> Tensor:
        x = self._values()
        if self.layout == "strided":  # as `logits[:, -1]` of a model's [B, T, V] output is
            return torch.stack([x, x], -1)[..., 0]
        if self.layout == "column-major":
            return x.t().contiguous().t()
        return x

    def _values(self) -> Tensor:
        g = torch.Generator().manual_seed(self.seed)
        out = []
        for r in self.rows:
            x = r.shift + r.scale * torch.randn(self.vocab_size, generator=g, dtype=torch.float64)
            n_removed = round(r.removed * self.vocab_size)
            x[torch.randperm(self.vocab_size, generator=g)[:n_removed]] = -math.inf
            where = torch.randint(0, self.vocab_size, (len(r.specials),), generator=g)
            x[where] = torch.tensor(r.specials, dtype=torch.float64)
            out.append(x)
        return torch.stack(out).to(getattr(torch, self.dtype))


@dataclass(frozen=True)
class History:
    """A token history `[B, length]`: ids below `id_limit`, `odd_ids` written at random places; ragged
    (left-padded with 0) when `prompt_lengths` is set; `step` of its last columns generated."""

    batch_size: int
    length: int
    id_limit: int
    odd_ids: tuple[int, ...] = ()
    prompt_lengths: tuple[int, ...] | None = None
    step: int = 0
    seed: int = 0

    def tokens(self) -> Tensor:
        g = torch.Generator().manual_seed(self.seed)
        t = torch.randint(0, max(self.id_limit, 1), (self.batch_size, self.length), generator=g)
        if self.length and self.odd_ids:
            flat = torch.randint(0, self.batch_size * self.length, (len(self.odd_ids),), generator=g)
            t.view(-1)[flat] = torch.tensor(self.odd_ids, dtype=torch.long)
        if self.prompt_lengths is not None:
            starts = self.length - self.step - torch.tensor(self.prompt_lengths)
            t = t.masked_fill(torch.arange(self.length) < starts[:, None], 0)
        return t

    def context(self) -> DecodeContext:
        lengths = None if self.prompt_lengths is None else torch.tensor(self.prompt_lengths)
        seeds = [self.seed * 7919 + b for b in range(self.batch_size)]
        return DecodeContext(self.tokens(), lengths, self.step, row_generators(seeds, self.batch_size))


def vocab_sizes() -> st.SearchStrategy[int]:
    return st.sampled_from(VOCAB_SIZES)


_rows = st.builds(
    Row,
    scale=st.sampled_from(_SCALES),
    shift=st.sampled_from(_SHIFTS),
    removed=st.sampled_from(_REMOVED),
    specials=st.lists(st.sampled_from(_SPECIALS), max_size=3).map(tuple),
)


@st.composite
def logits(draw: st.DrawFn, vocab_size: int, batch_size: int) -> Logits:
    """Rows mixed freely in one batch: most plain, some all-removed, NaN, +inf, huge or denormal."""
    plain = st.builds(Row, scale=st.sampled_from((1.0, 3.0)))
    rows = tuple(draw(st.one_of(plain, _rows)) for _ in range(batch_size))
    layout = draw(st.sampled_from(("contiguous", "contiguous", "strided", "column-major")))
    return Logits(rows, vocab_size, draw(st.sampled_from(DTYPES)), draw(st.integers(0, 2**16)), layout)


@st.composite
def histories(draw: st.DrawFn, vocab_size: int, batch_size: int) -> History:
    """Histories of every length down to empty, ids up to and past V, ragged or not."""
    length = draw(st.sampled_from(_HISTORY_LENGTHS))
    odd = st.sampled_from((vocab_size - 1, vocab_size, vocab_size + 1, 0, 2**62, 2**63 - 1, -1))
    odd_ids = tuple(draw(st.lists(odd, max_size=2))) if draw(st.integers(0, 3)) == 0 else ()
    step = draw(st.integers(0, length))
    lengths = None
    if batch_size > 1 and length > step and draw(st.booleans()):
        lengths = tuple(draw(st.integers(1, length - step)) for _ in range(batch_size))
    return History(batch_size, length, vocab_size, odd_ids, lengths, step, draw(st.integers(0, 2**16)))
