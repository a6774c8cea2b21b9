"""A character-level LSTM that speaks the model protocol: a draft far cheaper per token than a GPT.

On a CPU a forward of a small model costs what it dispatches, about 45 operations per GPT layer;
one LSTM step is one fused operation. Its KV cache holds the recurrent state after each token
instead of keys and values (layer `l`'s hidden state as the "key", its cell state as the "value",
one head of `hidden` wide), so `crop` rolls the state back to any earlier token, as speculative
decoding needs. Position 0 (a row's first token) and padding (negative positions) start from the
zero state. Needs a cache that keeps every token (`dense`, `gqa`; `int8` rounds the state): the state
of the last slot is read back with an update of zero tokens.

Under `compile=True` a cached forward traces whole: dynamo refuses any access to an `nn.LSTM`, so the steps
read its weights from `cell_weights`, and no host read decides whether a row starts afresh.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import Tensor, nn

from decodekit.cache import KVCache, cache_name, evicts
from decodekit.errors import ParameterError
from decodekit.spec import ModelSpec

__all__ = ["LSTMConfig", "LSTMModel"]


@dataclass(frozen=True)
class LSTMConfig:
    """`n_layer` stacked LSTM layers of `n_embd` hidden units over `n_input`-wide character embeddings."""

    vocab_size: int = 84
    block_size: int = 256  # the context it was trained on; reported as `spec.max_positions`
    n_layer: int = 1
    n_embd: int = 208
    n_input: int = 32

    def to_dict(self) -> dict[str, object]:
        return {"arch": "lstm", **asdict(self)}


def _reread_weights(model: LSTMModel, incompatible: object) -> None:
    """After `load_state_dict`: with `assign=True` it replaced the LSTM's tensors."""
    model.cell_weights = model._read_weights()


class LSTMModel(nn.Module):
    """Embedding, LSTM, linear head: `model(input_ids [B, T], positions [B, T], cache) -> logits [B, T, V]`."""

    supports_last_only = True

    def __init__(self, config: LSTMConfig) -> None:
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_input)
        self.rnn = nn.LSTM(config.n_input, config.n_embd, num_layers=config.n_layer, batch_first=True)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size)
        self.cell_weights = self._read_weights()
        self.register_load_state_dict_post_hook(_reread_weights)  # type: ignore[no-untyped-call]

    def _read_weights(self) -> list[list[Tensor]]:
        """Per layer `w_ih, w_hh, b_ih, b_hh`: the LSTM's own tensors, so compiled steps read them without
        touching the `nn.LSTM` (refreshed, as nn.LSTM refreshes its flat weights, when they may be replaced)."""
        return [list(weights) for weights in self.rnn.all_weights]

    def _apply(self, fn: Callable[..., Any], recurse: bool = True) -> LSTMModel:  # .to(), .half(), ...
        super()._apply(fn, recurse)  # type: ignore[no-untyped-call]  # untyped in torch 2.13
        self.cell_weights = self._read_weights()
        return self

    @property
    def spec(self) -> ModelSpec:
        c = self.config
        return ModelSpec(
            n_layers=c.n_layer,
            n_heads=1,
            n_kv_heads=1,
            head_dim=c.n_embd,
            vocab_size=c.vocab_size,
            max_positions=c.block_size,
        )

    def forward(
        self,
        input_ids: Tensor,
        positions: Tensor | None = None,
        cache: KVCache | None = None,
        *,
        last_only: bool = False,
    ) -> Tensor:
        """Logits `[B, T, V]` (`[B, 1, V]` with `last_only`); without a cache every row starts at position 0."""
        x = self.wte(input_ids)  # [B, T, E]
        if cache is None:
            y, _ = self.rnn(x)
        else:
            assert positions is not None, "LSTMModel: a cache needs positions"
            y = self._cached(x, positions, cache)
        if last_only:
            y = y[:, -1:]
        out: Tensor = self.lm_head(y)
        return out

    def validate_cache(self, cache: KVCache, reach: int) -> None:
        """Refuse an evicting cache when a decode opens, naming it: a forward may see it through a view (a prompt's
        copies prefilled once: docs/caches.md, "The prefill's view of the cache")."""
        _refuse_evicting(cache)

    def _cached(self, x: Tensor, positions: Tensor, cache: KVCache) -> Tensor:
        """One LSTM step per column from the state the cache holds for its last slot; every step's state is stored.

        Steps use `torch.lstm_cell`: nn.LSTM's fused CPU kernel costs more to set up per call than one step computes.
        """
        _refuse_evicting(cache)
        B, T, _ = x.shape
        empty = x.new_empty(B, 1, 0, self.config.n_embd)
        # [T, B, 1]: 0 where a row starts (position 0) or is padding; a mask of ones (exact) rather than a host read
        keep = (positions > 0).to(x.dtype).T[:, :, None]
        y = x
        for layer in range(self.config.n_layer):
            k, v = cache.update(layer, empty, empty)  # [B, 1, S, H]: this layer's states so far
            h, c = (k[:, 0, -1], v[:, 0, -1]) if k.shape[2] else (empty.new_zeros(B, empty.shape[3]),) * 2
            weights = self.cell_weights[layer]
            hs = []
            for t in range(T):
                h, c = h * keep[t], c * keep[t]
                h, c = torch.lstm_cell(y[:, t], (h, c), *weights)
                hs.append(h)
                # Each state goes on as the cache gives it back: a lossy store (int8) then rounds every state
                # alike however many tokens a forward feeds (which, in a batch, depends on the other rows).
                k, v = cache.update(layer, h[:, None, None], c[:, None, None])
                h, c = k[:, 0, -1], v[:, 0, -1]
            y = torch.stack(hs, 1)  # [B, T, H]
        return y


def _refuse_evicting(cache: KVCache) -> None:
    if evicts(cache):  # an evicting cache would drop the state it must read back
        raise ParameterError(
            f"LSTMModel: cache {cache_name(type(cache))} is invalid; allowed: a cache that keeps every token "
            "(dense, gqa, int8)"
        )
