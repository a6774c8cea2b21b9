"""A test plugin for the CLI tests: registers `cli-test-gpt`, a tiny random-init reference GPT.

The CLI runs in a subprocess, so the tests load this module there with
`DECODEKIT_EXTRA_PLUGINS=cli_testplugin` (and `tests/` on `PYTHONPATH`). Registration is by
import path, so listing plugins still imports no torch. The weights come from a fixed seed,
so every process builds the same model.

`DECODEKIT_CLI_TEST_MARKER=PATH`: the model creates PATH on its third forward call (when the
uncached loop has sampled two tokens per row), so a test can wait until generation is under way
(e.g. before sending Ctrl-C).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import Field

from decodekit import hookimpl
from decodekit.hookspecs import Registrar
from decodekit.params import Params

if TYPE_CHECKING:
    from torch import Tensor

__all__ = ["ALPHABET", "MODEL_NAME", "CharTokenizer", "load_model", "register_models"]

MODEL_NAME = "cli-test-gpt"
ALPHABET = "\n" + "".join(chr(c) for c in range(32, 127))  # newline + printable ASCII: 96 characters


class CharTokenizer:
    """One id per character of `ALPHABET`."""

    def __init__(self) -> None:
        self._index = {ch: i for i, ch in enumerate(ALPHABET)}

    def encode(self, text: str) -> list[int]:
        return [self._index[ch] for ch in text]

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(ALPHABET[int(i)] for i in ids)


def load_model(argument: str | None = None, params: object = None) -> Any:
    """The test GPT: 2 layers, 4 heads sharing 2 kv-heads (so `dense` and `gqa` differ), 96 tokens."""
    import torch
    from decodekit_gpt.gpt import GPT, GPTConfig

    class TestGPT(GPT):
        tokenizer: CharTokenizer
        calls = 0

        def forward(
            self, input_ids: Tensor, positions: Tensor | None = None, cache: Any = None, *, last_only: bool = False
        ) -> Tensor:
            self.calls += 1
            marker = os.environ.get("DECODEKIT_CLI_TEST_MARKER")
            if marker and self.calls == 3:
                Path(marker).touch()
            return super().forward(input_ids, positions, cache, last_only=last_only)

    config = GPTConfig(vocab_size=len(ALPHABET), block_size=128, n_layer=2, n_head=4, n_kv_head=2, n_embd=32)
    with torch.random.fork_rng():
        torch.manual_seed(1234)
        model = TestGPT(config)
    with torch.no_grad():
        # Random init gives near-uniform next-token distributions; larger embeddings (tied to the
        # output layer) make them peaked, so truncation and temperature visibly change them.
        model.wte.weight.mul_(8.0)
    model.tokenizer = CharTokenizer()
    model.requires_grad_(False)
    return model.eval()


@hookimpl
def register_models(register: Registrar) -> None:
    register(MODEL_NAME, f"{__name__}:load_model", description="Random-init 2-layer char GPT for the CLI tests")


class BrokenPlugin:
    """A plugin whose hook fails (`DECODEKIT_EXTRA_PLUGINS=cli_testplugin:broken`): listed as a failure."""

    @hookimpl
    def register_samplers(self, register: object) -> None:
        raise RuntimeError("boom: this test plugin always fails")


broken = BrokenPlugin()


class DuplicatePlugin:
    """Registers `greedy` again (`DECODEKIT_EXTRA_PLUGINS=cli_testplugin:duplicate`): the name becomes unusable."""

    @hookimpl
    def register_samplers(self, register: object) -> None:
        register("greedy", "decodekit_greedy.greedy:Greedy", description="a second greedy", kind="selector")  # type: ignore[operator]


duplicate = DuplicatePlugin()


class PatternParams(Params):
    word: str = Field(default="top", pattern=r"^[a-z]+(_[a-z]+)*$", description="a lower-case word")


class Unchanged:
    """A processor that returns the logits as they are (its parameter only has to be listed)."""

    def __init__(self, params: PatternParams | None = None, /, **kwargs: Any) -> None:
        self.params = params

    def __call__(self, logits: Tensor, ctx: object) -> Tensor:
        return logits


class PatternPlugin:
    """Registers `test_pattern`, whose parameter allows what a regex matches and nothing else says so
    (`DECODEKIT_EXTRA_PLUGINS=cli_testplugin:pattern`)."""

    @hookimpl
    def register_samplers(self, register: object) -> None:
        register("test_pattern", f"{__name__}:Unchanged", PatternParams, "returns the logits", kind="processor")  # type: ignore[operator]


pattern = PatternPlugin()
