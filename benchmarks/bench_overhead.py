"""What a short request costs around its forwards: `dk.generate` and `dk.stream` of one prompt and 0, 1 or 8 new
tokens against the bare forwards they need, on the same model in the same process.

Models: `tiny-shakespeare` (GPT), `tiny-shakespeare-llama`, and a random transformers Llama through `HFModel`
(built from a config as docs/hf.md shows; skipped without transformers). One prompt of 16 tokens (`--prompt`, cut to
the model's context less the new tokens; `--batch` prompts of it, drawn at random). The bare loop, for n new tokens: a
prefill forward (the last column only, as decodekit asks) against a dense cache, then n - 1 decode forwards, argmax
each; for 0 (scoring: `max_new_tokens=0, prompt_logprobs=0`) one forward over the whole batch, its log-softmax and
each next token's logprob gathered, as an evaluation harness writes it by hand (`--new 0`: scoring alone).
decodekit runs with the default chain (None: `sample`) and with a 4-stage chain string, given as a string on every
call, as a service's request carries it.

Each round calls every case `--calls` times back to back, each (model, n)'s bare loop among them, the order
rotating round by round; a call is timed in CPU time of this process (steadier than wall time on a shared machine).
Reported per case: the median over rounds of each round's median call (ms), of the overhead (the call less the bare
loop's, ms) and of each round's ratio call / bare loop; and the fastest call of all rounds and the overhead between
fastest calls (a quiet moment's figure: on a loaded machine the steadier). `--threads 0` (the default) leaves
torch's thread count, so decodekit picks as it does for a caller who chose none (one thread for a small CPU model),
and the bare loop runs on the count it picked.

`--counts`: instead of timing, the Python-level calls of one warm call of each case (a profiler's "call" and
"c_call" events), which no load on the machine disturbs.

    python benchmarks/bench_overhead.py [--rounds 9] [--calls 20] [--threads 0] [--models tiny-shakespeare,...]
    python benchmarks/bench_overhead.py --new 0 --prompt 512 --batch 8 --models hf-llama --rounds 3 --calls 2
    python benchmarks/bench_overhead.py --counts
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
from bench_chain import call_times

import decodekit as dk
from decodekit.threads import decode_threads, threads

CHAIN = "repetition_penalty(1.1) | temperature(0.8) | top_k(50) | top_p(0.9)"
CHAINS = {"default chain": None, "4-stage chain": CHAIN}
NEW_TOKENS = (0, 1, 8)
PROMPT = 16
MODELS = ("tiny-shakespeare", "tiny-shakespeare-llama", "hf-llama")
BASELINES = {"bare": "bare forwards", "forward": "the forward alone"}  # label -> as the table names it


def hf_llama() -> Any:
    """A random Llama (vocabulary 32,000, 4 layers of 256, 8 heads over 4 kv-heads) as `HFModel` wraps it."""
    from decodekit_hf.model import HFModel
    from transformers import AutoModelForCausalLM, LlamaConfig

    config = LlamaConfig(
        vocab_size=32000,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=4,
        max_position_embeddings=512,
    )
    torch.manual_seed(0)
    return HFModel(AutoModelForCausalLM.from_config(config))


def load(name: str) -> Any:
    return hf_llama() if name == "hf-llama" else dk.load_model(name)


def bare(model: Any, prompts: list[list[int]], new: int, *, scored: bool = True) -> Callable[[], object]:
    """The forwards a request of `new` tokens needs, and nothing else (see the module docstring); `scored=False`:
    for 0, the forward alone (what scoring costs beyond it)."""
    ids = torch.tensor(prompts)
    T = ids.shape[1]
    pos = torch.arange(T + max(new, 1))[None]
    options = {"last_only": True} if getattr(model, "supports_last_only", False) else {}

    def score() -> object:
        logits = model(ids, pos[:, :T].expand(len(ids), T), None)
        if not scored:
            return logits
        return logits[:, :-1].log_softmax(-1).gather(2, ids[:, 1:, None]).tolist()

    def decode() -> object:
        spec = dk.CacheSpec.for_model(model.spec, batch_size=len(ids), capacity=T + new)
        cache = dk.create_cache("dense", spec)
        tok = model(ids, pos[:, :T].expand(len(ids), T), cache, **options)[:, -1].argmax(-1, keepdim=True)
        out = [tok]
        for t in range(T, T + new - 1):
            tok = model(tok, pos[:, t : t + 1].expand(len(ids), 1), cache)[:, -1].argmax(-1, keepdim=True)
            out.append(tok)
        return torch.cat(out, 1).tolist()

    n_threads = decode_threads(model)

    def run() -> object:
        with torch.inference_mode(), threads(n_threads):
            return score() if new == 0 else decode()

    return run


def request(model: Any, prompts: list[list[int]], new: int, chain: str | None, how: str) -> Callable[[], object]:
    options: dict[str, Any] = {"chain": chain, "max_new_tokens": new, "seed": 0}
    if new == 0:
        options["prompt_logprobs"] = 0
    if how == "generate":
        return lambda: dk.generate(model, prompts, **options)
    return lambda: list(dk.stream(model, prompts, **options))


def cases(model: Any, prompts: list[list[int]], news: Sequence[int]) -> dict[tuple[int, str], Callable[[], object]]:
    """(new tokens, label) -> one call; label "bare" is the baseline of its n, "forward" scoring's forward alone."""
    out: dict[tuple[int, str], Callable[[], object]] = {}
    for new in news:
        out[new, "bare"] = bare(model, prompts, new)
        if new == 0:
            out[new, "forward"] = bare(model, prompts, new, scored=False)
        for how in ("generate", "stream"):
            for chain_name, chain in CHAINS.items():
                out[new, f"dk.{how}, {chain_name}"] = request(model, prompts, new, chain, how)
    return out


