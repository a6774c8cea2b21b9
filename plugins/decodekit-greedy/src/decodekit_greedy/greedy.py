"""`Greedy`: argmax, the lowest token id among equal maxima."""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from decodekit.params import NoParams
from decodekit.stage import Candidates, Constants, SelectorBase

if TYPE_CHECKING:
    from decodekit.context import DecodeContext

__all__ = ["Greedy", "argmax_and_max", "first_argmax"]

_CHUNK = 1024  # tokens per chunk of the two-level search (a divisor of V near it when there is one)
_TWO_LEVEL_MIN = 100_000  # logits per call from which the two-level search pays off in a decode loop


@lru_cache(maxsize=64)
def _chunk_size(vocab_size: int) -> int:
    """A divisor of V in [512, 4096] nearest 1,024 (no tail chunk), else 1,024."""
    divisors = [c for c in range(512, 4097) if vocab_size % c == 0]
    return min(divisors, key=lambda c: abs(c - _CHUNK)) if divisors else _CHUNK


@lru_cache(maxsize=64)
def _arange(n: int, device: torch.device) -> Tensor:
    return torch.arange(n, device=device)


def argmax_and_max(logits: Tensor) -> tuple[Tensor, Tensor | None]:
    """`(logits.argmax(-1), the row maximum or None)`, `[B]`; NaN counts as maximal.

    On a CPU `argmax` over a 50,257-token row is a scalar loop (~45 µs) while `amax` is
    vectorised (~4 µs): take the maximum of each chunk of ~1,000 tokens, the first chunk
    holding the row's maximum (`argmax` over a few dozen values), then the first maximum
    inside it. The first chunk with the maximum holds its first occurrence, so ties resolve
    as argmax does; the maximum comes with it. That search is ten small ops, which in a
    decode loop (their code evicted by the model's forward) cost about as much as scanning
    50,000 logits: below `_TWO_LEVEL_MIN` logits in all, one `argmax` does it (and the
    maximum is None: read it with `logits.gather` where needed).
    """
    B, V = logits.shape
    if B * V < _TWO_LEVEL_MIN or V < 4 * _CHUNK or not logits.is_contiguous():
        return logits.argmax(-1), None
    C = _chunk_size(V)
    R = V // C
    chunk_max = logits.as_strided((B, R, C), (V, C, 1)).amax(-1)  # [B, R]: the first R·C tokens, as chunks
    if R * C < V:
        chunk_max = torch.cat([chunk_max, logits[:, R * C :].amax(-1, keepdim=True)], 1)
    first = chunk_max.argmax(-1, keepdim=True)  # [B, 1] the first chunk holding the maximum
    # Token ids of that chunk; past the end of the row they repeat the last id, which can only
    # be found after the real occurrence.
    ids = first * C + _arange(C, logits.device)  # [B, C]
    if R * C < V:
        ids = ids.clamp_(max=V - 1)
    pos = logits.gather(1, ids).argmax(-1, keepdim=True)
    return ids.gather(1, pos).view(B), chunk_max.gather(1, first).view(B)


def first_argmax(logits: Tensor) -> Tensor:
    """`logits.argmax(-1)` `[B]` (the first maximum; NaN counts as maximal), in two levels (see `argmax_and_max`)."""
    return argmax_and_max(logits)[0]


_ZERO = Constants(0.0)
_UNSAMPLEABLE = Constants(-1)


def _mark(ids: Tensor, top: Tensor) -> Tensor:
    """`ids` `[B]`, -1 where the row's maximum `top` `[B]` is not finite (top - top is NaN then)."""
    (zero,) = _ZERO.like(top)
    (unsampleable,) = _UNSAMPLEABLE.like(ids)
    return torch.where(top - top == zero, ids, unsampleable)


def _mark_on_host(logits: Tensor, ids: Tensor, top: Tensor | None) -> Tensor:
    """`_mark` for logits in CPU memory: read the B chosen logits and rebuild `ids` only if one is
    not finite. Three reads instead of three kernels (whose code a decode loop's forward has
    just evicted from the CPU's caches)."""
    if top is not None:
        values = top.tolist()
    elif ids.shape[0] == 1:
        values = [logits[0, int(ids)].item()]
    else:
        values = logits.gather(1, ids[:, None]).view(-1).tolist()
    bad = [b for b, v in enumerate(values) if v - v != 0]  # NaN, or +-inf (inf - inf is NaN)
    return ids.index_fill(0, torch.tensor(bad, device=ids.device), -1) if bad else ids


class Greedy(SelectorBase[NoParams]):
    """The token with the largest logit; the lowest token id on ties; -1 for a row that cannot be
    sampled (its maximum NaN or infinite). Draws no random numbers."""

    name = "greedy"
    marks_unsampleable = True
    distribution = "argmax"

    def __call__(self, logits: Tensor, ctx: DecodeContext) -> Tensor:
        ids, top = argmax_and_max(logits)
        if logits.is_cpu:
            return _mark_on_host(logits, ids, top)
        return _mark(ids, logits.gather(1, ids[:, None]).view(-1) if top is None else top)

    def select_candidates(self, c: Candidates, ctx: DecodeContext) -> Tensor:
        """Among the candidates equal to the row's maximum, the lowest token id."""
        top = c.values[:, :1]  # candidates are sorted; ties among maxima come in any token order
        ids = torch.where(c.values == top, c.indices, torch.iinfo(c.indices.dtype).max).amin(-1)
        return _mark(ids, c.values[:, 0])
