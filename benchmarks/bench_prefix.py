"""A prefix common to a batch's rows prefilled once against each row's whole prompt, side by side in one process.

On the shipped `tiny-shakespeare-llama` (a character model: a token is a character, its context 256), the LSTM
`tiny-shakespeare-draft` (its cache a state per token, moved by `crop_rows` as keys are) and a random
transformers Llama built from a config (`bench_overhead.hf_llama`: 4 layers of 256, a vocabulary of 32,000;
`decodekit-hf`): rows sharing a few-shot block (0 and 16 new tokens), an evaluation's
multiple-choice batch (`max_new_tokens=0`, `prompt_logprobs=0`, the harness's `loglikelihood` lines), and
`--sweep`: prefixes of 8-200 tokens shared by 2-8 rows, scored and with 1 new token, the sharing forced on
(`decodekit.prefix.MIN_SAVED` set to 1) to show where its extra forwards stop paying. Sharing off:
`decodekit.engine.shared_prefixes` replaced by a function that finds none. Rounds interleaved, the best of each, tokens
and prompt logprobs asserted equal to float32 rounding. `--grouped`: batches whose prompts share prefixes in groups
only (4 questions x 4 choices after contexts of their own, scored; 2 few-shot blocks x 4 questions, 0 and 16 new
tokens), and the same questions as 4 batches of one question each against one batch, both sharing (the advice before
groups: `--batch-size 4`); with `--sweep`, questions and contexts of a few sizes, the sharing forced on.

    python benchmarks/bench_prefix.py [--threads 1] [--rounds 5] [--sweep] [--grouped]
"""

from __future__ import annotations

import argparse
import contextlib
import random
import time
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any
from unittest import mock

import torch
from bench_overhead import hf_llama

import decodekit as dk

TEXT = (
    "ROMEO: But soft, what light through yonder window breaks? It is the east, and Juliet is the sun. Arise, fair "
    "sun, and kill the envious moon, who is already sick and pale with grief that thou her maid art far more fair "
    "than she. JULIET: O Romeo, Romeo, wherefore art thou Romeo? Deny thy father and refuse thy name. "
)


@contextlib.contextmanager
def _sharing(on: bool | None) -> Iterator[None]:
    """None: the engine's own rule; True: every common prefix shared; False: none."""
    if on is None:
        yield
    elif on:
        with mock.patch("decodekit.prefix.MIN_SAVED", 1):
            yield
    else:
        with mock.patch("decodekit.engine.shared_prefixes", lambda kv, prompts: None):
            yield


def _compare(name: str, call: Callable[[], Any], rounds: int, on: bool | None = None) -> float:
    best = {True: float("inf"), False: float("inf")}
    outs: dict[bool, Any] = {}
    for _ in range(rounds):
        for shared in (False, True):
            with _sharing(on if shared else False):
                start = time.perf_counter()
                outs[shared] = call()
                best[shared] = min(best[shared], time.perf_counter() - start)
    _check_same(name, outs[True], outs[False])
    ratio = best[False] / best[True]
    print(f"| {name} | {best[False] * 1e3:.0f} | {best[True] * 1e3:.0f} | {ratio:.2f}x |", flush=True)
    return ratio


def _check_same(name: str, shared: dk.Generation, unshared: dk.Generation) -> None:
    assert shared.tokens == unshared.tokens, f"{name}: the tokens differ"
    for mine, theirs in zip(shared.prompt_logprobs or [], unshared.prompt_logprobs or []):
        differ = [abs(a.logprob - b.logprob) for a, b in zip(mine[1:], theirs[1:]) if a and b]
        assert max(differ, default=0.0) < 1e-4, f"{name}: the prompt logprobs differ by {max(differ)}"


