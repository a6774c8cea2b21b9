"""DRY, "don't repeat yourself" (pi6am, koboldcpp PR 982; llama.cpp `llama_sampler_dry_apply`).

If the context ends with a sequence that already occurred earlier, the token that followed
the earlier occurrence would extend the repeat. With L the length of the longest such
repeat a token would extend, its logit drops by

    multiplier * base ** (L - allowed_length)        when L >= allowed_length

(the exponent clamped so the power stays below float max, as llama.cpp does; a base past float
max is not clamped, so a repeat longer than allowed_length removes the token, as in llama.cpp). A repeat
never reaches back across a sequence breaker, and a single-token breaker is never penalised.
The context is the whole history (prompt included, as llama.cpp's server feeds it), or its
last `last_n` tokens.

Vectorised over the batch and over the earlier occurrences: with the context reversed
(r[0] the last token), the repeat ending k tokens before the end has length
z_k = longest common prefix of r and r[k:] (llama.cpp computes the same with the Z-algorithm).
Eager, the loop below extends all z_k together, a block of offsets at a time, and stops when none
grows (a row whose repeats reach past 64 tokens is measured by the Z-algorithm). Compiled, those
host reads would break the step's graph: `repeat_lengths_by_doubling` runs as many rounds whatever
the context, on the device (5-15x the eager search's time uncompiled, so eager keeps its early exits).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from decodekit.stage import ProcessorBase
from decodekit_penalties.context_window import context_window
from decodekit_penalties.params import DRYParams

if TYPE_CHECKING:
    from decodekit.context import DecodeContext

__all__ = ["DRY"]

_FLOAT_MAX_LOG = 88.7228391  # log(float32 max), as llama.cpp
_VECTOR_REACH = 64  # repeats up to this long are measured in blocks over the batch; longer ones by the Z-algorithm


class DRY(ProcessorBase[DRYParams]):
    """Penalise tokens that would extend a repeat of the context, exponentially in its length."""

    def __init__(self, params: DRYParams | None = None, /, **kwargs: Any) -> None:
        super().__init__(params, **kwargs)
        base = self.params.base
        # As llama.cpp, a cap of 0 (a base past float max, whose first power overflows) is no cap: clamping
        # the exponent to 0 would penalise every repeat by `multiplier` alone, less than a smaller base does.
        cap = int(_FLOAT_MAX_LOG / math.log(base)) if base > 1.000001 else 0
        self._max_exponent = cap if cap > 0 else None
        self._rounds = _rounds_to_count(self.params.allowed_length, base, self._max_exponent)
        breakers = self.params.sequence_breakers
        self._breakers = [(b[0], b[1:]) for b in breakers]  # (head, tail)
        self._single_token_breakers = sorted({b[0] for b in breakers if len(b) == 1})

    def __call__(self, logits: Tensor, ctx: DecodeContext) -> Tensor:
        prm = self.params
        tokens, lengths = context_window(ctx, prm.last_n)
        T = tokens.shape[1]
        if prm.multiplier == 0 or prm.allowed_length >= T:
            return logits
        r = tokens.flip(1)  # r[:, i]: the i-th token from the end; real for i < lengths
        limit = self._repeat_limit(r, lengths)  # [B]
        if torch.compiler.is_compiling():  # no host read: one graph
            z = torch.minimum(repeat_lengths_by_doubling(r, lengths, self._rounds), limit[:, None])
        else:
            z = self._repeat_lengths(r, lengths, limit)  # [B, T-1]: z[:, k-1] for k = 1..T-1
        active = (lengths > prm.allowed_length) & (limit >= prm.allowed_length)  # [B]
        penalised = (z >= prm.allowed_length) & active[:, None]
        if not torch.compiler.is_compiling() and not bool(penalised.any()):
            return logits
        exponent = (z - prm.allowed_length).clamp(min=0, max=self._max_exponent).float()
        power = torch.pow(prm.base, exponent)
        # An overflowed power removes the token whatever the multiplier: one below float32's least (1e-300) is 0
        # there, and 0 * inf would be NaN.
        penalty = torch.where(penalised, torch.where(power.isinf(), power, prm.multiplier * power), 0.0)  # [B, T-1]
        # The repeat ending k tokens before the end was followed by r[k-1]: that token would extend it.
        # Each token takes its longest repeat, i.e. the smallest `logit - penalty` among its
        # repeats (subtraction is monotone, so that is `logit - largest penalty` exactly); a
        # single-token breaker, and an id past the vocabulary, takes none.
        V = logits.shape[-1]
        next_ids = r[:, : T - 1].to(logits.device)
        exempt = next_ids >= V
        if self._single_token_breakers:
            exempt |= torch.isin(next_ids, torch.tensor(self._single_token_breakers, device=logits.device))
        next_ids = next_ids.clamp(max=V - 1)
        penalty = torch.where(exempt, 0.0, penalty.to(logits.device)).to(logits.dtype)
        return logits.scatter_reduce(1, next_ids, logits.gather(1, next_ids) - penalty, reduce="amin")

    def _repeat_limit(self, r: Tensor, lengths: Tensor) -> Tensor:
        """`[B]`: how far back a repeat may reach: up to the nearest sequence breaker, else the whole context.

        A breaker (head, tail...) found with its head i tokens from the end covers r[i], r[i-1], ...,
        r[i-len(tail)]; the repeat may then use only the i - len(tail) tokens after it.
        The nearest breaker wins; of several at the same head, the longest.
        """
        B, T = r.shape
        if not self._breakers:
            return lengths
        best = torch.full((B, T), -1, dtype=torch.long, device=r.device)  # longest breaker with head at i
        inside = torch.arange(T, device=r.device)[None, :] < lengths[:, None]
        for head, tail in self._breakers:
            s = len(tail)
            if s >= T:
                continue
            found = (r == head) & inside
            found[:, :s] = False  # the tail must fit before the end
            for off, token in enumerate(tail):
                found[:, s:] &= r[:, s - 1 - off : T - 1 - off] == token
            best = torch.where(found & (best < s), s, best)
        has = best >= 0
        nearest = has.to(torch.uint8).argmax(-1, keepdim=True)  # first True: the smallest i
        limit = (nearest - best.gather(1, nearest)).squeeze(1)
        return torch.where(has.any(-1), limit, lengths)

    @staticmethod
    def _repeat_lengths(r: Tensor, lengths: Tensor, limit: Tensor) -> Tensor:
        """`[B, T-1]`: z_k = length of the repeat that ends k tokens before the end, capped at `limit`.

        z_k is the longest common prefix of r and r[k:] within each row's real tokens. It is
        extended a block of offsets j at a time (8, 16, 32 wide), each one comparison of shape
        [B, T-1, block], up to `_VECTOR_REACH` offsets. A row with a longer repeat goes to the
        Z-algorithm: the blocks would cost O(T · L) time and memory (a looping row of 8,192 tokens
        took seconds and a gigabyte a step), the Z-algorithm O(T).
        """
        B, T = r.shape
        z = torch.zeros(B, T - 1, dtype=torch.long, device=r.device)
        growing = torch.ones(B, T - 1, dtype=torch.bool, device=r.device)  # r[:j] == r[k:k+j] so far
        reach = min(T - 1, int(limit.max()))
        end, j, width = min(reach, _VECTOR_REACH), 0, 8
        # r, with -1 (no token's id) past each row's real tokens and `end` columns more: compared by views of it,
        # never gathered at [T-1, J] positions (DRY's step took 2.5x as long so at 8,200 tokens)
        real = torch.arange(T + end, device=r.device) < lengths[:, None]
        ahead = torch.where(real, torch.nn.functional.pad(r, (0, end)), -1)
        while j < end:
            J = min(j + width, end) - j
            # [B, T-1, J]: r[j + i] == r[j + i + k] for k = 1..T-1, i < J (window k-1 of `ahead` from j + 1)
            same = r[:, None, j : j + J] == ahead[:, j + 1 : j + T + J - 1].unfold(1, J, 1)
            run = same.cumprod(-1)  # [B, T-1, J]: 1 while every offset so far matched
            z += growing * run.sum(-1)
            growing &= run[..., -1].bool()
            if not bool(growing.any()):
                break
            j, width = j + width, width * 2
        if reach > end:  # some repeat may be longer than the blocks looked: those rows, exactly
            for b in growing.any(-1).nonzero().flatten().tolist():
                row = z_function(r[b, : int(lengths[b])].tolist())[1:]
                z[b, : len(row)] = torch.tensor(row, dtype=torch.long)
        return torch.minimum(z, limit[:, None])


def z_function(s: list[int]) -> list[int]:
    """`z[k]`: the length of the longest common prefix of `s` and `s[k:]` (z[0] = 0); O(len(s)), the Z-algorithm."""
    n = len(s)
    z = [0] * n
    left = right = 0  # s[left:right] == s[: right - left]: the match reaching furthest right so far
    for k in range(1, n):
        if k < right:
            z[k] = min(right - k, z[k - left])  # what s[k - left:] matched, inside the known match
        while k + z[k] < n and s[z[k]] == s[k + z[k]]:
            z[k] += 1
        if k + z[k] > right:
            left, right = k, k + z[k]
    return z


def _rounds_to_count(allowed_length: int, base: float, max_exponent: int | None) -> int | None:
    """How many doublings measure every repeat length that changes a penalty (lengths past `2**rounds - 1`
    penalise as that one does), or None when every length up to the context's counts (1 < base <= 1.000001)."""
    if max_exponent is not None:
        longest = allowed_length + max_exponent  # the exponent is clamped there
    elif base == 1:
        longest = allowed_length  # 1 ** e = 1
    elif base > 1.000001:
        longest = allowed_length + 1  # a base past float max (no cap): base ** 1 is already inf
    else:
        return None
    return longest.bit_length()


