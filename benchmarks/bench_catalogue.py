"""One decode step of every catalogue sampler, as a multiple of one `torch.softmax` on the same logits.

    .venv/bin/python benchmarks/bench_catalogue.py [--repeats 60] [--threads 1]

Logits are float32 `[1, 50257]` and `[32, 50257]` (GPT-2's vocabulary); the history is
160 tokens, all generated (so the frequency and presence penalties count all of them), whose
last 16 tokens repeat an earlier 16-token span (so DRY and no-repeat-n-gram have work to do).
The softmax and every sampler are timed round-robin, one call each per round, for
`--repeats` rounds in this process (so a drifting load on a shared machine hits all alike, and
each call finds the caches as another sampler left them); a ratio is the sampler's median
time over the softmax's. Prints a markdown table.

PyTorch's CPU tensors come straight from glibc malloc, which by default returns large
freed blocks to the OS, so a chain of several [32, 50257] temporaries pays page faults on
every call while a lone softmax reuses its block. In a sandboxed VM a page fault can cost
microseconds and then dominates. By default this script asks glibc (mallopt) to keep freed
memory, so the numbers measure the samplers' arithmetic; `--system-malloc` leaves glibc's
defaults, for the cost a default process pays.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import statistics
import time
from collections.abc import Callable

import torch
from torch import Tensor

import decodekit as dk
from decodekit.context import row_generators

VOCAB = 50257
HISTORY = 160
REPEAT = 16

# (chain-string stage, note): the note says why a sampler may exceed 10x.
SAMPLERS: list[tuple[str, str]] = [
    ("min_p(0.05)", ""),
    ("typical(0.9)", "full sort by |surprise - entropy|"),
    ("epsilon(0.0003)", ""),
    ("eta(0.0003)", ""),
    ("top_n_sigma(1.0)", ""),
    ("top_a(0.2)", ""),
    ("top_h(0.4)", ""),
    ("xtc(1.0, 0.1)", ""),
    ("frequency_penalty(0.5)", ""),
    ("presence_penalty(0.5)", ""),
    ("no_repeat_ngram(3)", ""),
    ("dry(0.8, 1.75, 2)", ""),
    ("dynamic_temperature(1.0, 0.5)", ""),
    ("mirostat(5.0, 0.1)", "selector: full sort (its top-k may be any size) + inverse-CDF draw"),
    ("mirostat_v2(5.0, 0.1)", "selector: truncation + inverse-CDF draw"),
    ("adaptive_p(0.3, 0.9)", "selector: a reshape, a second softmax + inverse-CDF draw"),
    ("gumbel", "selector: one random number per vocabulary entry"),
    ("sample", "selector (core), for reference"),
    ("logit_bias({50256: -100.0, 13: 2.0, 198: -5.0})", ""),
    ("sequence_bias([[[13, 198], -2.0], [[464, 3290, 318], 1.5], [[50256], -10.0]])", ""),
    ("bad_words([[13, 198], [464, 3290, 318], [50256]])", ""),
    ("allowed_tokens(list(range(0, 50257, 7)))", ""),
    ("min_new_tokens(1000, [50256])", ""),
    ("exponential_decay(100, 1.01, [50256, 13])", ""),
    ("frequency_penalty(0.5, include_prompt=True)", ""),
    ("watermark(2.0)", "a generator reseeded and a randperm of the vocabulary per row, as transformers draws them"),
]


def history(batch: int, seed: int = 0) -> Tensor:
    """`[B, HISTORY]` random ids whose last REPEAT tokens repeat the span REPEAT * 3 tokens earlier."""
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, VOCAB, (batch, HISTORY), generator=g)
    start = HISTORY - 4 * REPEAT
    tokens[:, -REPEAT:] = tokens[:, start : start + REPEAT]
    return tokens


def keep_freed_memory() -> bool:
    """Ask glibc not to return freed blocks to the OS (M_TRIM_THRESHOLD, M_MMAP_THRESHOLD); True if it agreed."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    libc = ctypes.CDLL(name)
    m_trim_threshold, m_mmap_threshold = -1, -3
    return bool(libc.mallopt(m_trim_threshold, 1 << 30)) and bool(
        libc.mallopt(m_mmap_threshold, 1 << 25)
    )  # 32 MiB, glibc's maximum


def seconds(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def build(text: str) -> Callable[[Tensor, dk.DecodeContext], Tensor]:
    """The stage a chain string names; `allowed_tokens(list(range(...)))` is expanded here."""
    if text.startswith("allowed_tokens("):
        return dk.create("allowed_tokens", tokens=list(range(0, VOCAB, 7)))  # type: ignore[no-any-return]
    chain = dk.Chain.parse(text)
    return chain.processors[0] if chain.processors else chain.selector


def ratios(batch: int, repeats: int) -> dict[str, tuple[float, float]]:
    """name -> (median microseconds, median over the softmax's median)."""
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(batch, VOCAB, generator=g) * 2.5
    ctx = dk.DecodeContext(tokens=history(batch), step=HISTORY, generators=row_generators(0, batch))
    calls: dict[str, Callable[[], object]] = {"softmax": lambda: torch.softmax(logits, -1)}
    for text, _ in SAMPLERS:
        stage = build(text)
        calls[text] = lambda stage=stage: stage(logits, ctx)  # type: ignore[misc]
    times: dict[str, list[float]] = {name: [] for name in calls}
    for round_ in range(repeats + 2):  # two warm-up rounds
        for name, call in calls.items():
            t = seconds(call)
            if round_ >= 2:
                times[name].append(t)
    softmax = statistics.median(times.pop("softmax"))
    return {name: (statistics.median(t) * 1e6, statistics.median(t) / softmax) for name, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1, for stable numbers)")
    parser.add_argument("--system-malloc", action="store_true", help="keep glibc's default trimming (see above)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    malloc = "glibc defaults" if args.system_malloc or not keep_freed_memory() else "freed memory kept (mallopt)"
    small, large = ratios(1, args.repeats), ratios(32, args.repeats)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), median of {args.repeats} rounds, {malloc}\n"
    )
    print("| sampler | [1, 50257] µs | × softmax | [32, 50257] µs | × softmax | note |")
    print("|---|---:|---:|---:|---:|---|")
    for text, note in SAMPLERS:
        (us1, r1), (us32, r32) = small[text], large[text]
        flag = " **>10x**" if max(r1, r32) > 10 else ""
        print(f"| `{text}` | {us1:.0f} | {r1:.1f} | {us32:.0f} | {r32:.1f}{flag} | {note} |")


if __name__ == "__main__":
    main()
