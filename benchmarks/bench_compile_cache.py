"""`compile=True` against eager over one cache: the first compiled pass, then both in alternation.

Greedy decodes of `--prompts` prompts (`--prompt` tokens of Hamlet each, or token ids for a random-weight model)
and `--new` tokens, one at a time; each round reports the median seconds of a decode, eager and compiled, and
whether the tokens are the same. The model is a registered name (`tiny-shakespeare-llama`) or `gpt2-shape`:
GPT-2 small's shape with random weights (12 layers, 768 wide, vocabulary 50,257).

    python benchmarks/bench_compile_cache.py --model tiny-shakespeare-llama --cache "streaming(budget=48)"
    python benchmarks/bench_compile_cache.py --model gpt2-shape --cache "streaming(budget=64)" --prompts 3 --new 32
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import decodekit as dk
from decodekit.model import Model


def load(name: str) -> tuple[Model, list[list[int]]]:
    if name == "gpt2-shape":
        from decodekit_gpt.gpt import GPT, GPTConfig

        torch.manual_seed(0)
        config = GPTConfig(vocab_size=50257, block_size=1024, n_layer=12, n_head=12, n_kv_head=12, n_embd=768)
        return GPT(config).eval(), []
    from decodekit_shakespeare.texts import hamlet

    model = dk.load_model(name)
    assert model.tokenizer is not None
    return model, [model.tokenizer.encode(hamlet().read_text(encoding="utf-8"))]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="tiny-shakespeare-llama")
    p.add_argument("--cache", default="streaming(budget=48)")
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--prompt", type=int, default=100)
    p.add_argument("--new", type=int, default=64)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    model, texts = load(args.model)
    if texts:
        ids = texts[0]
        prompts = [ids[s : s + args.prompt] for s in range(1000, 1000 + 1000 * args.prompts, 1000)]
    else:
        prompts = [[(i * 7 + j) % 50000 for j in range(args.prompt)] for i in range(args.prompts)]

    def run(compile: bool) -> tuple[float, list[list[list[int]]]]:
        seconds, tokens = [], []
        for prompt in prompts:
            start = time.perf_counter()
            out = dk.generate(
                model, [prompt], chain="greedy", cache=args.cache, max_new_tokens=args.new, compile=compile
            )
            seconds.append(time.perf_counter() - start)
            tokens.append(out.tokens)
        return statistics.median(seconds), tokens

    start = time.perf_counter()
    run(True)
    print(f"{args.model}, cache={args.cache}: first compiled pass {time.perf_counter() - start:.1f} s", flush=True)
    for r in range(args.rounds):
        (eager, want), (compiled, got) = run(False), run(True)
        print(f"round {r}: eager {eager * 1000:.0f} ms, compiled {compiled * 1000:.0f} ms, same tokens {got == want}")


if __name__ == "__main__":
    main()
