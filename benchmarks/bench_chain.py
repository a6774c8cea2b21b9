"""One chain step against one `torch.softmax` on the same logits, in the same process.

Logits: shuffled Zipf-like rows over V = 50,257, `x_i = -1.2 · log(rank_i) + 0.1 · N(0, 1)`
(a peaked distribution with a long tail, as a language model's next-token logits are); the
history for the repetition penalty is 160 random token ids per row. Each call is timed on
its own, in rounds that interleave every case with the softmax baseline; the figure
reported is a case's median call time divided by the softmax's median call time. On a
machine shared with other jobs, `--threads 1` gives steadier figures. Beside each case: the
torch calls it makes (counted once, by a `TorchFunctionMode`), and a reference row with the
time of one small call (`a - b` on `[1, 58]`): on a CPU a step of small tensors costs
about its calls times that, plus its passes over the vocabulary. A last row times the full
chain's arithmetic written out by hand as straight-line torch calls (`straight_line_step`: no
stages, no chain, the same tokens): what eager PyTorch costs for these semantics without the
framework around them. With `--compile`, the same steps as `dk.generate(..., compile=True)`
runs them (`Chain.compiled`: each row's uniform drawn from its generator first, timed with the
step, then the whole fast step as one graph), and the full chain's processors alone compiled.

Everything runs under `torch.inference_mode()`, as the decode loop runs its steps. Targets on
[1, 50257] and [32, 50257], for one step as the decode loop takes it (`select`: the fast path's
processors, selector and per-row mark, no host read; `chain.step` adds its one host read and is
reported beside it): the full chain eager no slower than before the engine, compiled <= 3x softmax.

    python benchmarks/bench_chain.py [--rounds 15] [--calls 50] [--threads N] [--compile]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

import decodekit as dk
from decodekit.candidates import _grid
from decodekit.context import row_generators

VOCAB = 50_257
HISTORY = 160
FULL = "repetition_penalty(1.1) | temperature(0.8) | top_k(50) | top_p(0.9) | sample"
NUCLEUS = "temperature(0.8) | top_p(0.9) | sample"
SELECT = "  [select: one decode-loop step]"
COMPILED = "  [compile=True]"
TARGETS = {(FULL + SELECT, 1): 5.0, (NUCLEUS + SELECT, 1): 10.0}


def peaked_logits(batch: int, seed: int = 0) -> torch.Tensor:
    """`[batch, V]` shuffled Zipf-like logits: `-1.2 · log(rank) + 0.1 · noise`."""
    g = torch.Generator().manual_seed(seed)
    base = -1.2 * torch.log(torch.arange(1, VOCAB + 1, dtype=torch.float32))
    rows = [base[torch.randperm(VOCAB, generator=g)] + 0.1 * torch.randn(VOCAB, generator=g) for _ in range(batch)]
    return torch.stack(rows)


def context(batch: int) -> dk.DecodeContext:
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, VOCAB, (batch, HISTORY), generator=g)
    return dk.DecodeContext(tokens=tokens, step=HISTORY // 2, generators=row_generators(0, batch))


def call_times(fn: Callable[[], object], calls: int, clock: Callable[[], float] = time.perf_counter) -> list[float]:
    """Seconds of each of `calls` calls, timed one by one (so a preempted call is one outlier, not a mean); `clock`:
    wall time, or `time.process_time` for this process's CPU time (steadier on a shared machine)."""
    times = []
    for _ in range(calls):
        start = clock()
        fn()
        times.append(clock() - start)
    return times


class _CallCounter(TorchFunctionMode):
    """Counts the torch functions and methods called (attribute reads such as `.shape` excepted)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if getattr(func, "__name__", "") != "__get__":
            self.calls += 1
        return func(*args, **(kwargs or {}))


def torch_calls(fn: Callable[[], object]) -> int:
    """How many torch calls one call of `fn` makes."""
    counter = _CallCounter()
    with counter:
        fn()
    return counter.calls


def straight_line_step(
    x: torch.Tensor, history: torch.Tensor, generator: torch.Generator, *, scale_candidates: bool = False
) -> torch.Tensor:
    """`FULL`'s step on one unpadded row, written out: the same calls the stages make, no framework.

    `scale_candidates`: divide by T only the candidates `top_k` keeps, not the whole row (what
    the removed `monotone_map` hook let the chain do; top-k of x / T is top-k of x, divided).
    """
    V, k, room = x.shape[1], 50, 58
    R, C = _grid(V, room)
    ids = history.clamp(max=V)
    padded = torch.cat([x, x[:, :1]], 1)  # repetition_penalty(1.1)
    seen = padded.gather(1, ids)
    y = padded.scatter_(1, ids, torch.where(seen > 0, seen / 1.1, seen * 1.1))[:, :V]

    def temperature(z: torch.Tensor) -> torch.Tensor:
        return (z / 0.8).clamp_(max=torch.finfo(z.dtype).max)

    y = y if scale_candidates else temperature(y)
    grid = y[:, : R * C].view(1, R, C)  # top_k(50): room + 1 largest, the last a bound
    groups = grid.amax(1, keepdim=True).topk(room + 1, sorted=False).indices
    pool = (torch.arange(0, R * C, C).view(1, R, 1) + groups).view(1, -1)  # V = 29 · 1733: no tail
    values, pos = y.gather(1, pool).topk(room + 1)
    ids = pool.gather(1, pos)
    values = temperature(values) if scale_candidates else values
    floor, bound = values[:, k - 1 : k], values[:, room:]
    values = torch.where(floor > bound, values.masked_fill(values < floor, float("-inf")), float("nan"))
    cum = (values - values[:, :1]).exp().cumsum(-1)  # top_p(0.9)
    cut = values.gather(1, torch.searchsorted(cum, cum[:, -1:] * 0.9).clamp_(max=room))
    values = values.masked_fill(values < cut, float("-inf"))
    in_order, order = ids.sort(-1)  # sample, in vocabulary order
    in_order_values = values.gather(1, order)
    cdf = (in_order_values - in_order_values.amax(-1, keepdim=True)).exp().cumsum(-1)
    u = torch.rand((1, 1), generator=generator)
    pick = torch.searchsorted(cdf, cdf[:, -1:] * (u * (1.0 - 2.0**-23)), right=True).clamp_(max=room)
    token = in_order.gather(1, pick)
    top, big = values.amax(-1), torch.finfo(values.dtype).max
    return torch.where(top.clamp(-big, big) == top, token.view(-1), -1)


def check_straight_line(x: torch.Tensor, ctx: dk.DecodeContext, chain: dk.Chain) -> None:
    """The hand-written step picks the chain's tokens, draw for draw (else its timing means nothing)."""
    mine = row_generators(0, 1)[0]
    theirs = dk.DecodeContext(tokens=ctx.tokens, step=ctx.step, generators=row_generators(0, 1))
    for draw in range(20):
        a, b = straight_line_step(x, ctx.tokens, mine), chain._select(x, theirs)
        if not torch.equal(a, b):
            raise AssertionError(f"straight_line_step draw {draw}: {a.tolist()} != chain {b.tolist()}")


