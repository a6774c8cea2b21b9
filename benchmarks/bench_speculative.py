"""Speculative decoding against plain `dk.generate` on tiny-shakespeare: tokens/s, ratio and acceptance per k.

Chains: greedy, and `temperature(0.8) | top_p(0.95)`; draft `tiny-shakespeare-draft` for k = 1..8, and
prompt lookup ("ngram") on a prompt whose continuation quotes an earlier passage. Batch 1. Plain and
speculative runs alternate round by round in this process; the ratio reported is the median over
rounds of each round's ratio (plain time / speculative time for the same tokens), so a burst of load
on a shared machine moves both sides of a round. Writes a Markdown table to stdout and a plot.

    python benchmarks/bench_speculative.py [--target tiny-shakespeare:DIR] [--draft NAME ...] [--repeats 5]
        [--max-k 8] [--heuristic K ...] [--plot PATH]

`--heuristic K` adds a row of `k=K, schedule="heuristic"` to every case (prompt lookup's too); with `--schedule-pairs`
each case instead times `schedule="heuristic"` against `"constant"` at k = K, alternating, the ratio per pair.

`--draft` may be given more than once (e.g. `--draft tiny-shakespeare-draft --draft tiny-shakespeare-draft:DIR`,
a draft export directory): the drafts are measured one after the other in this process, each against plain.

`--batch-cache SPEC` measures instead a batch of 8 ragged prompts through the cache `SPEC` (`"window(size=64)"`,
`"h2o(budget=64)"`: past eviction with 200 tokens), with the (first) draft: verified in one forward (the cache's
`crop_rows`) against one row at a time (the same cache with `crop_rows` hidden, as the strategy runs a cache without
it), alternating, the minimum of `--repeats` runs each. `--window-batch SIZE` is `--batch-cache "window(size=SIZE)"`.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import torch

import decodekit as dk
from decodekit.plugins import cache_factory

CHAINS = {"greedy": "greedy", "sampled": "temperature(0.8) | top_p(0.95)"}
PROMPT = "ROMEO:\n"
# The continuation of the second copy quotes the first: what prompt lookup is for.
PASSAGE = "To be, or not to be, that is the question:\nWhether 'tis nobler in the mind to suffer\n"
QUOTING_PROMPT = PASSAGE + "\nHAMLET:\n" + PASSAGE[:24]
NGRAM_KS = [(k, "constant") for k in (1, 2, 3, 4, 8)]


class Row(NamedTuple):
    """One k (and schedule): speculative tokens/s, the median ratio to plain (with quartiles), the acceptance rate and
    the mean acceptance length (tokens per round that drafted)."""

    k: int
    schedule: str
    tokens_per_second: float
    ratio: float
    low: float
    high: float
    acceptance: float
    length: float

    @property
    def label(self) -> str:
        return str(self.k) if self.schedule == "constant" else f"{self.k}, {self.schedule}"


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
clock = CLOCKS["wall"]  # `--clock cpu`: this process's CPU time, which another job on a shared machine moves less


def timed(run: Callable[[], Any]) -> tuple[float, Any]:
    start = clock()
    out = run()
    return clock() - start, out


def measure(
    target: Any, prompt: str, chain: str, draft: Any, ks: list[tuple[int, str]], tokens: int, repeats: int
) -> tuple[float, list[Row]]:
    """Plain tokens/s, and one `Row` per (k, schedule)."""

    def plain() -> dk.Generation:
        return dk.generate(target, [prompt], chain=chain, max_new_tokens=tokens, seed=0)

    plain()  # warm-up
    rows = []
    base_times: list[float] = []
    for k, schedule in ks:

        def spec(k: int = k, schedule: str = schedule) -> dk.Generation:
            options = {"draft": draft, "k": k, "schedule": schedule, "chain": chain, "seed": 0}
            return dk.decode(target, [prompt], strategy="speculative", max_new_tokens=tokens, **options)

        spec()
        ratios, spec_times, rate, length = [], [], 0.0, 0.0
        for r in range(repeats):
            pair = [plain, spec] if r % 2 == 0 else [spec, plain]
            (t_a, a), (t_b, b) = timed(pair[0]), timed(pair[1])
            t_plain, t_spec, out = (t_a, t_b, b) if r % 2 == 0 else (t_b, t_a, a)
            ratios.append(t_plain / t_spec)
            spec_times.append(t_spec)
            base_times.append(t_plain)
            rate, length = out.acceptance_rate or 0.0, out.mean_acceptance_length or 1.0  # None: nothing drafted
        q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
        speed = tokens / statistics.median(spec_times)
        rows.append(Row(k, schedule, speed, statistics.median(ratios), q[0], q[2], rate, length))
    return tokens / statistics.median(base_times), rows


def forward_costs(target: Any, draft: Any, widths: list[int], repeats: int = 200) -> dict[str, float]:
    """Median µs of one forward against a cache holding 100 tokens: the target on 1 and on each width
    of new tokens (a verification), the draft on 1 (a drafted token); interleaved call by call."""
    times: dict[str, list[float]] = {}
    calls = [("target", target, 1), *((f"target x{w}", target, w) for w in widths), ("draft", draft, 1)]
    caches: dict[str, Any] = {}  # dense caches: they crop
    with torch.inference_mode():
        for label, model, _ in calls:
            spec = dk.CacheSpec.for_model(model.spec, batch_size=1, capacity=128)
            caches[label] = cache = dk.create_cache("dense", spec)
            model(torch.zeros(1, 100, dtype=torch.long), torch.arange(100)[None], cache)
        for _ in range(repeats):
            for label, model, width in calls:
                ids, positions = torch.zeros(1, width, dtype=torch.long), torch.arange(100, 100 + width)[None]
                start = time.perf_counter()
                model(ids, positions, caches[label])
                times.setdefault(label, []).append(time.perf_counter() - start)
                caches[label].crop(100)
    return {label: statistics.median(t) * 1e6 for label, t in times.items()}


BATCH_PROMPTS = [
    "ROMEO:\n",
    "JULIET:\nO Romeo, Romeo! wherefore art thou Romeo?\n",
    "KING HENRY:\nOnce more unto the breach, dear friends, once more;\n",
    "HAMLET:\n",
    "First Citizen:\nBefore we proceed any further, hear me speak.\n",
    "MENENIUS:\nWhat work's, my countrymen, in hand?\n",
    "LADY MACBETH:\nOut, damned spot! out, I say!\n",
    "DUKE VINCENTIO:\n",
]


def cache_batch(target: Any, draft: Any, cache: str, k: int, tokens: int, repeats: int) -> None:
    """Tokens/s of the 8-prompt batch through `cache` (a cache's string form): batched against one row at a time."""
    bound = cache_factory(cache)
    impl: Any = bound.impl
    if not callable(getattr(impl, "crop_rows", None)):
        raise SystemExit(f"--batch-cache {cache!r}: {bound.entry.name} has no crop_rows; allowed: a cache with it")
    row_by_row = type("RowByRow", (impl,), {"crop_rows": None})  # hidden: the strategy decodes rows one at a time
    runs = {
        "one row at a time": functools.partial(row_by_row, params=bound.params),
        "batched": functools.partial(impl, params=bound.params),
    }
    outputs: dict[str, list[list[int]]] = {}
    best: dict[str, float] = {}

    def run(label: str) -> float:
        options = {"draft": draft, "k": k, "chain": "greedy", "max_new_tokens": tokens, "stop_tokens": []}
        seconds, out = timed(
            lambda: dk.decode(target, BATCH_PROMPTS, strategy="speculative", cache=runs[label], **options)
        )
        outputs[label] = out.tokens
        return seconds

    for label in runs:  # warm-up
        run(label)
    for r in range(repeats):
        for label in runs if r % 2 == 0 else list(runs)[::-1]:
            best[label] = min(best.get(label, float("inf")), run(label))
    assert outputs["batched"] == outputs["one row at a time"], "the two give different tokens"
    new = len(BATCH_PROMPTS) * tokens
    print(f"{cache}, {len(BATCH_PROMPTS)} prompts, {tokens} new tokens each, k={k}, greedy, best of {repeats}")
    print(f"| speculative, {bound.entry.name} | tokens/s |\n|---|---|")
    for label, seconds in best.items():
        print(f"| {label} | {new / seconds:.0f} |")
    print(f"\nbatched / one row at a time: {best['one row at a time'] / best['batched']:.2f}x")


def schedule_pair(target: Any, prompt: str, chain: str, draft: Any, k: int, tokens: int, repeats: int) -> str:
    """`schedule="heuristic"` against `"constant"` at the same k, alternating call by call: the median (quartiles)
    of each pair's time ratio, and each one's drafts and rounds (a table row's last cells)."""
    outs: dict[str, Any] = {}

    def run(schedule: str) -> float:
        options = {"draft": draft, "k": k, "schedule": schedule, "chain": chain, "seed": 0}
        seconds, outs[schedule] = timed(
            lambda: dk.decode(target, [prompt], strategy="speculative", max_new_tokens=tokens, **options)
        )
        return seconds

    run("constant"), run("heuristic")  # warm-up
    ratios = []
    for r in range(repeats):
        order = ["constant", "heuristic"] if r % 2 == 0 else ["heuristic", "constant"]
        times = {schedule: run(schedule) for schedule in order}
        ratios.append(times["constant"] / times["heuristic"])
    q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
    counts = " | ".join(f"{sum(o.drafted)} / {sum(o.draft_rounds)}" for o in (outs["constant"], outs["heuristic"]))
    return f"**{statistics.median(ratios):.2f}x** ({q[0]:.2f}-{q[2]:.2f}) | {counts}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", default="tiny-shakespeare")
    p.add_argument("--draft", action="append", help="a model name (default tiny-shakespeare-draft); repeat to compare")
    p.add_argument("--tokens", type=int, default=200)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--clock", choices=sorted(CLOCKS), default="wall", help="cpu: the process's CPU time (1 thread)")
    p.add_argument("--max-k", type=int, default=8)
    p.add_argument(
        "--heuristic", type=int, action="append", metavar="K", help='also k=K, schedule="heuristic" (repeatable)'
    )
    p.add_argument(
        "--schedule-pairs", action="store_true", help="--heuristic K against k=K constant, paired, instead of the table"
    )
    p.add_argument("--batch-cache", metavar="SPEC", help='measure a batch through a cache, e.g. "h2o(budget=64)"')
    p.add_argument("--window-batch", type=int, metavar="SIZE", help='--batch-cache "window(size=SIZE)"')
    p.add_argument("--k", type=int, default=4, help="k of --batch-cache")
    p.add_argument("--plot", type=Path, default=Path(__file__).resolve().parents[1] / "docs/img/speculative.png")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    global clock
    clock = CLOCKS[args.clock]
    names = args.draft or ["tiny-shakespeare-draft"]
    target, drafts = dk.load_model(args.target), {name: dk.load_model(name) for name in names}
    batch = f"window(size={args.window_batch})" if args.window_batch is not None else args.batch_cache
    if batch is not None:
        cache_batch(target, drafts[names[0]], batch, args.k, args.tokens, args.repeats)
        return
    heuristic = [(k, "heuristic") for k in args.heuristic or []]
    ks = [(k, "constant") for k in range(1, args.max_k + 1)] + heuristic
    print(
        f"target {args.target}, draft {', '.join(names)}, {args.tokens} new tokens, batch 1, "
        f"{args.repeats} rounds, {torch.get_num_threads()} thread(s), {args.clock} time\n"
    )
    for name, draft in drafts.items():
        costs = forward_costs(target, draft, [3, 5, 9])
        print("forward, 100 tokens cached: " + ", ".join(f"{label} {us:.0f} µs" for label, us in costs.items()))
        print(f"{name} / target cost c = {costs['draft'] / costs['target']:.2f}\n")
    results: dict[str, list[Row]] = {}
    cases = [
        (label if len(drafts) == 1 else f"{label}, {name}", PROMPT, chain, draft, name, ks, args.tokens)
        for label, chain in CHAINS.items()
        for name, draft in drafts.items()
    ]
    cases += [
        (f"{label}, quoting prompt", QUOTING_PROMPT, chain, "ngram", "ngram", NGRAM_KS + heuristic, 120)
        for label, chain in CHAINS.items()
    ]
    if args.schedule_pairs:
        print(
            "| chain | draft | k | heuristic / constant speed (median, quartiles) | constant: drafted / rounds "
            "| heuristic: drafted / rounds |\n|---|---|---|---|---|---|"
        )
        for (label, prompt, chain, d, d_name, _, tokens), (k, _) in itertools.product(cases, heuristic):
            print(f"| {label} | {d_name} | {k} | {schedule_pair(target, prompt, chain, d, k, tokens, args.repeats)} |")
        return
    print("| chain | draft | k | tokens/s | speed-up (median, quartiles) | acceptance | tokens per round |")
    print("|---|---|---|---|---|---|---|")
    for label, prompt, chain, d, d_name, k_values, tokens in cases:
        base, rows = measure(target, prompt, chain, d, k_values, tokens, args.repeats)
        print(f"| {label} | (plain dk.generate) | | {base:.0f} | 1.00x | | |")
        for r in rows:
            ratio = f"**{r.ratio:.2f}x** ({r.low:.2f}-{r.high:.2f})"
            speed, accepted = f"{r.tokens_per_second:.0f}", f"{r.acceptance:.2f} | {r.length:.2f}"
            print(f"| {label} | {d_name} | {r.label} | {speed} | {ratio} | {accepted} |")
        results[label] = [r for r in rows if r.schedule == "constant"]  # the plot's curves are over k
    plot(results, args.plot)
    print(f"\nplot: {args.plot}")


def plot(results: dict[str, list[Row]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (speed, accept) = plt.subplots(1, 2, figsize=(10, 4))
    for label, rows in results.items():
        ks = [r.k for r in rows]
        style = "--" if "quoting" in label else "-"
        speed.plot(ks, [r.ratio for r in rows], style, marker="o", label=label)
        speed.fill_between(ks, [r.low for r in rows], [r.high for r in rows], alpha=0.15)
        accept.plot(ks, [r.acceptance for r in rows], style, marker="o", label=label)
    speed.axhline(1.0, color="grey", lw=0.8)
    speed.set(xlabel="k (drafted tokens per step)", ylabel="speed-up over dk.generate", title="tokens/s ratio")
    accept.set(xlabel="k", ylabel="accepted / drafted", title="acceptance rate", ylim=(0, 1.05))
    speed.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
