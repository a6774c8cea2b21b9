"""`DecodeContext`: what a processor or selector may read at one decode step; and each row's seed and generator."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, SupportsIndex, cast

import torch
from torch import Tensor

from decodekit.errors import ParameterError
from decodekit.prompts import as_index

if TYPE_CHECKING:
    from decodekit.prompts import Tokenizer

__all__ = ["DecodeContext", "mix_seed", "row_generators", "row_seeds"]

_SEED_MIX = 0x9E3779B97F4A7C15  # 2**64 / golden ratio: spreads (seed, row) pairs apart
_SEED_MASK = (1 << 63) - 1


def mix_seed(seed: int, index: int) -> int:
    """A seed for item `index` of something seeded with `seed`, far from every other index's."""
    return ((seed * _SEED_MIX) ^ (index + 1) * 0xBF58476D1CE4E5B9) & _SEED_MASK


def row_seeds(seed: SupportsIndex | Sequence[SupportsIndex] | None, prompts: int, copies: int = 1) -> list[int] | None:
    """Each row's seed, for `copies` rows per prompt (None: fresh seeds): prompt `b` its own or `mix_seed(seed, b)`;
    its copy 0 that seed, so the first of `n` samples is the one sample, and copy `i > 0` `mix_seed(prompt_seed, i)`.
    No row depends on its batch (docs/strategies.md)."""
    if seed is None:
        return None
    if (one := as_index(seed)) is not None:  # NumPy's and 0-d tensors' integers too
        per_prompt = [mix_seed(one, b) for b in range(prompts)]
    else:
        items = seed.tolist() if hasattr(seed, "tolist") else seed  # a NumPy array or a tensor of seeds
        ids = [as_index(s) for s in items] if isinstance(items, Sequence) and not isinstance(items, str) else [None]
        if None in ids:  # a str was read as one seed per digit
            raise ParameterError(f"row_seeds: seed={seed!r} is invalid; allowed: an integer, one per prompt, or None")
        per_prompt = cast(list[int], ids)
    return [mix_seed(s, i) if i else s for s in per_prompt for i in range(copies)]


def row_generators(
    seeds: int | Sequence[int] | None, batch_size: int, device: torch.device | str = "cpu"
) -> list[torch.Generator]:
    """One generator per row, row `b`'s from `seeds` and `b` alone (docs/concepts.md, "Seeds"): one int (row `b`
    gets `mix_seed(seed, b)`), one int per row (used as is), or None (fresh nondeterministic seeds)."""
    per_row = row_seeds(seeds, batch_size)
    if per_row is None:
        per_row = [int(torch.randint(0, 2**62, ()).item()) for _ in range(batch_size)]
    elif len(per_row) != batch_size:
        raise ParameterError(
            f"seed: {len(per_row)} per-row seeds given; allowed: one int, or one seed per row ({batch_size})"
        )
    return [torch.Generator(device=device).manual_seed(s) for s in per_row]


