"""Train the byte-level BPE of the grammar tests and benchmark: 50,000 tokens on the Shakespeare text.

    python plugins/decodekit-grammar/tests/data/train_bpe50k.py /work/shared/data/shakespeare-train.txt

writes `bpe50k.json.gz` beside this script: GPT-2's byte-level scheme (every byte in the alphabet, a
byte-level decoder, `<|endoftext|>` as id 0), without GPT-2's split into words, so that merges may
cross spaces and the corpus yields 50,000 tokens (split into words it runs out at 46,896). Training is
deterministic: run again, the file is the same byte for byte (`--check` says so without writing).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import os
from pathlib import Path

VOCAB_SIZE = 50_000
OUT = Path(__file__).with_name("bpe50k.json.gz")


def train(corpus: Path) -> str:
    """The trained tokenizer as `tokenizer.json` text."""
    os.environ.setdefault("RAYON_NUM_THREADS", "1")  # one thread: kind to a shared machine, same merges
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train([str(corpus)], trainer)
    return str(tokenizer.to_str())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", type=Path)
    parser.add_argument("--check", action="store_true", help="compare with the shipped file instead of writing")
    args = parser.parse_args()
    text = train(args.corpus)
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    if args.check:
        same = OUT.exists() and gzip.decompress(OUT.read_bytes()).decode() == text
        print(f"{'same as' if same else 'DIFFERENT from'} {OUT.name} (sha256 {digest})")
        raise SystemExit(0 if same else 1)
    OUT.write_bytes(gzip.compress(text.encode(), compresslevel=9, mtime=0))
    print(f"wrote {OUT} ({len(text):,} bytes before compression, sha256 {digest})")


if __name__ == "__main__":
    main()
