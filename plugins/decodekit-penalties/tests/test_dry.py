"""DRY against llama.cpp's own test cases, hand-worked breaker cases, and a direct port of its algorithm."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch import Tensor
from torch._subclasses.fake_tensor import FakeTensorMode

import decodekit as dk


def probs_after(probs: list[float], context: list[int], **params: object) -> Tensor:
    x = torch.tensor([probs]).log()
    out: Tensor = dk.create("dry", **params)(x, dk.DecodeContext(tokens=torch.tensor([context])))
    return out.softmax(-1)[0]


@pytest.mark.parametrize(
    ("probs", "context", "expected", "params"),
    [
        # llama.cpp tests/test-sampling.cpp, test_dry(probs, last_tokens, expected, multiplier, base,
        # allowed_length, penalty_last_n, breakers):
        # (0, 1) has not repeated yet: nothing changes.
        ([0.25] * 4, [0, 1], [0.25] * 4, {"multiplier": 1.0, "base": 1.1, "allowed_length": 2, "last_n": 4}),
        # "0 1" ends the context and was followed by 2 before: repeat length 2 = allowed, penalty
        # 1.0 * 1.1**0 = 1 on token 2: p2 = e^-1 / (3 + e^-1) = 0.109232, the rest 0.296923.
        (
            [0.25] * 4,
            [0, 1, 2, 0, 1],
            [0.296923, 0.296923, 0.109232, 0.296923],
            {"multiplier": 1.0, "base": 1.1, "allowed_length": 2, "last_n": 5},
        ),
        # The repeat "0 1" would be followed by 3, a single-token sequence breaker: never penalised.
        (
            [0.2] * 5,
            [0, 1, 3, 4, 0, 1],
            [0.2] * 5,
            {"multiplier": 1.0, "base": 1.1, "allowed_length": 2, "last_n": 6, "sequence_breakers": [[3]]},
        ),
        # multiplier 2: p2 = e^-2 / (4 + e^-2) = 0.032727, the rest 0.241818.
        (
            [0.2] * 5,
            [0, 1, 2, 0, 1],
            [0.241818, 0.241818, 0.032727, 0.241818, 0.241818],
            {"multiplier": 2.0, "base": 1.1, "allowed_length": 2, "last_n": 5},
        ),
        # The repeat "0 1" has length 2 < allowed_length 4.
        (
            [0.2] * 5,
            [0, 1, 2, 3, 4, 0, 1],
            [0.2] * 5,
            {"multiplier": 1.0, "base": 1.1, "allowed_length": 4, "last_n": 7},
        ),
    ],
)
def test_llama_cpp_cases(
    probs: list[float], context: list[int], expected: list[float], params: dict[str, object]
) -> None:
    assert torch.allclose(probs_after(probs, context, **params), torch.tensor(expected), atol=1e-5)


CONTEXT = [7, 8, 1, 2, 7, 8, 1, 2]  # ends with "7 8 1 2", which occurred before, followed by 7


def dry_shift(context: list[int], **params: object) -> list[float]:
    """How much DRY lowers each of 10 logits."""
    x = torch.zeros(1, 10)
    out: Tensor = dk.create("dry", **params)(x, dk.DecodeContext(tokens=torch.tensor([context])))
    shift: list[float] = (-out[0]).tolist()
    return shift


def test_repeat_length_sets_the_exponent() -> None:
    # Repeat length 4, allowed 2: token 7 loses 0.5 * 2**(4 - 2) = 2.
    assert dry_shift(CONTEXT, multiplier=0.5, base=2.0) == [0, 0, 0, 0, 0, 0, 0, 2.0, 0, 0]


def test_multi_token_breaker_limits_the_repeat() -> None:
    # Breaker "7 8": the nearest one ends 2 tokens before the end, so the repeat counts as 2 long:
    # token 7 loses 0.5 * 2**0 = 0.5.
    assert dry_shift(CONTEXT, multiplier=0.5, base=2.0, sequence_breakers=[[7, 8]]) == [0, 0, 0, 0, 0, 0, 0, 0.5, 0, 0]


def test_single_token_breaker_limits_and_is_never_penalised() -> None:
    # Breaker "8": 2 tokens after it, so the repeat counts as 2 long: token 7 loses 0.5.
    assert dry_shift(CONTEXT, multiplier=0.5, base=2.0, sequence_breakers=[[8]]) == [0, 0, 0, 0, 0, 0, 0, 0.5, 0, 0]
    # Breaker "7": 3 tokens after it, but 7 itself is the token that would extend the repeat: no penalty.
    assert dry_shift(CONTEXT, multiplier=0.5, base=2.0, sequence_breakers=[[7]]) == [0.0] * 10


def test_repeat_closer_than_allowed_length_after_a_breaker_is_not_penalised() -> None:
    # Breaker "2" at the very end: the repeat may use 0 tokens, below allowed_length.
    assert dry_shift(CONTEXT, multiplier=0.5, base=2.0, sequence_breakers=[[2]]) == [0.0] * 10


def llama_cpp_dry(
    context: list[int],
    vocab: int,
    multiplier: float,
    base: float,
    allowed: int,
    last_n: int | None,
    breakers: list[list[int]],
) -> list[float]:
    """A line-by-line port of llama.cpp's `llama_sampler_dry_apply` (Z-algorithm and all): the penalties."""
    last = context if last_n is None else context[-last_n:]
    n = len(last)

    def rat(i: int) -> int:  # llama.cpp's ring_buffer::rat: the i-th token from the end
        return last[n - 1 - i]

    out = [0.0] * vocab
    if n <= allowed:
        return out
    heads: dict[int, list[list[int]]] = {}
    for b in breakers:
        heads.setdefault(b[0], []).append(b[1:])
    rep_limit = n
    for i in range(n):
        longest = -1
        for tail in heads.get(rat(i), []):
            s = len(tail)
            if s > longest and s <= i and all(tail[o] == rat(i - o - 1) for o in range(s)):
                longest = s
        if longest >= 0:
            rep_limit = i - longest
            break
    if rep_limit < allowed:
        return out
    count = [0] * n
    lt = rt = 0
    for k in range(1, n):
        if k > rt:
            m = 0
            while m + k < n and rat(m) == rat(m + k):
                m += 1
            count[n - 1 - k] = min(m, rep_limit)
            if m > 0:
                lt, rt = k, k + m - 1
        else:
            p = k - lt
            right = rt - k + 1
            if count[n - 1 - p] < right:
                count[n - 1 - k] = min(count[n - 1 - p], rep_limit)
            else:
                i = rt + 1
                while i < n and rat(i) == rat(i - k):
                    i += 1
                count[n - 1 - k] = min(i - k, rep_limit)
                lt, rt = k, i - 1
    longest_by_token: dict[int, int] = {}
    for i in range(n - 1):
        if count[i] >= allowed:
            token = rat(n - 2 - i)
            longest_by_token[token] = max(longest_by_token.get(token, 0), count[i])
    max_exp = int(88.7228391 / math.log(base)) if base > 1.000001 else 0
    for token, length in longest_by_token.items():
        if [] in heads.get(token, []):
            continue
        e = length - allowed
        if max_exp > 0 and e > max_exp:
            e = max_exp
        out[token] = multiplier * base**e
    return out


