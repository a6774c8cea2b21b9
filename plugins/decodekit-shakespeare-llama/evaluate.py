"""Loss (nats/char) of a `tiny-shakespeare-llama` folder on the full Hamlet file (held out of training).

    python plugins/decodekit-shakespeare-llama/evaluate.py [FOLDER] [--stride 128] [--val FILE]

Windows of the model's context (`max_position_embeddings`) end `--stride` characters apart; every
character but the first is scored once, those past the first window with at least
`context - stride` characters of left context (`decodekit_shakespeare_llama.model.loss_per_char`).
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import torch
from decodekit_shakespeare_llama import model_dir
from decodekit_shakespeare_llama.model import loss_per_char
from transformers import AutoModelForCausalLM, AutoTokenizer


def shipped_hamlet() -> Path | None:
    """Hamlet as decodekit-shakespeare ships it, or None where that plugin is not installed."""
    try:
        from decodekit_shakespeare.texts import hamlet
    except ImportError:
        return None
    return hamlet()


def main(argv: list[str] | None = None) -> float:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "folder", nargs="?", type=Path, default=model_dir(), help="save_pretrained folder (default: shipped)"
    )
    val = shipped_hamlet()
    p.add_argument("--val", type=Path, default=val, required=val is None, help="text to score (default: Hamlet)")
    p.add_argument("--stride", type=int, default=128, help="characters between window ends (default 128)")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    model = AutoModelForCausalLM.from_pretrained(str(args.folder), local_files_only=True)  # eval mode
    tokenizer = AutoTokenizer.from_pretrained(str(args.folder), local_files_only=True)
    text = args.val.read_text(encoding="utf-8")
    block = int(model.config.max_position_embeddings)
    t0 = time.perf_counter()
    loss = loss_per_char(model, tokenizer.encode(text), block, args.stride)
    print(
        f"{args.val.name}: {len(text):,} chars, windows of {block} every {args.stride}: "
        f"{loss:.4f} nats/char ({loss / math.log(2):.4f} bits/char, perplexity {math.exp(loss):.3f}) "
        f"in {time.perf_counter() - t0:.1f} s"
    )
    return loss


if __name__ == "__main__":
    main()
