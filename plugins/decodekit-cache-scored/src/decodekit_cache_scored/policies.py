"""What each scored cache ranks its entries by (a higher score is kept).

`initial` scores a token when it is written; `contributions` turns the attention weights of a forward's
queries into per-query scores of every key (per kv-head); `apply` folds them into the held scores.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["H2O", "TOVA", "KeyNorm", "Policy", "Recent"]


class Policy:
    """Scores that never change after a token is written (the base: key-norm and StreamingLLM's rule)."""

    observes = False  # whether the policy needs the model's queries

    def initial(self, k: Tensor, slots: Tensor) -> Tensor:
        """Scores `[B, H_kv, T]` of new keys `k` `[B, H_kv, T, D]` written at stream slots `slots` `[B, H_kv, T]`."""
        initial = self.at(slots)
        if initial is None:
            raise NotImplementedError
        return initial

    def at(self, slots: Tensor) -> Tensor | None:
        """`initial` when it depends on the stream slots alone (`[..., T]`, any leading dims), else None."""
        return None

    def contributions(self, weights: Tensor, kv_heads: int) -> Tensor:
        """`[..., B, H_kv, T, S]` from attention weights `[..., B, H, T, S]` (a zero row for a padding query;
        `...`: the layers, when a forward is scored for all at once)."""
        raise NotImplementedError

    def apply(self, score: Tensor, contributions: Tensor) -> Tensor:
        """The held scores `[..., B, H_kv, S]` after the queries of `contributions` `[..., B, H_kv, T, S]`."""
        return score

    def rows(self, tokens: int) -> int:
        """How many of a block's last `tokens` queries `apply` reads (`contributions` may be given those only)."""
        return 0


class KeyNorm(Policy):
    """Key-norm (Devoto et al. 2024): a key of small L2 norm draws attention, so keep the smallest norms."""

    def initial(self, k: Tensor, slots: Tensor) -> Tensor:  # from the keys
        norm: Tensor = torch.linalg.vector_norm(k.float(), dim=-1)
        return -norm


class Recent(Policy):
    """StreamingLLM's rule (Xiao et al. 2024): keep the newest (with the sinks the cache always keeps). Every score is
    the same, so the newer entry wins each tie (`keep_top`): a score of the slot itself would have to move with a row
    that `crop_rows` moves."""

    def at(self, slots: Tensor) -> Tensor:
        return torch.zeros(slots.shape, device=slots.device)


class H2O(Policy):
    """Heavy hitters (Zhang et al. 2023): the attention a key has received, summed over every query so far
    (mean over the query heads of its kv-head)."""

    observes = True

    def at(self, slots: Tensor) -> Tensor:
        return torch.zeros(slots.shape, device=slots.device)

    def contributions(self, weights: Tensor, kv_heads: int) -> Tensor:
        *lead, H, T, S = weights.shape
        return weights.view(*lead, kv_heads, H // kv_heads, T, S).mean(-3)

    def apply(self, score: Tensor, contributions: Tensor) -> Tensor:
        return score + contributions.sum(-2)

    def rows(self, tokens: int) -> int:
        return tokens


class TOVA(H2O):
    """TOVA (Oren et al. 2024): the attention of the latest query alone, averaged over every head, so all
    kv-heads keep the same tokens."""

    def contributions(self, weights: Tensor, kv_heads: int) -> Tensor:
        *lead, _, T, S = weights.shape
        return weights.mean(-3, keepdim=True).expand(*lead, kv_heads, T, S)

    def apply(self, score: Tensor, contributions: Tensor) -> Tensor:
        return contributions[..., -1, :].contiguous()  # a copy: the heads were a broadcast view

    def rows(self, tokens: int) -> int:
        return min(1, tokens)
