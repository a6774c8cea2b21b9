"""decodekit vs transformers' `generate()` on the same random-init GPT-2 weights, CPU, 2 threads.

For each model size, batch size and chain, three ways to produce 128 tokens after a 32-token prompt:
  (a) `dk.generate` on decodekit's reference GPT holding the weights (`load_gpt2`; GPT-2 sizes only),
  (b) `dk.generate` on the transformers model through `decodekit_hf.model.HFModel` (`--cache`: its cache),
  (c) the transformers model's own `generate()`.
Size `qwen2` is a grouped-query Qwen2 (6 layers, hidden 384, 6 heads / 2 kv-heads, vocabulary 32,000), (b) and (c).
Each is warmed up once, then the repeats are interleaved (a, b, c, then b, c, a, ...) so that load
on a shared machine hits all three alike; the figure is the median. Ratios are to (c).

    .venv/bin/python benchmarks/bench_hf.py            # full run, writes docs/img/hf_speed.png
    .venv/bin/python benchmarks/bench_hf.py --quick    # smoke run: small model, one repeat
    .venv/bin/python benchmarks/bench_hf.py --profile small:8:full   # cProfile one case, each way
    .venv/bin/python benchmarks/bench_hf.py --sizes qwen2 --chains greedy --cache gqa --plot ''   # Qwen2, no plot
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from decodekit_gpt.gpt2_weights import load_gpt2
from decodekit_hf.model import HFModel
from transformers import GenerationConfig, GPT2Config, GPT2LMHeadModel, Qwen2Config, Qwen2ForCausalLM

import decodekit as dk

PROMPT, NEW, VOCAB = 32, 128, 50257
SIZES: dict[str, dict[str, Any]] = {
    "small": dict(n_layer=2, n_embd=128, n_head=4),
    "gpt2": dict(n_layer=12, n_embd=768, n_head=12),
    "qwen2": dict(
        num_hidden_layers=6,
        hidden_size=384,
        intermediate_size=1024,
        num_attention_heads=6,
        num_key_value_heads=2,
        vocab_size=32000,
        max_position_embeddings=512,
    ),
}
CHAINS: dict[str, tuple[str, dict[str, Any]]] = {
    "greedy": ("greedy", dict(do_sample=False)),
    "full": (
        "repetition_penalty(1.1) | temperature(0.8) | top_k(50) | top_p(0.9) | sample",
        dict(do_sample=True, repetition_penalty=1.1, temperature=0.8, top_k=50, top_p=0.9),
    ),
}
WAYS = ("dk_gpt", "dk_hf", "hf")
ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Result:
    size: str
    batch: int
    chain: str
    repeats: int
    seconds: dict[str, list[float]]  # wall-clock time of each timed run, per way

    @property
    def tokens_per_s(self) -> dict[str, float]:
        """Median tokens per second, per way."""
        return {way: self.batch * NEW / statistics.median(t) for way, t in self.seconds.items()}

    def ratio(self, way: str) -> float:
        return self.tokens_per_s[way] / self.tokens_per_s["hf"]


def runners(hf_model: Any, batch: int, chain_name: str, cache: str = "dense") -> dict[str, Callable[[], None]]:
    """One zero-argument call per way, each generating NEW tokens for `batch` rows (no (a) but for GPT-2)."""
    chain, hf_options = CHAINS[chain_name]
    wrapped = HFModel(hf_model)
    vocab = int(hf_model.config.vocab_size)
    ids = torch.randint(0, vocab, (batch, PROMPT), generator=torch.Generator().manual_seed(batch))
    config = GenerationConfig(  # type: ignore[no-untyped-call]
        max_new_tokens=NEW, min_length=0, eos_token_id=None, pad_token_id=0, bos_token_id=None, **hf_options
    )

    def dk_hf() -> None:
        dk.generate(wrapped, ids, chain=chain, max_new_tokens=NEW, seed=0, cache=cache)

    def hf() -> None:
        torch.manual_seed(0)
        out = hf_model.generate(ids, attention_mask=torch.ones_like(ids), generation_config=config)
        assert out.shape == (batch, PROMPT + NEW)

    if not isinstance(hf_model, GPT2LMHeadModel):
        return {"dk_hf": dk_hf, "hf": hf}
    gpt = load_gpt2(hf_model)

    def dk_gpt() -> None:
        dk.generate(gpt, ids, chain=chain, max_new_tokens=NEW, seed=0)

    return {"dk_gpt": dk_gpt, "dk_hf": dk_hf, "hf": hf}


def measure(hf_model: Any, size: str, batch: int, chain_name: str, repeats: int, cache: str = "dense") -> Result:
    calls = runners(hf_model, batch, chain_name, cache)
    for call in calls.values():
        call()  # warm-up
    ways = [way for way in WAYS if way in calls]
    times: dict[str, list[float]] = {way: [] for way in ways}
    for r in range(repeats):
        order = ways[r % len(ways) :] + ways[: r % len(ways)]  # rotate, so no way always runs first
        for way in order:
            start = time.perf_counter()
            calls[way]()
            times[way].append(time.perf_counter() - start)
    return Result(size, batch, chain_name, repeats, times)


def make_model(size: str) -> Any:
    torch.manual_seed(0)
    if size == "qwen2":
        return Qwen2ForCausalLM(Qwen2Config(**SIZES[size])).eval()  # type: ignore[no-untyped-call]
    return GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, **SIZES[size])).eval()  # type: ignore[no-untyped-call]


def _cell(r: Result, way: str, ratio: bool = False) -> str:
    """A table cell: `way`'s tokens/s, or its ratio to (c); "-" where the size has no such way."""
    if way not in r.seconds:
        return "-"
    return f"{r.ratio(way):.2f}x" if ratio else f"{r.tokens_per_s[way]:.0f}"


