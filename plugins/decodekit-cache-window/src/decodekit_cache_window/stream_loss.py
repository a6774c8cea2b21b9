"""Teacher-forced loss of a text streamed through a KV cache in one pass.

The text is fed in blocks of `chunk` tokens at positions 0, 1, 2, ... of one row, so every
token is predicted from everything the cache still holds, as it would be in generation.
With a cache that keeps all this is a full-context forward; with one that evicts it is how
the model does when it reads a whole book through its window (docs/caches.md).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from decodekit.errors import ParameterError
from decodekit.plugins import create_cache
from decodekit.spec import CacheSpec

__all__ = ["stream_loss"]


@torch.no_grad()
def stream_loss(model: Any, ids: list[int] | torch.Tensor, cache: str, *, chunk: int = 128) -> float:
    """Mean next-token cross-entropy (nats/token) of `ids` fed through `cache` (a backend name or string form)."""
    data = torch.as_tensor(ids, dtype=torch.long)
    n = data.numel() - 1
    if n < 1:
        raise ParameterError("stream_loss: need at least 2 tokens")
    if chunk < 1:
        raise ParameterError(f"stream_loss: chunk={chunk} is invalid; allowed: chunk >= 1")
    spec = CacheSpec.for_model(model.spec, batch_size=1, capacity=n)
    kv = create_cache(cache, spec)
    total = 0.0
    for start in range(0, n, chunk):
        end = min(start + chunk, n)
        logits = model(data[None, start:end], torch.arange(start, end)[None], kv)
        total += F.cross_entropy(logits[0].float(), data[start + 1 : end + 1], reduction="sum").item()
    return total / n
