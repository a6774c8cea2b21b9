"""One chain step against one `torch.softmax` on the same logits, in the same process.

Logits: shuffled Zipf-like rows over V = 50,257, `x_i = -1.2 · log(rank_i) + 0.1 · N(0, 1)`
(a peaked distribution with a long tail, as a language model's next-token logits are); the
history for the repetition penalty is 160 random token ids per row. Each call is timed on
its own, in rounds that interleave every case with the softmax baseline; the figure
reported is a case's median call time divided by the softmax's median call time. On a
machine shared with other jobs, `--threads 1` gives steadier figures.

Everything runs under `torch.inference_mode()`, as the decode loop runs its steps. Targets on
[1, 50257], for one step as the decode loop takes it (`chain.select`: the processors, the
selector and the per-row NaN/empty flag, no host sync; `chain(logits, ctx)` adds the sync
that turns a flag into a NumericsError and is reported beside it):
    repetition_penalty(1.1) | temperature(0.8) | top_k(50) | top_p(0.9) | sample   <= 5x softmax
    temperature(0.8) | top_p(0.9) | sample                                          <= 10x softmax

    python benchmarks/bench_chain.py [--rounds 15] [--calls 50] [--threads N]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

import decodekit as dk
from decodekit.context import row_generators

VOCAB = 50_257
HISTORY = 160
FULL = "repetition_penalty(1.1) | temperature(0.8) | top_k(50) | top_p(0.9) | sample"
NUCLEUS = "temperature(0.8) | top_p(0.9) | sample"
SELECT = "  [select: one decode-loop step]"
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


def call_times(fn: Callable[[], object], calls: int) -> list[float]:
    """Seconds of each of `calls` calls, timed one by one (so a preempted call is one outlier, not a mean)."""
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def cases(batch: int) -> dict[str, Callable[[], object]]:
    x = peaked_logits(batch)
    ctx = context(batch)
    full, nucleus = dk.Chain.parse(FULL), dk.Chain.parse(NUCLEUS)
    greedy = dk.create("greedy")
    greedy_chain = dk.Chain([], selector=greedy)
    sample = dk.create("sample")
    return {
        "softmax": lambda: torch.softmax(x, -1),
        FULL + SELECT: lambda: full.select(x, ctx),
        f"{FULL}  [chain(): with the check's host sync]": lambda: full(x, ctx),
        f"{FULL}  [dense: process + sample]": lambda: sample(full.process(x, ctx), ctx),
        NUCLEUS + SELECT: lambda: nucleus.select(x, ctx),
        f"{NUCLEUS}  [chain(): with the check's host sync]": lambda: nucleus(x, ctx),
        "greedy (selector alone)": lambda: greedy(x, ctx),
        "greedy (chain)": lambda: greedy_chain(x, ctx),
        "sample (selector alone, dense)": lambda: sample(x, ctx),
    }


def run(batch: int, rounds: int, calls: int) -> dict[str, float]:
    """Median seconds per call of each case over every timed call, the cases interleaved round by round."""
    fns = cases(batch)
    for fn in fns.values():  # warm up
        call_times(fn, 5)
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            times[name] += call_times(fn, calls if batch == 1 else max(1, calls // 10))
    return {name: statistics.median(ts) for name, ts in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=50, help="calls per round at batch 1 (a tenth at batch 32)")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1, for stable numbers)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, V = {VOCAB}, history {HISTORY} tokens")
    for batch in (1, 32):
        with torch.inference_mode():
            medians = run(batch, args.rounds, args.calls)
        base = medians["softmax"]
        print(f"\n[{batch}, {VOCAB}]  softmax: {base * 1e6:8.1f} us")
        for name, t in medians.items():
            if name == "softmax":
                continue
            target = TARGETS.get((name, batch))
            verdict = "" if target is None else f"  target <= {target:g}x: {'met' if t / base <= target else 'MISSED'}"
            print(f"  {t / base:6.2f}x  {t * 1e6:9.1f} us  {name}{verdict}")


if __name__ == "__main__":
    main()