def _suffixes(rng: random.Random, rows: int, low: int, high: int) -> list[str]:
    return [TEXT[(at := rng.randrange(len(TEXT) - high)) : at + rng.randint(low, high)] for _ in range(rows)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sweep", action="store_true", help="prefix lengths and row counts, sharing forced on")
    parser.add_argument("--grouped", action="store_true", help="only batches whose prompts share prefixes in groups")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print("| decode | every row, ms | prefix once, ms | speed-up |\n|---|---:|---:|---:|")
    rng = random.Random(0)
    shakespeare = dk.load_model("tiny-shakespeare-llama")
    encode = shakespeare.tokenizer.encode
    if args.grouped:
        _groups(shakespeare, "llama-shakespeare", encode, rng, (100, 100), args.rounds)
        _groups(hf_llama(), "random Llama", lambda text: [ord(c) * 97 for c in text], rng, (300, 200), args.rounds)
        if args.sweep:
            _groups_sweep(shakespeare, encode, rng, args.rounds)
        return
    _rows(shakespeare, "llama-shakespeare", encode, rng, (150, 100), args.rounds)
    # an LSTM: its cache holds a state per token, each forward starting from the last slot's
    _rows(dk.load_model("tiny-shakespeare-draft"), "LSTM draft", encode, rng, (150, 100), args.rounds)
    _rows(hf_llama(), "random Llama", lambda text: [ord(c) * 97 for c in text], rng, (400, 400), args.rounds)
    if args.sweep:
        for length in (8, 16, 32, 64, 128, 200):
            for rows in (2, 4, 8):
                shared = encode((TEXT * 2)[:length])
                batch = [shared + encode(s) for s in _suffixes(rng, rows, 30, 30)]
                call = partial(dk.generate, shakespeare, batch, max_new_tokens=0, prompt_logprobs=0)
                _compare(f"sweep: {rows} rows, prefix {length} + 30, loglikelihood", call, args.rounds, on=True)
                call = partial(dk.generate, shakespeare, batch, max_new_tokens=1, seed=0)  # each row's last column only
                _compare(f"sweep: {rows} rows, prefix {length} + 30, 1 new token", call, args.rounds, on=True)


def _rows(
    model: Any, name: str, encode: Callable[[str], list[int]], rng: random.Random, lengths: tuple[int, int], rounds: int
) -> None:
    """8 rows after a few-shot prefix of `lengths[0]` tokens, 0 and 16 new tokens; 4 choices after a context of
    `lengths[1]`."""
    few_shot = encode((TEXT * 2)[: lengths[0]])
    prompts = [few_shot + encode(s) for s in _suffixes(rng, 8, 20, 60)]
    for new in (0, 16):
        options: dict[str, Any] = {"max_new_tokens": new, "seed": list(range(8))}
        options |= {"prompt_logprobs": 0} if new == 0 else {}
        call = partial(dk.generate, model, prompts, **options)
        _compare(f"{name}: 8 rows, a {lengths[0]}-token prefix + 20-60, {new} new tokens", call, rounds)
    question = encode((TEXT * 2)[: lengths[1]])  # a question's context before each of its 4 choices (lm-eval's lines)
    choices = [question + encode(s) for s in _suffixes(rng, 4, 5, 20)]
    call = partial(dk.generate, model, choices, max_new_tokens=0, prompt_logprobs=0)
    _compare(f"{name}: 4 choices of 5-20 after a {lengths[1]}-token context, loglikelihood", call, rounds)


def _groups(
    model: Any, name: str, encode: Callable[[str], list[int]], rng: random.Random, lengths: tuple[int, int], rounds: int
) -> None:
    """4 questions x 4 choices of 5-20 after contexts of `lengths[0]` tokens each, then of 2/3 to all of it (the
    prefix forward left-pads the shorter), scored; 2 few-shot blocks of `lengths[1]` x 4 questions of 20-60, 0 and
    16 new tokens."""
    n = lengths[0]
    for sizes in ([n] * 4, [n, n * 8 // 9, n * 7 // 9, n * 6 // 9]):
        contexts = [encode((TEXT * 2)[at : at + size]) for at, size in zip((0, 40, 80, 120), sizes)]
        questions = [c + encode(s) for s in _suffixes(rng, 4, 5, 20) for c in contexts]  # a question's choices apart
        words = f"{name}: 4 questions x 4 choices of 5-20 after contexts of {min(sizes)}-{n} tokens, loglikelihood"
        scored = partial(dk.generate, model, questions, max_new_tokens=0, prompt_logprobs=0)
        _compare(words, scored, rounds)
        alone = [questions[i :: len(contexts)] for i in range(len(contexts))]
        apart = partial(
            _call_each, [partial(dk.generate, model, b, max_new_tokens=0, prompt_logprobs=0) for b in alone]
        )
        _versus(f"{name}: the same, 4 batches of a question each / one batch", apart, scored, rounds)
        whole: dk.Generation = scored()
        for i, out in enumerate(apart()):  # each question's lines score as in the one batch
            for mine, theirs in zip(out.prompt_logprobs or [], (whole.prompt_logprobs or [])[i :: len(contexts)]):
                assert max(abs(a.logprob - b.logprob) for a, b in zip(mine[1:], theirs[1:]) if a and b) < 1e-4
    blocks = [encode((TEXT * 2)[at : at + lengths[1]]) for at in (0, 100)]
    asked = _suffixes(rng, 4, 20, 60)
    prompts = [b + encode(q) for b in blocks for q in asked]
    for new in (0, 16):
        options: dict[str, Any] = {"max_new_tokens": new, "seed": list(range(8))}
        options |= {"prompt_logprobs": 0} if new == 0 else {}
        call = partial(dk.generate, model, prompts, **options)
        _compare(f"{name}: 2 few-shot blocks of {lengths[1]} x 4 questions of 20-60, {new} new tokens", call, rounds)


def _groups_sweep(model: Any, encode: Callable[[str], list[int]], rng: random.Random, rounds: int) -> None:
    """2 and 4 questions x 2 and 4 choices of 10 after contexts of 16-128 tokens, scored, the sharing forced on: the
    tokens saved, `(D - G) x W`, where it stops paying."""
    for questions in (2, 4):
        for choices in (2, 4):
            for length in (16, 32, 64, 128):
                contexts = [encode((TEXT * 2)[at : at + length]) for at in range(0, 40 * questions, 40)]
                lines = [c + encode(s) for s in _suffixes(rng, choices, 10, 10) for c in contexts]
                saved = (len(lines) - questions) * length
                words = f"sweep: {questions} questions x {choices} choices, contexts of {length}: {saved} saved"
                call = partial(dk.generate, model, lines, max_new_tokens=0, prompt_logprobs=0)
                _compare(words, call, rounds, on=True)


def _call_each(calls: list[Callable[[], Any]]) -> list[Any]:
    return [call() for call in calls]


def _versus(name: str, first: Callable[[], Any], second: Callable[[], Any], rounds: int) -> None:
    """Two ways to the same results (sharing on), rounds interleaved, the best of each: ms and their ratio."""
    best = [float("inf"), float("inf")]
    for _ in range(rounds):
        for i, call in enumerate((first, second)):
            start = time.perf_counter()
            call()
            best[i] = min(best[i], time.perf_counter() - start)
    print(f"| {name} | {best[0] * 1e3:.0f} | {best[1] * 1e3:.0f} | {best[0] / best[1]:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
