"""Tiny random targets and drafts: a target, and a draft close to it (the target with noise added)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Literal

import pytest
import torch
from decodekit_gpt.gpt import GPT, GPTConfig

from decodekit.spec import ModelSpec


def tiny(
    vocab_size: int = 101, *, seed: int = 0, position: Literal["learned", "rope"] = "learned", block_size: int = 64
) -> GPT:
    """A random reference GPT whose (tied) embedding is scaled up 3x: peaked enough distributions that a
    noisy copy agrees with it often but not always (a plain random init is nearly uniform)."""
    torch.manual_seed(seed)
    config = GPTConfig(
        vocab_size=vocab_size, block_size=block_size, n_layer=2, n_head=4, n_kv_head=2, n_embd=32, position=position
    )
    model = GPT(config).eval()
    with torch.no_grad():
        model.wte.weight.mul_(3.0)
    return model


def noisy_copy(model: GPT, scale: float, seed: int = 1) -> GPT:
    """The model with Gaussian noise of std `scale` added to every weight: a draft that often agrees."""
    g = torch.Generator().manual_seed(seed)
    twin = copy.deepcopy(model)
    with torch.no_grad():
        for p in twin.parameters():
            p.add_(torch.randn(p.shape, generator=g) * scale)
    return twin.eval()


@pytest.fixture(scope="module")
def make_tiny() -> Callable[..., GPT]:
    """`tiny` itself, for a test that needs models of its own contexts."""
    return tiny


@pytest.fixture(scope="module")
def target() -> GPT:
    return tiny()


@pytest.fixture(scope="module")
def draft(target: GPT) -> GPT:
    return noisy_copy(target, 0.03)


@pytest.fixture(scope="module")
def wrong_draft(target: GPT) -> GPT:
    """A draft whose greedy picks the target rejects (noise of the weights' own size)."""
    return noisy_copy(target, 1.0)


@pytest.fixture(scope="module")
def rope_pair() -> tuple[GPT, GPT]:
    """A rotary-position target and its noisy draft."""
    model = tiny(position="rope", seed=3)
    return model, noisy_copy(model, 0.03)


class Letters:
    """A tokenizer of the letters a..z, one id each (a grammar reads its tokens' bytes)."""

    def __init__(self, size: int) -> None:
        self.letters = "abcdefghijklmnopqrstuvwxyz"[:size]

    def encode(self, text: str) -> list[int]:
        return [self.letters.index(c) for c in text]

    def decode(self, ids: list[int]) -> str:
        return "".join(self.letters[i] for i in ids)

    def token_bytes(self) -> list[bytes]:
        return [c.encode() for c in self.letters]


@pytest.fixture(scope="module")
def small_pair() -> tuple[GPT, GPT]:
    """A target over 12 letters, peaked enough that the joint of three tokens fills a few hundred cells, and a
    draft that differs from it (accepted about half the time under a sampled chain)."""
    model = tiny(vocab_size=12)
    model.tokenizer = Letters(12)  # type: ignore[assignment]  # a plain attribute, as a loaded model's
    twin = noisy_copy(model, 0.1)
    twin.tokenizer = model.tokenizer  # type: ignore[assignment]
    return model, twin


class OnlyIds(torch.nn.Module):
    """A newcomer's draft: its forward takes the ids alone."""

    def __init__(self, vocab_size: int) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab_size, 8)
        self.spec = ModelSpec(n_layers=1, n_heads=1, n_kv_heads=1, head_dim=8, vocab_size=vocab_size, max_positions=64)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.embed.weight[input_ids] @ self.embed.weight.T


@pytest.fixture(scope="module")
def ids_only() -> Callable[[int], torch.nn.Module]:
    """`ids_only(vocab_size)`: a draft whose forward takes `input_ids` alone."""
    return OnlyIds