def repeat_lengths_by_doubling(r: Tensor, lengths: Tensor, rounds: int | None) -> Tensor:
    """`[B, T-1]`: z_k = the longest common prefix of r and r[k:] within each row's real tokens, k = 1..T-1,
    exact up to `2**rounds - 1` (None: the whole context; a compiled step then recompiles as T doubles).

    `classes[m][b, i]` names the window `r[b, i : i + 2**m]`: equal ids, equal windows. Padding and one column
    past the end are tokens of their own, so a window reaching them equals no other. Then z_k grows by
    2**m, m from the largest down, wherever the window at z_k equals the one at k + z_k.
    """
    B, T = r.shape
    N = T + 1
    pos = torch.arange(N, device=r.device)
    tokens = torch.cat([r, r.new_zeros(B, 1)], 1)
    tokens = torch.where(pos < lengths[:, None], tokens, -1 - pos)  # [B, N]: unique past the real tokens
    if rounds is None:
        rounds = 1
        while (1 << rounds) < T:  # z_k <= T - 1
            rounds += 1
    classes = [_class_ids(tokens)]
    for m in range(rounds - 1):  # the window of 2**(m+1) at i: the one of 2**m at i, then at i + 2**m
        ahead = pos + (1 << m)
        second = torch.where(ahead < N, classes[-1].gather(1, ahead.clamp(max=N - 1).expand(B, N)), N)
        classes.append(_class_ids(classes[-1] * (N + 1) + second))
    k = torch.arange(1, T, device=r.device)
    z = torch.zeros(B, T - 1, dtype=torch.long, device=r.device)
    for m in reversed(range(rounds)):
        # k + z <= N - 1: there only the end's own window, which equals none at z < N - 1
        there = classes[m].gather(1, (k + z).clamp(max=N - 1))
        z = z + (there == classes[m].gather(1, z)) * (1 << m)
    return z


def _class_ids(keys: Tensor) -> Tensor:
    """`[B, N]` ids in [0, N) numbering each row's distinct keys in order: equal keys, equal ids."""
    ordered, order = keys.sort(-1)
    new = torch.ones_like(ordered)
    new[:, 0] = 0
    new[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    return torch.empty_like(keys).scatter_(1, order, new.cumsum(-1))
