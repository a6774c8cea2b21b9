"""Train the byte-level BPEs of the grammar tests and benchmark on the Shakespeare text.

    python plugins/decodekit-grammar/tests/data/train_bpe.py path/to/shakespeare-train.txt

writes, beside this script, two tokenizers in GPT-2's byte-level scheme (every byte in the alphabet, a
byte-level decoder, `<|endoftext|>` as id 0), asked for 50,000 tokens each:

- `bpe-words.json.gz`: GPT-2's split into words first, as real byte-level BPEs do. This corpus has only
  46,896 tokens' worth of merges within words, so that is its size.
- `bpe-50k.json.gz`: no split, so merges may cross spaces and punctuation ("there is ", ",\"and"): exactly
  50,000 tokens, and a harder vocabulary for a grammar (more tokens cross the grammar's lexemes).

Training is deterministic: run again, the files are the same byte for byte (`--check` says so).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import os
from pathlib import Path

VOCAB_SIZE = 50_000
HERE = Path(__file__).parent
OUTPUTS = {"bpe-words.json.gz": True, "bpe-50k.json.gz": False}  # file -> split into words first


def train(corpus: Path, split_words: bool) -> str:
    """The trained tokenizer as `tokenizer.json` text."""
    os.environ.setdefault("RAYON_NUM_THREADS", "1")  # one thread: kind to a shared machine, same merges
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=split_words)
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
    parser.add_argument("--check", action="store_true", help="compare with the shipped files instead of writing")
    args = parser.parse_args()
    different = 0
    for name, split_words in OUTPUTS.items():
        text, out = train(args.corpus, split_words), HERE / name
        digest = hashlib.sha256(text.encode()).hexdigest()[:16]
        if args.check:
            same = out.exists() and gzip.decompress(out.read_bytes()).decode() == text
            different += not same
            print(f"{'same as' if same else 'DIFFERENT from'} {name} (sha256 {digest})")
            continue
        out.write_bytes(gzip.compress(text.encode(), compresslevel=9, mtime=0))
        print(f"wrote {out} ({len(text):,} bytes before compression, sha256 {digest})")
    raise SystemExit(1 if different else 0)


if __name__ == "__main__":
    main()
