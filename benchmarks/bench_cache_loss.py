"""Whole-Hamlet loss through each cache, streamed in one pass, against keeping everything the model can see.

The text is teacher-forced through one cache in blocks of `--chunk` tokens (`decodekit_cache_window.stream_loss`),
every character predicted from what the cache still holds. Against:

- keep-all: `window(size=context, sinks=0)`, every character sees the whole context before it (the most any
  cache can give this model: it was trained on that context);
- full-context chunks: the text cut into non-overlapping contexts (`evaluate.py`'s figure).

Each method keeps 25%, 50% and 75% of the context (`--kept`), in float and over `store="int8"`:
`window(size=K-4, sinks=4)` (StreamingLLM), `h2o(budget=K, recent=K/2)` (H2O's even split), `tova(budget=K)`,
`snapkv(budget=K, window=8)` (every block of the stream scored by its last 8 queries), `knorm(budget=K)`; and
`window(size="auto")` with the model's D_f (calibrated here on Hamlet when the model ships none). A scored
cache's block also sees its own earlier tokens: on average K + (chunk - 1) / 2 entries per query.

    python benchmarks/bench_cache_loss.py [--model tiny-shakespeare-llama] [--chars N] [--chunk 16] \\
        [--plot docs/img/cache_loss.png] [--json benchmarks/results/cache_loss_llama.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from decodekit_cache_window.calibration import calibrate
from decodekit_cache_window.stream_loss import stream_loss
from decodekit_shakespeare.texts import hamlet

import decodekit as dk

KEPT = (0.25, 0.5, 0.75)
METHODS = ("window", "h2o", "tova", "snapkv", "knorm")


def cache_string(method: str, kept: int, store: str) -> str:
    """The cache keeping `kept` entries per layer (window: sinks + size) with `method`."""
    args = {
        "window": f"size={kept - 4}, sinks=4",
        "h2o": f"budget={kept}, recent={kept // 2}",
        "snapkv": f"budget={kept}, window=8",
    }.get(method, f"budget={kept}")
    return f"{method}({args}, store={store!r})"


@torch.no_grad()
def chunked_loss(model: Any, ids: list[int]) -> float:
    """Loss in non-overlapping contexts of the model's length (no cache: one forward each)."""
    data = torch.tensor(ids)
    T, n = model.spec.max_positions, data.numel() - 1
    total = 0.0
    for start in range(0, n, T):
        end = min(start + T, n)
        logits = model(data[None, start:end], torch.arange(end - start)[None], None)
        total += F.cross_entropy(logits[0].float(), data[start + 1 : end + 1], reduction="sum").item()
    return total / n


def with_windows(model: Any, text: str) -> tuple[int, ...]:
    """The model's D_f per layer: its own calibration, or one measured here on `text`."""
    spec = model.spec
    if spec.attention_windows is None and spec.calibration is None:
        windows = calibrate(model, model.tokenizer.encode(text), text="hamlet.txt").attention_windows
        model.spec = dataclasses.replace(spec, attention_windows=windows)
    cache = dk.create_cache('window(size="auto")', dk.CacheSpec.for_model(model.spec, batch_size=1, capacity=1))
    return tuple(cache.sizes)  # type: ignore[attr-defined]


def nbytes(model: Any, cache: str) -> int:
    return int(dk.create_cache(cache, dk.CacheSpec.for_model(model.spec, batch_size=1, capacity=1)).nbytes)  # type: ignore[attr-defined]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="tiny-shakespeare-llama")
    p.add_argument("--chars", type=int, default=None, help="score only the first N characters")
    p.add_argument("--chunk", type=int, default=16, help="tokens per forward of the stream")
    p.add_argument("--methods", nargs="+", default=list(METHODS))
    p.add_argument("--kept", nargs="+", type=float, default=list(KEPT))
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--plot", type=Path, default=None)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    model = dk.load_model(args.model)
    text = hamlet().read_text(encoding="utf-8")
    windows = with_windows(model, text)
    ids = model.tokenizer.encode(text[: args.chars])
    M = model.spec.max_positions
    result: dict[str, Any] = {"model": args.model, "chars": len(ids), "chunk": args.chunk, "windows": windows}
    result["text"] = "whole Hamlet" if args.chars is None else "Hamlet's first"
    keep_all = stream_loss(model, ids, f"window(size={M}, sinks=0)", chunk=args.chunk)
    result["keep_all"] = keep_all
    result["full_context_chunks"] = chunked_loss(model, ids)
    print(f"keep-all (window of {M}): {keep_all:.4f}; full-context chunks: {result['full_context_chunks']:.4f}")
    runs = [(m, f, s) for m in args.methods for f in args.kept for s in ("gqa", "int8")]
    runs += [("auto", sum(windows) / len(windows) / M, s) for s in ("gqa", "int8")]
    result["runs"] = []
    for method, fraction, store in runs:
        cache = (
            f'window(size="auto", store={store!r})'
            if method == "auto"
            else cache_string(method, int(fraction * M), store)
        )
        start = time.perf_counter()
        loss = stream_loss(model, ids, cache, chunk=args.chunk)
        run = {
            "method": method,
            "kept": fraction,
            "store": store,
            "cache": cache,
            "loss": loss,
            "vs_keep_all": loss / keep_all - 1,
            "nbytes": nbytes(model, cache),
            "seconds": time.perf_counter() - start,
        }
        result["runs"].append(run)
        print(
            f"{cache:55} {loss:.4f} ({100 * run['vs_keep_all']:+.2f}% vs keep-all) {run['nbytes']:>9,} B "
            f"{run['seconds']:.0f} s",
            flush=True,
        )
        if args.json is not None:
            args.json.write_text(json.dumps(result, indent=1))
    if args.plot is not None:
        plot(result, args.plot)


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8.5, 4.5))
    for i, method in enumerate(m for m in METHODS if any(r["method"] == m for r in result["runs"])):
        for store, style in (("gqa", "o-"), ("int8", "x--")):
            runs = sorted(
                (r for r in result["runs"] if r["method"] == method and r["store"] == store), key=lambda r: r["kept"]
            )
            label = f"{method}" + (" (int8)" if store == "int8" else "")
            ax.plot([100 * r["kept"] for r in runs], [r["loss"] for r in runs], style, color=f"C{i}", label=label, ms=5)
    for r in (r for r in result["runs"] if r["method"] == "auto"):
        marker = "*" if r["store"] == "gqa" else "P"
        ax.plot([100 * r["kept"]], [r["loss"]], marker, color="k", ms=11, label=f'window(size="auto"), {r["store"]}')
    ax.axhline(result["keep_all"], color="grey", ls=":", label="keep-all (the whole context)")
    ax.set_xlabel("entries kept per layer, % of the model's context")
    ax.set_ylabel(f"nats/char, {result.get('text', 'whole Hamlet')} {result['chars']:,} chars")
    ax.set_title(f"{result['model']}: Hamlet streamed through each cache (blocks of {result['chunk']})", fontsize=9)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))  # outside: the lines fill the axes
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