@pytest.mark.parametrize("seed", range(6))
def test_matches_a_port_of_llama_cpp_on_random_repetitive_contexts(seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    vocab = 6
    # Repetitive contexts: random phrases from a tiny vocabulary, some repeated.
    rows = []
    for _ in range(4):
        phrases = [
            torch.randint(0, vocab, (int(torch.randint(1, 5, (1,), generator=g)),), generator=g).tolist()
            for _ in range(3)
        ]
        picks = torch.randint(0, 3, (8,), generator=g).tolist()
        rows.append([t for p in picks for t in phrases[p]][:30])
    breakers = [[5], [3, 4]]
    for last_n in (None, 12):
        for allowed in (1, 2, 3):
            for b, row in enumerate(rows):
                ctx = dk.DecodeContext(tokens=torch.tensor([row]))
                stage = dk.create("dry", 0.8, 1.75, allowed, last_n, breakers)
                got = (-stage(torch.zeros(1, vocab), ctx)[0]).tolist()
                want = llama_cpp_dry(row, vocab, 0.8, 1.75, allowed, last_n, breakers)
                assert got == pytest.approx(want, rel=1e-5), (b, last_n, allowed, row)


def test_ragged_batch_rows_match_each_row_alone() -> None:
    rows = [[1, 2, 3, 1, 2], [4, 1, 2, 3, 4, 1, 2, 3, 4, 1, 2], [2, 2, 2]]
    T = max(map(len, rows))
    padded = torch.tensor([[0] * (T - len(r)) + r for r in rows])
    x = torch.randn(3, 8)
    stage = dk.create("dry", 1.0, 2.0, 1)
    together = stage(x, dk.DecodeContext(tokens=padded, prompt_lengths=torch.tensor([len(r) for r in rows])))
    for b, r in enumerate(rows):
        alone = stage(x[b : b + 1], dk.DecodeContext(tokens=torch.tensor([r])))
        assert torch.allclose(together[b : b + 1], alone), b
    assert not torch.equal(together, x)


@pytest.mark.parametrize("base", [1e38, 1e39])
def test_a_base_past_float_max_penalises_at_least_as_much_as_a_smaller_one(base: float) -> None:
    # Context 1 2 1 2: "1 2" ended the context before and was followed by 1, so 1 would extend a repeat of
    # length 2: penalty base**(2 - 1). 1e38 fits float32: 0 - 1e38. 1e39 does not (llama.cpp's cap is 0,
    # i.e. none): base**1 overflows and the token is removed, never penalised by base**0 = 1 alone.
    x = torch.zeros(1, 3)
    out = dk.create("dry", multiplier=1.0, base=base, allowed_length=1)(
        x, dk.DecodeContext(tokens=torch.tensor([[1, 2, 1, 2]]))
    )
    expected = -1e38 if base < 3.4e38 else -math.inf
    assert out.tolist() == [[0.0, pytest.approx(expected, rel=1e-6), 0.0]]


def test_a_base_past_float_max_removes_the_token_under_a_multiplier_float32_rounds_to_zero() -> None:
    # Multiplier 1e-300, 0 in float32. Context 1 2 1 2 (as above): token 1 would extend a repeat of length 2, penalty
    # 1e-300 * 1e39**1, whose power overflows float32: removed (the fuzz found NaN: 0 * inf). Context 0 2 1 2: token 1
    # would extend "2" alone, length 1 = allowed_length, penalty 1e-300 * 1e39**0, 0 in float32: unchanged.
    dry = dk.create("dry", multiplier=1e-300, base=1e39, allowed_length=1)
    x = torch.zeros(2, 3)
    out = dry(x, dk.DecodeContext(tokens=torch.tensor([[1, 2, 1, 2], [0, 2, 1, 2]])))
    assert out.tolist() == [[0.0, -math.inf, 0.0], [0.0, 0.0, 0.0]]


@pytest.mark.parametrize("seed", range(3))
def test_repeats_longer_than_the_blocks_match_the_port_in_a_ragged_batch(seed: int) -> None:
    # Rows looping over a short phrase for hundreds of tokens: repeats far past the 64 offsets
    # measured in blocks, so these rows go to the Z-algorithm; a random row (short repeats) stays.
    g = torch.Generator().manual_seed(seed)
    vocab = 6
    rows = [
        torch.randint(0, vocab, (int(torch.randint(1, 6, (1,), generator=g)),), generator=g).tolist() * 80
        for _ in range(2)
    ]
    rows = [rows[0][:300], rows[1][:170], torch.randint(0, vocab, (120,), generator=g).tolist()]
    rows[1][100] = (rows[1][100] + 1) % vocab  # a break in one loop: the repeat after it is shorter
    T = max(map(len, rows))
    padded = torch.tensor([[0] * (T - len(r)) + r for r in rows])
    lengths = torch.tensor([len(r) for r in rows])
    for last_n, breakers in ((None, []), (150, [[5]]), (None, [[3, 4]])):
        stage = dk.create("dry", 0.8, 1.01, 2, last_n, breakers)
        got = -stage(torch.zeros(3, vocab), dk.DecodeContext(tokens=padded, prompt_lengths=lengths))
        for b, row in enumerate(rows):
            want = llama_cpp_dry(row, vocab, 0.8, 1.01, 2, last_n, breakers)
            assert got[b].tolist() == pytest.approx(want, rel=1e-5), (b, last_n, breakers)


def test_a_looping_history_costs_linear_time() -> None:
    # 8,192 copies of one token: every shift repeats to the end. Measured in blocks over all shifts
    # that took ~3 s and ~1 GB for this one step (O(T·L)); the Z-algorithm takes milliseconds.
    import time

    ctx = dk.DecodeContext(tokens=torch.zeros(1, 8192, dtype=torch.long))
    stage = dk.create("dry", 0.8, 1.75, 2)
    start = time.perf_counter()
    out = stage(torch.zeros(1, 4), ctx)
    assert time.perf_counter() - start < 1.0
    # Token 0 would extend the repeat of length 8,191 - 1 ending one token back: the capped exponent.
    assert out[0, 0].item() == pytest.approx(-0.8 * 1.75 ** int(88.7228391 / math.log(1.75)), rel=1e-5)


@pytest.mark.parametrize("rounds", [None, 3])
def test_the_compiled_steps_search_by_doubling_measures_as_the_eager_one(rounds: int | None) -> None:
    """Ragged rows with short and long repeats: the same repeat lengths, up to 2**rounds - 1, without a host read."""
    from decodekit_penalties.dry import DRY, repeat_lengths_by_doubling

    g = torch.Generator().manual_seed(0)
    rows = [[1, 2] * 40, [3, 1, 2, 3, 1, 2, 2, 3, 1, 2, 3], torch.randint(0, 3, (57,), generator=g).tolist(), [4]]
    T = max(map(len, rows))
    r = torch.tensor([[0] * (T - len(row)) + row for row in rows]).flip(1)
    lengths = torch.tensor([len(row) for row in rows])
    eager = DRY._repeat_lengths(r, lengths, lengths)
    with FakeTensorMode(allow_non_fake_inputs=True):  # any host read would raise
        repeat_lengths_by_doubling(r, lengths, rounds)
    doubled = repeat_lengths_by_doubling(r, lengths, rounds)
    assert torch.equal(doubled, eager if rounds is None else eager.clamp(max=7))
    assert int(eager.max()) == 78  # the loop of "1 2" repeats far past 7


def test_a_step_gathers_nothing_by_position_however_long_the_history() -> None:
    """The blocks compare views of the history: before, each gathered it at [T-1, J] positions, a copy that grew
    with it (DRY's step took 2.5x its time now at 8,200 tokens of Shakespeare, docs/benchmarks.md)."""
    from torch.overrides import TorchFunctionMode

    class Gathered(TorchFunctionMode):
        elements = 0

        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            if func is Tensor.__getitem__:
                index = args[1] if isinstance(args[1], tuple) else (args[1],)
                self.elements += sum(i.numel() for i in index if isinstance(i, Tensor))
            return func(*args, **(kwargs or {}))

    g = torch.Generator().manual_seed(0)
    stage = dk.create("dry", 0.8, 1.75, 2)
    gathered: dict[int, int] = {}
    for T in (200, 2000):
        phrases = [torch.randint(0, 8, (12,), generator=g) for _ in range(4)]  # repeats of up to 12+ tokens
        tokens = torch.cat([phrases[int(i)] for i in torch.randint(0, 4, (T // 12 + 1,), generator=g)])[:T]
        with Gathered() as mode:
            stage(torch.zeros(1, 8), dk.DecodeContext(tokens=tokens[None]))
        gathered[T] = mode.elements
    assert gathered[2000] == gathered[200]
