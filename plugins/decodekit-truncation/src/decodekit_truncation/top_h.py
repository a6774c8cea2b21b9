"""Top-H ("Top-H Decoding: Adapting the Creativity and Coherence with Bounded Entropy in Text Generation",
NeurIPS 2025, arXiv 2509.02510; transformers 5 `TopHLogitsWarper`, `generate(top_h=...)`).

Over the `top_n` most probable tokens, renormalised to q (transformers fixes top_n = 100): keep the
most probable tokens while their entropy terms -q log q, summed in order of probability, stay within
`h` times the entropy of q (the most probable token always). The sum never decreases along the
order, so the kept set is every token whose logit is >= a per-row cut: no host read, one static
shape (`top_candidates`), as compile wants. On the candidate fast path it keeps at most 2 * top_n tokens
(room for top_n ties at the cut), so the stages after it never see the whole vocabulary again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from decodekit.candidates import keep_at_least, top_candidates
from decodekit.stage import Candidates, ProcessorBase
from decodekit_truncation._keep import as_float32, remove_below
from decodekit_truncation.params import TopHParams

if TYPE_CHECKING:
    from decodekit.context import DecodeContext

__all__ = ["TopH", "top_h_cut"]


def top_h_cut(top: Tensor, h: float) -> Tensor:
    """The smallest logit kept `[B, 1]`, from each row's largest logits `top` `[B, n]` sorted descending.

    transformers' arithmetic step for step (`torch.distributions.Categorical` on the top logits), so the
    cut is its own on float32: removed tokens (-inf) have q = 0 and a NaN term, which no sum passes."""
    normalized = top - top.logsumexp(-1, keepdim=True)
    q = normalized.softmax(-1)
    entropy = -(normalized.clamp(min=torch.finfo(normalized.dtype).min) * q).sum(-1, keepdim=True)
    summed = (-q * q.log()).cumsum(-1)
    kept = (summed <= entropy * h).sum(-1, keepdim=True)  # a prefix: the sum never decreases
    return top.gather(-1, (kept - 1).clamp_(min=0))  # the most probable token always stays


def _working(logits: Tensor) -> Tensor:
    """The logits in float32 for the arithmetic, as transformers', but float64 kept: in float32 its logits round
    (the candidates, compared in float64, then lost the token at the cut) or overflow to inf (the row NaN)."""
    return logits if logits.dtype == torch.float64 else as_float32(logits)


class TopH(ProcessorBase[TopHParams]):
    """Keep the most probable tokens whose summed entropy terms stay within `h` times the top-n entropy."""

    def _cut(self, largest: Tensor) -> Tensor:
        """The cut `[B, 1]` from a row's largest logits, sorted: the first top_n of them, -inf past the row's end,
        so that the dense row and its candidates reach the cut by the same arithmetic."""
        n = self.params.top_n
        head = _working(largest[:, :n])
        if head.shape[-1] < n:
            head = torch.nn.functional.pad(head, (0, n - head.shape[-1]), value=float("-inf"))
        return top_h_cut(head.contiguous(), self.params.h)

    def __call__(self, logits: Tensor, ctx: DecodeContext) -> Tensor:
        x = _working(logits)
        top = top_candidates(x, min(self.params.top_n, x.shape[-1]))[0].values  # sorted descending
        # Every token tied with the last one kept stays (transformers keeps those its topk lists first).
        return remove_below(logits, x, self._cut(top))

    def to_candidates(self, logits: Tensor, ctx: DecodeContext) -> Candidates | None:
        n = 2 * self.params.top_n  # room for top_n ties at the cut
        if n >= logits.shape[-1]:
            return None  # the whole row: nothing saved
        c, bound = top_candidates(logits, n)
        cut = self._cut(c.values)
        # ties at a cut of the bound may reach past, and a cut of +inf (a row holding +inf) removes the token at it
        # densely (inf - inf is NaN): both redone densely
        return keep_at_least(c, cut, (cut > bound) & (cut < float("inf")))

    def on_candidates(self, c: Candidates, ctx: DecodeContext) -> Candidates:
        cut = self._cut(c.values)  # every token not listed is removed: the candidates hold the whole row
        return keep_at_least(c, cut, cut < float("inf"))
