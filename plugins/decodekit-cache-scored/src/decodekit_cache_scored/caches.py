"""The registered scored caches: a policy each over `ScoredCache` (SnapKV adds its prompt rule)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from decodekit.spec import CacheSpec
from decodekit_cache_scored.cache import ObservingScoredCache, ScoredCache
from decodekit_cache_scored.params import ScoredParams, SnapKVParams
from decodekit_cache_scored.policies import H2O, TOVA, KeyNorm, Policy, Recent
from decodekit_cache_scored.state import Block

__all__ = ["H2OCache", "KeyNormCache", "SnapKVCache", "StreamingCache", "TOVACache"]


class H2OCache(ObservingScoredCache):
    """H2O: the heavy hitters by accumulated attention, plus the sinks and the recent tokens."""

    name = "h2o"
    policy = H2O()

    def __init__(self, spec: CacheSpec, params: ScoredParams | None = None) -> None:
        super().__init__(spec, ScoredParams() if params is None else params)


class TOVACache(ObservingScoredCache):
    """TOVA: drop what the latest query, over all heads, attends to least."""

    name = "tova"
    policy = TOVA()

    def __init__(self, spec: CacheSpec, params: ScoredParams | None = None) -> None:
        super().__init__(spec, ScoredParams() if params is None else params)


class KeyNormCache(ScoredCache):
    """Key-norm: keep the keys of smallest L2 norm (no attention needed: it does not observe)."""

    name = "knorm"
    policy = KeyNorm()

    def __init__(self, spec: CacheSpec, params: ScoredParams | None = None) -> None:
        super().__init__(spec, ScoredParams() if params is None else params)


class StreamingCache(ScoredCache):
    """StreamingLLM's rule under a full prefill: the sinks and the newest tokens (kvpress's StreamingLLMPress).
    `window` applies the same rule to every query, the prompt's included."""

    name = "streaming"
    policy = Recent()

    def __init__(self, spec: CacheSpec, params: ScoredParams | None = None) -> None:
        super().__init__(spec, ScoredParams() if params is None else params)


_DECODE: dict[str, Policy] = {"h2o": H2O(), "tova": TOVA(), "knorm": KeyNorm()}


class SnapKVCache(ObservingScoredCache):
    """SnapKV: a prompt (a first block longer than `window` and `slack`) is compressed by the attention its
    last `window` queries pay to each key, mean over them, average-pooled over `kernel` keys and over the
    query heads of each kv-head, the window itself kept; then the `decode` policy evicts."""

    name = "snapkv"

    def __init__(self, spec: CacheSpec, params: SnapKVParams | None = None) -> None:
        params = SnapKVParams() if params is None else params
        self.window, self.kernel = params.window, params.kernel
        self.policy = _DECODE[params.decode]
        super().__init__(spec, params)

    def _selection(self, block: Block, score: Tensor) -> Tensor:
        T, w, weights = block.slots.shape[-1] - self.slots, self.window, block.weights
        if block.start != 0 or weights is None or w >= T:
            return score
        B, H, _, _ = weights.shape
        observed = weights[:, :, T - w :, self.slots : self.slots + T - w].mean(2)  # [B, H, T - w]
        pooled = F.avg_pool1d(observed, self.kernel, stride=1, padding=self.kernel // 2)
        pooled = pooled.view(B, self.spec.n_kv_heads, H // self.spec.n_kv_heads, T - w).mean(2)
        held = torch.full((*pooled.shape[:2], self.slots), -math.inf, device=pooled.device)
        kept = torch.full((*pooled.shape[:2], w), math.inf, device=pooled.device)
        return torch.cat([held, pooled, kept], -1)