def table(results: list[Result]) -> str:
    lines = [
        "| model | batch | chain | (a) dk + reference GPT | (b) dk + HFModel | (c) HF generate | (a)/(c) | (b)/(c) |",
        "|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        lines.append(
            f"| {r.size} | {r.batch} | {r.chain} | {_cell(r, 'dk_gpt')} | {_cell(r, 'dk_hf')} | {_cell(r, 'hf')} "
            f"| {_cell(r, 'dk_gpt', True)} | {_cell(r, 'dk_hf', True)} |"
        )
    return "\n".join(lines)


def plot(results: list[Result], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{r.size}\nB={r.batch}\n{r.chain}" for r in results]
    x = range(len(results))
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(results)), 4.2))
    width = 0.38
    for i, (way, name) in enumerate((("dk_gpt", "(a) dk + reference GPT"), ("dk_hf", "(b) dk + HFModel"))):
        ratios = [r.ratio(way) if way in r.seconds else 0.0 for r in results]
        ax.bar([j + (i - 0.5) * width for j in x], ratios, width, label=name)
    ax.axhline(1.0, color="black", linewidth=1, label="(c) HF generate = 1")
    ax.axhline(1.3, color="grey", linewidth=1, linestyle="--", label="1.3x target (small, full chain)")
    ax.set_xticks(list(x), labels, fontsize=8)
    ax.set_ylabel("tokens/s relative to HF generate")
    ax.set_title("decodekit vs transformers generate(): GPT-2 weights, CPU, 2 threads, 32 + 128 tokens")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


def profile(hf_model: Any, batch: int, chain_name: str, top: int = 18) -> None:
    """cProfile one run of each way (after a warm-up), sorted by own time."""
    for way, call in runners(hf_model, batch, chain_name).items():
        call()
        prof = cProfile.Profile()
        prof.enable()
        call()
        prof.disable()
        print(f"\n=== {way}: batch {batch}, {chain_name} ===")
        pstats.Stats(prof).sort_stats("tottime").print_stats(top)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smoke run: small model only, one repeat")
    parser.add_argument("--repeats", type=int, default=5, help="timed repeats per case, small model (default 5)")
    parser.add_argument("--gpt2-repeats", type=int, default=3, help="timed repeats per case, the larger models")
    parser.add_argument("--sizes", nargs="+", default=["small", "gpt2"], choices=list(SIZES))
    parser.add_argument("--chains", nargs="+", default=list(CHAINS), choices=list(CHAINS))
    parser.add_argument("--cache", default="dense", help="(b)'s cache (default dense)")
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    parser.add_argument("--plot", default=str(ROOT / "docs" / "img" / "hf_speed.png"), help="'': no plot")
    parser.add_argument("--profile", metavar="SIZE:BATCH:CHAIN", help="profile one case instead of timing")
    args = parser.parse_args()
    torch.set_num_threads(2)

    if args.profile:
        size, batch, chain_name = args.profile.split(":")
        profile(make_model(size), int(batch), chain_name)
        return
    sizes = ["small"] if args.quick else args.sizes
    results = []
    for size in sizes:
        model = make_model(size)
        repeats = 1 if args.quick else (args.repeats if size == "small" else args.gpt2_repeats)
        for batch in (1, 8):
            for chain_name in args.chains:
                results.append(measure(model, size, batch, chain_name, repeats, args.cache))
                print(table(results[-1:]).splitlines()[-1], flush=True)
    print()
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps([asdict(r) | {"tokens_per_s": r.tokens_per_s} for r in results], indent=2))
    if not args.quick and args.plot:
        plot(results, Path(args.plot))
        print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
