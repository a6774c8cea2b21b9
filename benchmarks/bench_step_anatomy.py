"""Where a decode step's time goes after the model's forward: the figures behind docs/benchmarks.md's
"Where the full chain's time goes".

Reference GPT of `bench_generate.py` (2 layers, 128 dims, vocabulary 50,257), batch 1, one thread.

1. Small ops right after a forward. Every decode step of a minimal loop (forward + argmax) runs
   one variant, rotating step by step, timed alone; and the forward after it, timed too. The
   variants: nothing; one small op; the same small op 20 times; 20 different small ops; `top_k`'s pool `topk`
   followed by ordering 50 ids with `sort`, or with a `topk` of all 50 (what `sample` does);
   entering and leaving inference mode (what `dk.stream` does each step). The same variants
   are timed warm (back to back) for comparison.
2. `dk.generate` with the full chain against the same ops written as one plain function (no
   stages, no candidate objects, constants made once) in a bare loop with the same history
   buffer and host read, and that function with `torch.topk` over the row in place of the grid
   search; every loop's steps timed as `bench_generate.py` times them (`StepClock`): per-step
   medians, each round's ratio to the minimal loop in the same round (order rotating), median
   and middle half over rounds. The plain function is a lower bound, not the chain's semantics:
   it penalises in place, divides only the pool by T (which the chain no longer may), reads its
   tie check back to the host and handles one row.

    python benchmarks/bench_step_anatomy.py [--rounds 16] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from bench_generate import StepClock, dk_step_times, minimal_step_times
from decodekit_gpt.gpt import GPT, GPTConfig

import decodekit as dk
from decodekit.context import row_generators

FULL_CHAIN = "repetition_penalty(1.1) | temperature(0.8) | top_k(50) | top_p(0.9) | sample"
V, R, C, K = 50257, 29, 1733, 50  # the vocabulary as the grid search sees it: R rows of C groups
PROMPT, NEW = 32, 128


def small_op_variants() -> dict[str, Callable[[], object]]:
    x = torch.randn(1, 51)
    c = torch.tensor(2.0)
    idx = torch.randint(0, 51, (1, 51))
    pool = torch.randn(1, R * (K + 1))  # top_k's pool, then the 50 ids `sample` orders
    ids = torch.randperm(V)[:K][None]
    mode = torch.inference_mode()

    def mode_switch() -> None:
        with mode:  # what `dk.stream` does around each step (`dk.generate` holds the mode throughout)
            pass

    def twenty_different() -> None:
        a = x.add(c)
        b = a.mul(c)
        d = b.gt(c)
        e = torch.where(d, a, b)
        f = e.gather(1, idx)
        g = f.softmax(-1)
        h = g.cumsum(-1)
        i = h.sub(c).exp().clamp(min=0.0)
        i.sort(-1)
        i.topk(5)
        i.amax(-1)
        i.argmax(-1)
        torch.searchsorted(h, c.view(1, 1))
        i.div(c).neg().abs().log().sqrt()

    return {
        "nothing": lambda: None,
        "one small op": lambda: x.add(c),
        "the same op 20 times": lambda: [x.add(c) for _ in range(20)],
        "20 different small ops": twenty_different,
        "topk of the 1,479-value pool, then sort 50 ids": lambda: (pool.topk(K + 1), ids.sort(-1)),
        "the same topk, then a topk of the 50 smallest ids": lambda: (pool.topk(K + 1), ids.topk(K, largest=False)),
        "inference mode entered and left": mode_switch,
    }


def bench_small_ops(model: GPT, prompt: torch.Tensor, rounds: int) -> None:
    variants = small_op_variants()
    names = list(variants)
    after: dict[str, list[float]] = {n: [] for n in names}
    next_forward: dict[str, list[float]] = {n: [] for n in names}
    warm: dict[str, float] = {}
    with torch.inference_mode():
        for n in names:
            variants[n]()  # first calls (caches, lazy init)
        for r in range(rounds):
            cache = dk.create_cache("dense", dk.CacheSpec.for_model(model.spec, batch_size=1, capacity=PROMPT + NEW))
            pos = torch.arange(PROMPT + NEW)[None]
            logits = model(prompt, pos[:, :PROMPT], cache, last_only=True)[:, -1]
            for t in range(PROMPT, PROMPT + NEW - 1):
                name = names[(t + r) % len(names)]
                start = time.perf_counter()
                variants[name]()
                end = time.perf_counter()
                tok = logits.argmax(-1, keepdim=True)
                f0 = time.perf_counter()
                logits = model(tok, pos[:, t : t + 1], cache)[:, -1]
                f1 = time.perf_counter()
                after[name].append(end - start)
                next_forward[name].append(f1 - f0)
        for n in names:
            samples = []
            for _ in range(200):
                start = time.perf_counter()
                variants[n]()
                samples.append(time.perf_counter() - start)
            warm[n] = statistics.median(samples)
    base = statistics.median(next_forward["nothing"])
    print("| right after a forward | µs | warm µs | next forward vs after `nothing` |")
    print("|---|---:|---:|---:|")
    for n in names:
        nf = statistics.median(next_forward[n]) - base
        print(f"| {n} | {statistics.median(after[n]) * 1e6:.1f} | {warm[n] * 1e6:.1f} | {nf * 1e6:+.1f} µs |")


def plain_chain(use_topk: bool) -> Callable[[torch.Tensor, dk.DecodeContext], torch.Tensor]:
    """The full chain's ops as one function (a lower bound): penalty 1.1 in place, temperature 0.8 on the pool,
    top-k 50 (grid search, or `torch.topk` over the row), top-p 0.9, an inverse-CDF draw in token order."""
    pen, zero, T, p = (torch.tensor(v) for v in (1.1, 0.0, 0.8, 0.9))
    removed, below, none = torch.tensor(float("-inf")), torch.tensor(-1.0), torch.tensor(-1)
    offsets = torch.arange(0, R * C, C)[None, :, None]

    def step(x: torch.Tensor, ctx: dk.DecodeContext) -> torch.Tensor:
        hist = ctx.tokens
        h = x.gather(1, hist)
        x.scatter_(1, hist, torch.where(h > zero, h / pen, h * pen))
        if use_topk:
            v, ids = x.topk(K + 1)
        else:
            groups = x.view(1, R, C).amax(1, keepdim=True).topk(K + 1, sorted=False).indices
            pool_ids = (offsets + groups).view(1, -1)
            v, pos = x.gather(1, pool_ids).topk(K + 1)
            ids = pool_ids.gather(1, pos)
        v = v / T
        kth, after = v[0, K - 1 : K + 1].tolist()
        assert after < kth  # no tie at the k-th value on these logits
        v, ids = v[:, :K], ids[:, :K]
        cum = (v - v[:, :1]).exp_().cumsum_(-1)
        last = torch.searchsorted(cum[:, :-1], cum[:, -1:] * p)
        v = torch.where(v.gather(1, last) > v, removed, v)
        ids, order = ids.topk(K, largest=False)
        cdf = (v.gather(1, order) - v[:, :1]).exp_().cumsum_(-1)
        target = ctx.uniform(keepdim=True) * cdf[:, -1:]
        pick = torch.searchsorted(cdf[:, :-1], target, right=True)
        return torch.where(target > below, ids.gather(1, pick), none).view(-1)

    return step


def plain_step_times(model: GPT, prompt: torch.Tensor, step: Callable[..., torch.Tensor]) -> list[float]:
    """A decode loop like `dk.generate`'s (history buffer, one host read per step) around `step`,
    its steps timed as `bench_generate` times every loop (`StepClock`)."""
    clock = StepClock(model)
    cache = dk.create_cache("dense", dk.CacheSpec.for_model(model.spec, batch_size=1, capacity=PROMPT + NEW))
    buf = torch.zeros(1, PROMPT + NEW, dtype=torch.long)
    buf[:, :PROMPT] = prompt
    pos = torch.arange(PROMPT + NEW)[None]
    ctx = dk.DecodeContext(tokens=buf[:, :PROMPT], generators=row_generators(0, 1))
    logits = clock(buf[:, :PROMPT], pos[:, :PROMPT], cache, last_only=True)[:, -1]
    for t in range(PROMPT, PROMPT + NEW):
        ctx.tokens = buf[:, :t]
        tok = step(logits, ctx)
        tok.tolist()
        buf.select(1, t).copy_(tok)
        if t < PROMPT + NEW - 1:
            logits = clock(buf[:, t : t + 1], pos[:, t : t + 1], cache)[:, -1]
    return clock.decode_steps()


def bench_chain_in_loop(model: GPT, prompt: torch.Tensor, rounds: int) -> None:
    chain = dk.Chain.parse(FULL_CHAIN)
    cases: dict[str, Callable[[], list[float]]] = {
        "minimal loop (forward + argmax)": lambda: minimal_step_times(model, prompt, NEW),
        "dk.generate, full chain": lambda: dk_step_times(model, prompt, chain, NEW),
        "the same ops as one plain function": lambda: plain_step_times(model, prompt, plain_chain(False)),
        "that function, torch.topk for the grid": lambda: plain_step_times(model, prompt, plain_chain(True)),
    }
    names = list(cases)
    base = names[0]
    ratios: dict[str, list[float]] = {n: [] for n in names}
    medians: dict[str, list[float]] = {n: [] for n in names}
    with torch.inference_mode():
        for fn in cases.values():
            fn()  # warm-up
        for r in range(rounds):
            order = names[r % len(names) :] + names[: r % len(names)]
            step = {n: statistics.median(cases[n]()) for n in order}
            for n in names:
                ratios[n].append(step[n] / step[base])
                medians[n].append(step[n])
    print("| one decode step, full chain (median step per round) | µs | ratio to minimal loop | middle half |")
    print("|---|---:|---:|---|")
    for n in names:
        q1, _, q3 = statistics.quantiles(ratios[n], n=4)
        ms = statistics.median(medians[n]) * 1e6
        print(f"| {n} | {ms:.1f} | {statistics.median(ratios[n]):.3f}x | {q1:.3f}x – {q3:.3f}x |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=V, block_size=1024, n_layer=2, n_head=4, n_embd=128)).eval()
    prompt = torch.randint(0, V, (1, PROMPT))
    bench_small_ops(model, prompt, args.rounds)
    print()
    bench_chain_in_loop(model, prompt, args.rounds)


if __name__ == "__main__":
    main()
