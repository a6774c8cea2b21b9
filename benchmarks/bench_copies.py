"""A prompt's copies prefilled once against every row computed, side by side in one process.

`n` seeded samples of one prompt (as `-n` and best-of-n decode them) and beam search's beams, on the shipped
`tiny-shakespeare-llama` (and the LSTM `tiny-shakespeare-draft`; a batch without copies), with the engine's sharing
on and off (`decodekit.engine.distinct_rows` replaced by a function that finds none); rounds interleaved, the best of
each, tokens asserted equal.

    python benchmarks/bench_copies.py [--threads 1] [--rounds 5]
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Callable
from functools import partial
from typing import Any
from unittest import mock

import torch

import decodekit as dk

PROMPT = "ROMEO: But soft, what light through yonder window breaks? It is the east, and Juliet is the sun. " * 2


def _timed(call: Callable[[], Any], shared: bool) -> tuple[float, Any]:
    finds_none = lambda tokens, positions: None  # noqa: E731  # every row computed
    with contextlib.nullcontext() if shared else mock.patch("decodekit.engine.distinct_rows", finds_none):
        start = time.perf_counter()
        out = call()
        return time.perf_counter() - start, out


def _compare(name: str, call: Callable[[], Any], rounds: int) -> None:
    best = {True: float("inf"), False: float("inf")}
    tokens: dict[bool, Any] = {}
    for _ in range(rounds):
        for shared in (False, True):
            seconds, out = _timed(call, shared)
            best[shared] = min(best[shared], seconds)
            tokens[shared] = out.tokens
    assert tokens[True] == tokens[False], f"{name}: the tokens differ"
    print(f"| {name} | {best[False] * 1e3:.0f} | {best[True] * 1e3:.0f} | {best[False] / best[True]:.2f}x |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rounds = args.rounds
    model = dk.load_model("tiny-shakespeare-llama")
    print("| decode | every row, ms | copies once, ms | speed-up |\n|---|---:|---:|---:|")
    for length in (32, 180):
        prompt = PROMPT[:length]
        for n, new in ((4, 64), (8, 64), (16, 64), (8, 16)):
            options: dict[str, Any] = {"max_new_tokens": new, "seed": list(range(n))}
            prompts = [prompt] * n
            samples = partial(dk.generate, model, prompts, **options)
            _compare(f"n={n}, prompt {length}, {new} new tokens", samples, rounds)
        beam = partial(dk.decode, model, [prompt], strategy="beam(num_beams=4)", max_new_tokens=32)
        _compare(f"beam(num_beams=4), prompt {length}, 32 new tokens", beam, rounds)
    distinct = [PROMPT[i : i + 180] for i in range(8)]  # no copies: what finding none costs
    every_other = partial(dk.generate, model, distinct, max_new_tokens=16, seed=list(range(8)))
    _compare("8 distinct prompts of 180, 16 new tokens", every_other, rounds)
    draft = dk.load_model("tiny-shakespeare-draft")  # an LSTM: one `update` per token, its "cache" the states
    for n in (2, 16):
        samples = partial(dk.generate, draft, [PROMPT[:180]] * n, max_new_tokens=16, seed=list(range(n)))
        _compare(f"LSTM draft, n={n}, prompt 180, 16 new tokens", samples, rounds)


if __name__ == "__main__":
    main()
