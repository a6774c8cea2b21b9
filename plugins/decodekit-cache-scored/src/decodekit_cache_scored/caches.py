"""The registered scored caches: a policy each over `ScoredCache` (SnapKV adds its prompt rule)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from decodekit.spec import CacheSpec
from decodekit_cache_scored.cache import ObservingScoredCache, ScoredCache
from decodekit_cache_scored.params import SnapKVParams
from decodekit_cache_scored.policies import H2O, TOVA, KeyNorm, Policy, Recent
from decodekit_cache_scored.selection import slot_order
from decodekit_cache_scored.state import Block

__all__ = ["H2OCache", "KeyNormCache", "SnapKVCache", "StreamingCache", "TOVACache"]


class H2OCache(ObservingScoredCache):
    """H2O: the heavy hitters by accumulated attention, plus the sinks and the recent tokens."""

    name = "h2o"
    policy = H2O()


class TOVACache(ObservingScoredCache):
    """TOVA: drop what the latest query, over all heads, attends to least."""

    name = "tova"
    policy = TOVA()


class KeyNormCache(ScoredCache):
    """Key-norm: keep the keys of smallest L2 norm (no attention needed: it does not observe)."""

    name = "knorm"
    policy = KeyNorm()


class StreamingCache(ScoredCache):
    """StreamingLLM's rule under a full prefill: the sinks and the newest tokens (kvpress's StreamingLLMPress).
    `window` applies the same rule to every query, the prompt's included."""

    name = "streaming"
    policy = Recent()


_DECODE: dict[str, Policy] = {"h2o": H2O(), "tova": TOVA(), "knorm": KeyNorm()}


class SnapKVCache(ObservingScoredCache):
    """SnapKV: a prompt, or a block longer than `slack` (a chunk of a streamed text), is compressed by the
    attention its last `window` queries (all of a shorter block) pay to each entry, mean over them and over
    the query heads of each kv-head, average-pooled over `kernel` neighbours in slot order (the window counted
    as zeros, as kvpress pads), the window itself kept after the sinks and the recent tokens; shorter forwards
    are evicted by the `decode` policy."""

    name = "snapkv"

    def __init__(self, spec: CacheSpec, params: SnapKVParams | None = None) -> None:
        params = SnapKVParams() if params is None else params
        self.window, self.kernel = params.window, params.kernel
        self.policy = _DECODE[params.decode]
        super().__init__(spec, params)

    def _rows(self, tokens: int) -> int:
        return max(self.policy.rows(tokens), min(self.window, tokens))

    def _selection(self, block: Block, score: Tensor, weights: Tensor | None) -> Tensor:
        if weights is None:
            return score
        T = block.slots.shape[-1] - self.slots
        w = min(self.window, T)  # a block no longer than the window is all window
        B, _, r, S = weights.shape  # the block's last r >= w queries
        observed = weights[:, :, r - w :].mean(2).view(B, block.slots.shape[1], -1, S).mean(2)  # [B, H_kv, S]
        window = block.slots >= block.start + T - w
        observed = observed.masked_fill(window | ~block.alive, 0.0)
        order = slot_order(block.slots, block.alive)
        pooled = F.avg_pool1d(observed.gather(-1, order), self.kernel, stride=1, padding=self.kernel // 2)
        pooled = torch.empty_like(pooled).scatter_(-1, order, pooled)  # back to the block's order
        return pooled.masked_fill(window, torch.finfo(pooled.dtype).max)  # after the sinks and recent (inf)
