"""Text written by `tiny-shakespeare` itself, for distilling a draft on what the target says (DistillSpec,
Zhou et al. 2023): continuations of random training-text prompts, half greedy, half sampled.

    python plugins/decodekit-shakespeare/teacher_corpus.py --out runs/teacher-corpus.txt
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch

import decodekit as dk

DATA_DIR = os.environ.get("DECODEKIT_SHAKESPEARE_DATA", "")  # the training text is not shipped
CHAINS = ("greedy", "temperature(0.8) | top_p(0.95)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="tiny-shakespeare")
    default_train = Path(DATA_DIR) / "shakespeare-train.txt" if DATA_DIR else None
    p.add_argument("--train-file", type=Path, default=default_train, required=default_train is None)
    p.add_argument("--batches", type=int, default=30, help="batches per chain")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--prompt-chars", type=int, default=16)
    p.add_argument("--new-tokens", type=int, default=240)
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    model = dk.load_model(args.model)
    text = args.train_file.read_text(encoding="utf-8")
    gen = torch.Generator().manual_seed(args.seed)
    pieces = []
    for chain in CHAINS:
        for i in range(args.batches):
            starts = torch.randint(0, len(text) - args.prompt_chars, (args.batch_size,), generator=gen).tolist()
            prompts = [text[s : s + args.prompt_chars] for s in starts]
            out = dk.generate(model, prompts, chain=chain, max_new_tokens=args.new_tokens, seed=args.seed + i)
            assert out.text is not None
            pieces += [prompt + new for prompt, new in zip(prompts, out.text)]
        print(f"{chain}: {args.batches * args.batch_size} continuations", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n\n".join(pieces), encoding="utf-8")
    print(f"{args.out}: {sum(map(len, pieces)):,} characters")


if __name__ == "__main__":
    main()
