"""Whole-Hamlet loss through each cache, and bytes per token of each backend side by side.

- full-context chunks: Hamlet cut into non-overlapping 256-character contexts (`evaluate.py`);
- `gqa` and `int8` in the same chunks, the text fed through the cache (int8 against float32);
- `window(size=W, sinks=4)` for W = 8 ... 252 and `window(size="auto")` (float and int8), the
  whole text teacher-forced through one cache in one pass (`decodekit_cache_window.stream_loss`);
- bytes: per token held for the caches that keep all, total for the windows (fixed), and
  the ratios int8 / gqa and window-over-int8 / window.

    python benchmarks/bench_cache_loss.py [--model tiny-shakespeare] [--chars N] [--plot docs/img/window_loss.png]
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from decodekit_cache_window.stream_loss import stream_loss

import decodekit as dk

HAMLET = Path(os.environ.get("DECODEKIT_SHAKESPEARE_DATA", "/work/shared/data")) / "shakespeare-val.txt"
SIZES = (8, 16, 32, 48, 64, 128, 192, 252)
SINKS = 4


@torch.no_grad()
def chunked_loss(model: Any, ids: list[int], cache: str) -> float:
    """Loss in non-overlapping contexts of `block_size`, each fed through a fresh `cache` (reset)."""
    data = torch.tensor(ids)
    T, n = model.spec.max_positions, data.numel() - 1
    kv = dk.create_cache(cache, dk.CacheSpec.for_model(model.spec, batch_size=1, capacity=T))
    total = 0.0
    for start in range(0, n, T):
        end = min(start + T, n)
        kv.reset()
        logits = model(data[None, start:end], torch.arange(end - start)[None], kv)
        total += F.cross_entropy(logits[0], data[start + 1 : end + 1], reduction="sum").item()
    return total / n


def bytes_table(model: Any) -> dict[str, dict[str, float]]:
    spec = dk.CacheSpec.for_model(model.spec, batch_size=1, capacity=model.spec.max_positions)
    out: dict[str, dict[str, float]] = {}
    for name in ("dense", "gqa", "int8"):
        nbytes = dk.create_cache(name, spec).nbytes
        out[name] = {"bytes_per_token": nbytes / spec.capacity, "bytes_at_context": nbytes}
    for name in ('window(size="auto")', 'window(size="auto", store="int8")'):
        cache = dk.create_cache(name, spec)
        slots = sum(cache.sinks + ring for ring in cache.rings)  # type: ignore[attr-defined]
        out[name] = {"bytes_total_fixed": cache.nbytes, "bytes_per_held_token": cache.nbytes / slots * spec.n_layers}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="tiny-shakespeare")
    p.add_argument("--chars", type=int, default=None, help="score only the first N characters")
    p.add_argument("--sweep-chars", type=int, default=None, help="score the size sweep on the first N characters")
    p.add_argument("--sweep-only", action="store_true", help="only the size sweep (and its own baseline)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--plot", type=Path, default=None)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    model = dk.load_model(args.model)
    text = HAMLET.read_text(encoding="utf-8")[: args.chars]
    ids = model.tokenizer.encode(text)
    result: dict[str, Any] = {"chars": len(ids), "windows": list(model.spec.attention_windows or ())}

    def report(name: str, loss: float) -> None:
        base = result.get("full_context_chunks", loss)
        result.setdefault("loss", {})[name] = loss
        print(f"{name:45} {loss:.4f} nats/char  ({100 * (loss / base - 1):+.2f}% vs full-context chunks)", flush=True)

    if not args.sweep_only:
        result["full_context_chunks"] = chunked_loss(model, ids, "gqa")
        report("full-context chunks (gqa)", result["full_context_chunks"])
        report("full-context chunks (int8)", chunked_loss(model, ids, "int8"))
        report('window(size="auto"), one pass', stream_loss(model, ids, 'window(size="auto")'))
        auto_int8 = stream_loss(model, ids, 'window(size="auto", store="int8")')
        report('window(size="auto", store="int8"), one pass', auto_int8)
    # The sweep, with the baseline and "auto" it is plotted against, on its own prefix of the text.
    sweep = ids[: args.sweep_chars]
    base = chunked_loss(model, sweep, "gqa")
    result["sweep"] = {
        "chars": len(sweep),
        "full_context_chunks": base,
        "auto": stream_loss(model, sweep, 'window(size="auto")'),
    }
    for size in SIZES:
        result["sweep"][size] = loss = stream_loss(model, sweep, f"window(size={size})")
        print(
            f"sweep, {len(sweep):,} chars: window(size={size}) {loss:.4f} ({100 * (loss / base - 1):+.2f}%)", flush=True
        )
    result["bytes"] = bytes_table(model)
    b = result["bytes"]
    int8_ratio = b["int8"]["bytes_per_token"] / b["gqa"]["bytes_per_token"]
    window_ratio = (
        b['window(size="auto", store="int8")']["bytes_total_fixed"] / b['window(size="auto")']["bytes_total_fixed"]
    )
    result["ratios"] = {"int8/gqa": int8_ratio, "window int8/window": window_ratio}
    print(json.dumps(result["bytes"], indent=1))
    print(f"int8 / gqa bytes: {int8_ratio:.3f}; window over int8 / window: {window_ratio:.3f} (target <= 0.35)")
    if args.plot is not None:
        plot(result, args.plot)
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1))


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sweep = result["sweep"]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.semilogx(SIZES, [sweep[s] for s in SIZES], "o-", label="window(size, sinks=4), one pass")
    ax.axhline(sweep["full_context_chunks"], color="grey", ls="--", label="full-context chunks (256)")
    auto = sweep["auto"]
    for layer, w in enumerate(result["windows"]):
        ax.axvline(w, color=f"C{layer + 1}", ls=":", lw=1, label=f"D_f layer {layer} = {w}")
    ax.plot(
        [sum(result["windows"]) / max(len(result["windows"]), 1)],
        [auto],
        "r*",
        ms=12,
        label='size="auto" (D_f per layer)',
    )
    ax.set_xlabel("window size (tokens each query sees, sinks excluded)")
    ax.set_ylabel(f"loss, nats/char (first {sweep['chars']:,} chars of Hamlet)")
    ax.set_xticks(SIZES, [str(s) for s in SIZES])
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
