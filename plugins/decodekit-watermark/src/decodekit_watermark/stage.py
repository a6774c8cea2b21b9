"""The `watermark` processor (transformers' `WatermarkLogitsProcessor`, `generate(watermarking_config=...)`): each
row's green list, drawn from its last tokens (`greenlist`), gets `bias` added to its logits. A row with fewer than
`context_width` tokens is left as it is. Put it last before the selector, as transformers applies it after every
other processor. A function of each row's tokens alone: exact under speculative decoding and beam search.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from decodekit.compiling import eager
from decodekit.stage import ProcessorBase
from decodekit_watermark.greenlist import Greenlists
from decodekit_watermark.params import WatermarkParams

if TYPE_CHECKING:
    from decodekit.context import DecodeContext

__all__ = ["Watermark"]


class Watermark(ProcessorBase[WatermarkParams]):
    """Add `bias` to each row's green tokens."""

    def __init__(self, params: WatermarkParams | None = None, /, **kwargs: Any) -> None:
        super().__init__(params, **kwargs)
        self._lists: dict[tuple[int, torch.device], Greenlists] = {}
        self._lock = threading.Lock()  # a stage may serve decodes in several threads; its generators are shared

    def greenlists(self, vocab_size: int, device: torch.device) -> Greenlists:
        with self._lock:
            found = self._lists.get((vocab_size, device))
            if found is None:
                found = self._lists[vocab_size, device] = Greenlists(self.params, vocab_size, device)
            return found

    def __call__(self, logits: Tensor, ctx: DecodeContext) -> Tensor:
        return _marked(self, logits, ctx)


@eager  # a generator reseeded per row and step is host work: one graph break a compiled step
def _marked(stage: Watermark, logits: Tensor, ctx: DecodeContext) -> Tensor:
    lists = stage.greenlists(logits.shape[-1], logits.device)
    tokens = ctx.tokens.to(logits.device)
    T = tokens.shape[1]
    lengths = [T] * len(tokens) if ctx.prompt_lengths is None else (ctx.prompt_lengths + ctx.step).tolist()
    out = logits.clone()
    with stage._lock:
        for b, n in enumerate(lengths):
            if n < stage.params.context_width:
                continue
            row = tokens[b, T - n :]
            green = lists.ids(row) if stage.params.seeding_scheme == "lefthash" else lists.self_hashed(row, logits[b])
            out[b, green] += stage.params.bias
    return out