def compiled_cases(x: torch.Tensor, batch: int) -> dict[str, Callable[[], object]]:
    """The steps as `compile=True` runs them (each row's uniform drawn first, then one graph), and the
    full chain's processors compiled alone."""
    ctx = context(batch)  # its own: the compiled steps draw ahead
    full, nucleus = dk.Chain.parse(FULL).compiled(), dk.Chain.parse(NUCLEUS).compiled()
    processors = torch.compile(dk.Chain.parse(FULL)._process_fast, dynamic=None)

    def step(chain: dk.Chain) -> torch.Tensor:
        ctx.draw_uniforms()
        return chain._select(x, ctx)

    return {
        FULL + SELECT + COMPILED: lambda: step(full),
        NUCLEUS + SELECT + COMPILED: lambda: step(nucleus),
        f"{FULL}  [processors only]" + COMPILED: lambda: processors(x, ctx),
    }


def cases(batch: int, compile: bool = False) -> dict[str, Callable[[], object]]:
    x = peaked_logits(batch)
    ctx = context(batch)
    full, nucleus = dk.Chain.parse(FULL), dk.Chain.parse(NUCLEUS)
    greedy = dk.create("greedy")
    greedy_chain = dk.Chain([], selector=greedy)
    sample = dk.create("sample")
    a, b = torch.randn(1, 58), torch.randn(1, 1)
    by_hand: dict[str, Callable[[], object]] = {}
    if batch == 1:
        check_straight_line(x, ctx, full)
        generator = row_generators(0, 1)[0]
        by_hand[f"{FULL}  [written out by hand, no framework]"] = lambda: straight_line_step(x, ctx.tokens, generator)
        by_hand[f"{FULL}  [by hand, T applied to the candidates only]"] = lambda: straight_line_step(
            x, ctx.tokens, generator, scale_candidates=True
        )
    return {
        "softmax": lambda: torch.softmax(x, -1),
        "one small call (a - b on [1, 58])": lambda: a - b,
        FULL + SELECT: lambda: full._select(x, ctx),
        f"{FULL}  [chain.step: with its host read]": lambda: full.step(x, ctx),
        f"{FULL}  [dense: process + sample]": lambda: sample(full.process(x, ctx), ctx),
        NUCLEUS + SELECT: lambda: nucleus._select(x, ctx),
        f"{NUCLEUS}  [chain.step: with its host read]": lambda: nucleus.step(x, ctx),
        "greedy (selector alone)": lambda: greedy(x, ctx),
        "greedy (chain)": lambda: greedy_chain(x, ctx),
        "sample (selector alone, dense)": lambda: sample(x, ctx),
        **by_hand,
        **(compiled_cases(x, batch) if compile else {}),
    }


def run(batch: int, rounds: int, calls: int, compile: bool) -> tuple[dict[str, float], dict[str, int | None]]:
    """Median seconds per call of each case over every timed call, the cases interleaved round by
    round; and each case's torch calls (None for a compiled case: its calls are a graph's)."""
    fns = cases(batch, compile)
    for fn in fns.values():  # warm up (and compile)
        call_times(fn, 5)
    ops = {name: None if name.endswith(COMPILED) else torch_calls(fn) for name, fn in fns.items()}
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            times[name] += call_times(fn, calls if batch == 1 else max(1, calls // 10))
    return {name: statistics.median(ts) for name, ts in times.items()}, ops


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=50, help="calls per round at batch 1 (a tenth at batch 32)")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1, for stable numbers)")
    parser.add_argument("--compile", action="store_true", help="also time the steps under torch.compile")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, V = {VOCAB}, history {HISTORY} tokens")
    for batch in (1, 32):
        with torch.inference_mode():
            medians, ops = run(batch, args.rounds, args.calls, args.compile)
        base = medians["softmax"]
        print(f"\n[{batch}, {VOCAB}]  softmax: {base * 1e6:8.1f} us")
        for name, t in medians.items():
            if name == "softmax":
                continue
            target = TARGETS.get((name, batch))
            verdict = "" if target is None else f"  target <= {target:g}x: {'met' if t / base <= target else 'MISSED'}"
            calls = "  -" if ops[name] is None else f"{ops[name]:3d}"
            print(f"  {t / base:6.2f}x  {t * 1e6:9.1f} us  {calls} calls  {name}{verdict}")


if __name__ == "__main__":
    main()