def draw_prompts(model: Any, length: int, batch: int, room: int) -> list[list[int]]:
    """`batch` prompts of `length` tokens (at most the model's context less `room`), drawn with seed 0."""
    g = torch.Generator().manual_seed(0)
    length = min(length, model.spec.max_positions - room)
    return torch.randint(0, model.spec.vocab_size, (batch, length), generator=g).tolist()


def bench_model(name: str, rounds: int, calls: int, length: int, batch: int, news: Sequence[int]) -> None:
    model = load(name)
    prompts = draw_prompts(model, length, batch, max(news))
    table = cases(model, prompts, news)
    for fn in table.values():  # first calls: lazy imports, allocator, caches
        fn()
        fn()
    keys = list(table)
    medians: dict[tuple[int, str], list[float]] = {k: [] for k in keys}
    best = dict.fromkeys(keys, float("inf"))  # a quiet moment's call, in any round
    for r in range(rounds):
        for key in keys[r % len(keys) :] + keys[: r % len(keys)]:
            samples = call_times(table[key], calls, clock=time.process_time)
            medians[key].append(statistics.median(samples))
            best[key] = min(best[key], *samples)
    params = sum(p.numel() for p in model.parameters())
    shape = f"prompt {len(prompts[0])} tokens" + (f" x {len(prompts)}" if len(prompts) > 1 else "")
    print(f"\n{name} ({params / 1e6:.2f}M parameters, vocabulary {model.spec.vocab_size:,}), {shape}:\n")
    print("| new tokens | call | ms | overhead ms | ratio to bare | middle half | fastest ms | fastest overhead ms |")
    print("|---:|---|---:|---:|---:|---|---:|---:|")
    for new, label in keys:
        base = medians[new, "bare"]
        ms, fastest = statistics.median(medians[new, label]) * 1e3, best[new, label] * 1e3
        if label in BASELINES:
            print(f"| {new} | {BASELINES[label]} | {ms:.3f} | | | | {fastest:.3f} | |")
            continue
        ratios = [a / b for a, b in zip(medians[new, label], base)]
        extra = statistics.median(a - b for a, b in zip(medians[new, label], base)) * 1e3
        q1, _, q3 = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else (ratios[0],) * 3
        spread = f"{statistics.median(ratios):.2f}x | {q1:.2f}x – {q3:.2f}x"
        quiet = f"{fastest:.3f} | {fastest - best[new, 'bare'] * 1e3:+.3f}"
        print(f"| {new} | {label} | {ms:.3f} | {extra:+.3f} | {spread} | {quiet} |")


def python_calls(fn: Callable[[], object]) -> int:
    """The Python-level calls (functions, and C functions called from Python) one call of `fn` makes."""
    count = [0]

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event in ("call", "c_call"):
            count[0] += 1

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return count[0]


def count_model(name: str, length: int, batch: int, news: Sequence[int]) -> None:
    model = load(name)
    table = cases(model, draw_prompts(model, length, batch, max(news)), news)
    print(f"\n{name}: Python calls per request (a warm call; the bare loop's, and the request's beyond them)\n")
    print("| new tokens | call | calls | beyond the bare loop |")
    print("|---:|---|---:|---:|")
    for (new, label), fn in table.items():
        fn()
        n = python_calls(fn)
        base = python_calls(table[new, "bare"])
        print(f"| {new} | {label} | {n:,} | {'' if label in BASELINES else f'{n - base:+,}'} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: leave torch's, decodekit picks)")
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {', '.join(MODELS)}")
    parser.add_argument("--counts", action="store_true", help="count Python calls per request instead of timing")
    parser.add_argument("--prompt", type=int, default=PROMPT, help="tokens per prompt (cut to the model's context)")
    parser.add_argument("--batch", type=int, default=1, help="prompts per request")
    parser.add_argument("--new", default=",".join(map(str, NEW_TOKENS)), help="comma-separated new-token counts")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    news = [int(n) for n in args.new.split(",")]
    for name in args.models.split(","):
        if args.counts:
            count_model(name.strip(), args.prompt, args.batch, news)
        else:
            bench_model(name.strip(), args.rounds, args.calls, args.prompt, args.batch, news)


if __name__ == "__main__":
    main()
