"""Validation loss (nats/char) of the shipped `tiny-shakespeare` weights on the full Hamlet file.

    PYTHONPATH=core python plugins/decodekit-shakespeare/evaluate.py [--draft] [--val FILE] [--weights DIR|FILE]

Hamlet is held out of training. The text is scored in non-overlapping windows of
`block_size` characters with the model in eval mode (see `loss_per_char`).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

import torch

try:
    from decodekit_shakespeare.model import load_tiny_shakespeare, load_tiny_shakespeare_draft, loss_per_char
    from decodekit_shakespeare.texts import hamlet
except ImportError:  # running from a checkout without the plugin installed
    sys.path.insert(0, str(Path(__file__).resolve().parent / "src"))
    from decodekit_shakespeare.model import load_tiny_shakespeare, load_tiny_shakespeare_draft, loss_per_char
    from decodekit_shakespeare.texts import hamlet

DEFAULT_VAL = hamlet()  # shipped with the model


def main(argv: list[str] | None = None) -> float:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--val", type=Path, default=DEFAULT_VAL, help="text to score (default: Hamlet)")
    p.add_argument("--weights", default=None, help="export directory or .safetensors file (default: shipped)")
    p.add_argument("--draft", action="store_true", help="score tiny-shakespeare-draft (or --weights as a draft)")
    p.add_argument("--threads", type=int, default=min(2, os.cpu_count() or 1))
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    model = (load_tiny_shakespeare_draft if args.draft else load_tiny_shakespeare)(args.weights)
    text = args.val.read_text(encoding="utf-8")
    t0 = time.perf_counter()
    loss = loss_per_char(model, model.tokenizer.encode(text))
    dt = time.perf_counter() - t0
    print(
        f"{args.val.name}: {len(text):,} chars, block_size {model.config.block_size}, "
        f"val loss {loss:.4f} nats/char ({loss / math.log(2):.4f} bits/char, perplexity {math.exp(loss):.3f}) "
        f"in {dt:.1f} s"
    )
    return loss


if __name__ == "__main__":
    main()