@dataclass(eq=False)
class DecodeContext:
    """The history and per-row state a processor may read; only `tokens` is required (docs/concepts.md).
    `tokens` `[B, T]`: the prompts, left-padded, then what was generated; row `b`'s real tokens are its last
    `prompt_lengths[b] + step` columns (`valid_mask()`), and the last `step` are every row's generated ones (a `step`
    outside `0 .. T` is refused, a `ParameterError`)."""

    tokens: Tensor
    prompt_lengths: Tensor | None = None  # [B] real prompt tokens per row; None: no padding
    step: int = 0  # tokens generated so far for every row
    generators: Sequence[torch.Generator] | None = None  # one per row, for stochastic stages
    state: dict[int, tuple[Any, Any]] = field(default_factory=dict)  # id(stage) -> (stage, state)
    draws: Tensor | None = None  # [B, n]: this step's first uniforms, drawn ahead (`draw_uniforms`)
    drawn: int = 0  # uniforms the step has taken, from `draws` or not (the next `draw_uniforms` may draw as many)
    tokenizer: Tokenizer | None = None  # the model's, for stages that read text (a grammar); None: none
    prompt_index: Sequence[int] | None = None  # [B] the prompt each row serves; None: row b serves prompt b

    def __post_init__(self) -> None:
        if self.tokens.dim() != 2 or self.tokens.dtype not in (torch.int64, torch.int32):
            raise ParameterError(
                f"DecodeContext: tokens of shape {tuple(self.tokens.shape)} and dtype {self.tokens.dtype}; "
                "allowed: integer [B, T]"
            )
        if self.tokens.numel() and not self.tokens.is_meta and int(self.tokens.min()) < 0:  # read once, here
            raise ParameterError(f"DecodeContext: token id {int(self.tokens.min())}; allowed: ids >= 0")
        # Built once a decode (the engine sets `step` and `tokens` on its context each step, unchecked): a context
        # built by hand whose generated tokens would not all be in `tokens` is refused.
        T = self.tokens.shape[1]
        if not 0 <= self.step <= T:
            raise ParameterError(
                f"DecodeContext: step={self.step} is invalid for tokens of {T} columns; allowed: 0 <= step <= {T} "
                "(the generated tokens are the last `step` columns of tokens)"
            )

    @property
    def batch_size(self) -> int:
        return self.tokens.shape[0]

    @property
    def generated(self) -> Tensor:
        """The generated tokens `[B, step]` (never padded)."""
        return self.tokens[:, self.tokens.shape[1] - self.step :]

    def valid_mask(self) -> Tensor | None:
        """Boolean `[B, T]`, True at real (non-padding) tokens; None when `prompt_lengths` is None (the engine's
        context, where no row is padded)."""
        if self.prompt_lengths is None:
            return None
        T = self.tokens.shape[1]
        starts = T - self.step - self.prompt_lengths.to(self.tokens.device)  # [B] first real column
        return torch.arange(T, device=self.tokens.device) >= starts[:, None]

    def draw_uniforms(self, n: int = 1) -> None:
        """Draw this step's first `n` uniforms of every row now, from the rows' generators, so that a
        compiled step reads them as a tensor instead of calling a generator (which splits the graph).
        `uniform` hands them out first, in order; the numbers are the same either way. The last call's
        tensor is refilled in place when it fits, so a uniform handed out holds until the next call."""
        last = self.draws
        # Refilled: a new tensor slows a compiled step ~8 us (docs/benchmarks.md); an inference one only in that mode.
        if (
            last is not None
            and last.shape == (self.batch_size, n)
            and last.dtype == torch.float32
            and last.device == self.tokens.device
            and (torch.is_inference_mode_enabled() or not last.is_inference())
        ):
            self._refill(last)
        else:
            self.draws = self._draw(n)
        self.drawn = 0

    def uniform(self, *, keepdim: bool = False) -> Tensor:
        """One float32 uniform draw in [0, 1) per row, `[B]` (`[B, 1]` with `keepdim`), from the row's generator."""
        shape = (self.batch_size, 1) if keepdim else (self.batch_size,)
        if self.draws is not None and self.drawn < self.draws.shape[1]:
            u = self.draws[:, self.drawn]
            self.drawn += 1
            return u.view(shape)
        self.drawn += 1
        return self._draw(1).view(shape)

    def _draw(self, n: int) -> Tensor:
        """`[B, n]` float32 uniforms, row b's from its own generator (`torch.rand` is `empty().uniform_()`)."""
        draws = torch.empty(self.batch_size, n, device=self.tokens.device)
        self._refill(draws)
        return draws

    def _refill(self, draws: Tensor) -> None:
        """`draws` `[B, n]` refilled with uniforms, row b's from its own generator, a column at a time: the numbers
        n calls of `uniform` would give (on CUDA one call for n numbers gives other numbers than n calls for one)."""
        for column in (draws,) if draws.shape[1] == 1 else [draws[:, j : j + 1] for j in range(draws.shape[1])]:
            if self.generators is None:
                column.uniform_()
            elif len(self.generators) == 1:
                column.uniform_(generator=self.generators[0])
            else:
                for row, g in zip(column, self.generators):
                    row.uniform_(generator=g)

    def state_for(self, stage: Any) -> Any:
        """The state of a stateful `stage` for this generation, made by `stage.init_state(ctx)` before the first step
        (or on first use, in a context built by hand). Kept with the stage, so no other stage gets its id meanwhile."""
        entry = self.state.get(id(stage))
        if entry is None or entry[0] is not stage:
            entry = self.state[id(stage)] = (stage, stage.init_state(self))
        return entry[1]

    def fork(self) -> DecodeContext:
        """An independent copy to try a step on: the same history, a copy of every stage's state, and
        generators in the same state, so a stage run on it draws the same numbers and changes nothing here."""
        # Not the constructor (its check of the ids reads them back), nor copy.copy (5x slower, every step).
        twin = object.__new__(type(self))  # a subclass of a plugin's stays one
        twin.__dict__.update(self.__dict__)
        twin.generators = None if self.generators is None else [g.clone_state() for g in self.generators]
        # A stateless stage's None needs no copy (deepcopy costs a call per stage per step).
        twin.state = {
            key: (stage, None if value is None else copy.deepcopy(value)) for key, (stage, value) in self.state.items()
        }
        return twin

    def adopt(self, other: DecodeContext) -> None:
        """Take `other`'s generators and stage states (a fork that ran the step this context should have)."""
        self.generators, self.state = other.generators, other.state
