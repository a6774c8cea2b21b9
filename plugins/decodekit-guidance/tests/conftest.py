"""Fixtures: the tests' model (`tiny`), and a second implementation of guided decoding: each stream of each prompt
alone, through its own cache of the backend (or recomputed from its whole history), the formula written out here."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch
from torch import Tensor

import decodekit as dk
from decodekit.testing.tiny_lm import TinyLM


def tiny(seed: int = 0) -> TinyLM:
    """Rotary, grouped-query (4 heads, 2 kv-heads), a letter tokenizer; logits spread enough that guidance changes
    greedy tokens."""
    model = TinyLM(40, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, max_positions=96, seed=seed)
    model.tokenizer = dk.testing.tiny_lm.Letters(40)  # type: ignore[assignment]
    return model


class Stream:
    """One row's history, fed to the model through its own cache (`cache=None`: recomputed each step)."""

    def __init__(self, model: TinyLM, prompt: Sequence[int], cache: str, total: int) -> None:
        self.model, self.tokens = model, list(prompt)
        self.kv = None
        if cache != "none":
            spec = dk.CacheSpec.for_model(model.spec, batch_size=1, capacity=total, dtype=torch.float32, device="cpu")
            self.kv = dk.create_cache(cache, spec)
        self.fed = 0

    def logits(self) -> Tensor:
        """`[V]` after the history."""
        start = 0 if self.kv is None else self.fed
        ids = torch.tensor([self.tokens[start:]])
        positions = torch.arange(start, len(self.tokens))[None]
        with torch.no_grad():
            out: Tensor = self.model(ids, positions, self.kv)[0, -1]
        self.fed = len(self.tokens)
        return out


def guided_greedy(
    model: TinyLM, prompt: Sequence[int], negative: Sequence[int] | None, scale: float, new: int, cache: str = "none"
) -> list[int]:
    """Greedy tokens of `scale * (log_softmax(cond) - log_softmax(uncond)) + log_softmax(uncond)`."""
    total = max(len(prompt), len(negative or [])) + new
    cond = Stream(model, prompt, cache, total)
    uncond = Stream(model, negative if negative is not None else prompt[-1:], cache, total)
    out = []
    for _ in range(new):
        c, u = torch.log_softmax(cond.logits(), -1), torch.log_softmax(uncond.logits(), -1)
        token = int((scale * (c - u) + u).argmax())
        out.append(token)
        cond.tokens.append(token)
        uncond.tokens.append(token)
    return out


def first_step_scores(
    model: TinyLM, prompt: Sequence[int], negative: Sequence[int], scale: float
) -> tuple[Tensor, Tensor]:
    """(the conditional log-probabilities, the guided scores) of the first step."""
    c = torch.log_softmax(Stream(model, prompt, "none", 0).logits(), -1)
    u = torch.log_softmax(Stream(model, negative, "none", 0).logits(), -1)
    return c, scale * (c - u) + u


@pytest.fixture(scope="module")
def model() -> TinyLM:
    return tiny()


@pytest.fixture(scope="session")
def reference_greedy() -> Callable[..., list[int]]:
    """`guided_greedy(model, prompt, negative, scale, new, cache="none")`."""
    return guided_greedy


@pytest.fixture(scope="session")
def reference_first_step() -> Callable[..., Any]:
    """`first_step_scores(model, prompt, negative, scale) -> (cond log-probabilities, guided scores)`."""
    return first_step_scores
