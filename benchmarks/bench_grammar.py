"""What a grammar costs per token: the mask, and the whole decode step against the same chain without it.

1. Mask time per token, at vocabulary 84 (tiny-shakespeare's characters) and about 50,000 (the byte-level
   BPEs trained on the same text, `plugins/decodekit-grammar/tests/data/`: GPT-2's scheme, 46,896 tokens;
   and exactly 50,000 with merges across words), for `json()` and a nested JSON Schema: distinct documents
   (JSON texts tiny-shakespeare wrote under the schema, so valid under both) are walked token by token
   by one stage, as a decode would: at each step the stage is asked for the mask after the tokens so far
   (its parent's parse is held: one token to advance; a prefix another document shared is held whole).
   `parser` times `stage.mask` (the parse state, llguidance's mask) on half the documents, `stage` the
   whole processor call (the mask applied to the logits) on the other half. Median and p99 over every
   token; the stage's first walks include llguidance building its lexer's states.
2. The decode step: `dk.generate` with `json() | temperature(0.8) | top_p(0.95)` (and the nested schema)
   against `temperature(0.8) | top_p(0.95)`, batch 1, up to 200 tokens, timed step by step (forward
   start to forward start, as bench_generate.py's StepClock does) over `--runs` seeds, the chains
   alternating, and compared by median step over the same positions (a grammar may end a run early). At
   84: tiny-shakespeare; at about 50,000: a random TinyLM (16 dims) over each BPE, so the grammar's share
   of a step is large, with `temperature(0.8)` alone (see CHAIN_50K).

Times are this thread's CPU time (`time.thread_time`, torch on one thread): on a shared machine the
wall clock also counts the time other processes take the core, which is not the grammar's (`--clock wall`
for wall time).

    python benchmarks/bench_grammar.py [--documents 40] [--runs 20] [--clock cpu|wall]
"""

from __future__ import annotations

import argparse
import gzip
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import decodekit as dk
from decodekit.testing.tiny_lm import TinyLM

DATA = Path(__file__).resolve().parents[1] / "plugins" / "decodekit-grammar" / "tests" / "data"
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "who": {"type": "string", "pattern": "^[A-Z][a-z]{1,7}$"},
        "act": {"type": "integer", "minimum": 1, "maximum": 5},
        "mood": {"enum": ["merry", "sad", "wroth"]},
        "says": {
            "type": "array",
            "maxItems": 2,
            "items": {"type": "string", "pattern": "^[a-z]{1,8}( [a-z]{1,8}){0,2}$"},
        },
        "at": {
            "type": "object",
            "properties": {"town": {"enum": ["Verona", "Mantua"]}, "hour": {"type": "integer", "maximum": 24}},
            "required": ["town", "hour"],
            "additionalProperties": False,
        },
    },
    "required": ["who", "act", "mood", "says", "at"],
    "additionalProperties": False,
}
CHAIN = "temperature(0.8) | top_p(0.95)"  # the command line's default
# A random model's distribution is nearly flat: a truncation's candidate set would not hold it (top_p keeps
# most of 50,000 tokens; top_k(50) after a grammar that leaves fewer finds ties at -inf), and its step is
# redone densely: the comparison would time those redos, not the grammar.
CHAIN_50K = "temperature(0.8)"
CLOCK = time.thread_time


def hf_bpe(name: str) -> Any:
    from decodekit_hf.tokenizer import HFTokenizer
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    text = gzip.decompress((DATA / name).read_bytes()).decode()
    fast = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(text), eos_token="<|endoftext|>")  # type: ignore[no-untyped-call]
    return HFTokenizer(fast)


def documents(model: Any, n: int) -> list[str]:
    """`n` JSON texts tiny-shakespeare writes under SCHEMA (sampled, seed 0)."""
    chain = dk.Chain([dk.create("json_schema", schema=SCHEMA), dk.create("temperature", value=0.9)])
    out = dk.generate(model, ["ROMEO:\n"] * n, chain=chain, max_new_tokens=200, seed=0)  # longer than any
    assert out.text is not None
    return [text for text, end in zip(out.text, out.stopped_by) if end == "json_schema"]


def pct(times: list[float], q: float) -> float:
    ordered = sorted(times)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def mask_times(stage: Any, tokenizer: Any, vocab_size: int, docs: list[str]) -> dict[str, list[float]]:
    """Seconds per token of `stage.mask` (on the even documents) and of the whole call (the odd ones), walking
    each document token by token with one stage, as a decode would: each step asks for one token more."""
    out: dict[str, list[float]] = {"parser": [], "stage": []}
    stage.mask(dk.DecodeContext(tokens=torch.tensor([[0]]), tokenizer=tokenizer), vocab_size)  # compiles: not timed
    for i, doc in enumerate(docs):
        ids = tokenizer.encode(doc)
        which = "parser" if i % 2 == 0 else "stage"
        for t in range(1, len(ids)):  # the mask after ids[:t]
            ctx = dk.DecodeContext(tokens=torch.tensor([[0, *ids[:t]]]), step=t, tokenizer=tokenizer)
            logits = torch.randn(1, vocab_size)
            start = CLOCK()
            if which == "parser":
                stage.mask(ctx, vocab_size)
            else:
                stage(logits, ctx)
            out[which].append(CLOCK() - start)
    return out


class StepClock:
    """A model that notes when each forward starts: a decode step is one forward's start to the next's."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.starts: list[float] = []

    def __call__(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        self.starts.append(CLOCK())
        out: torch.Tensor = self.model(*args, **kwargs)
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)


def step_times(model: Any, chain: dk.Chain, new_tokens: int, seed: int) -> list[float]:
    clock = StepClock(model)
    dk.generate(clock, ["ROMEO:\n"], chain=chain, max_new_tokens=new_tokens, seed=seed)
    return [b - a for a, b in zip(clock.starts[1:], clock.starts[2:])]


def step_ratio(model: Any, grammar: Any, chain: str, runs: int, new_tokens: int) -> tuple[float, float, int]:
    """(median step without the grammar, with it, steps compared) over `runs` seeds, the two alternating.

    A step costs more the longer the context, and a grammar may end a run early: each run's steps are
    compared with the same steps (positions) of the plain run of that seed. The chains are built once (a
    stage compiles its grammar for a vocabulary on its first call)."""
    plain_chain, grammar_chain = dk.Chain.parse(chain), dk.Chain([grammar, *dk.Chain.parse(chain).processors])
    plain: list[float] = []
    with_grammar: list[float] = []
    for seed in range(runs):
        order = ((plain_chain, 0), (grammar_chain, 1))[:: 1 if seed % 2 else -1]
        times: dict[int, list[float]] = {i: step_times(model, built, new_tokens, seed) for built, i in order}
        n = min(len(times[0]), len(times[1]))
        plain.extend(times[0][:n])
        with_grammar.extend(times[1][:n])
    return statistics.median(plain), statistics.median(with_grammar), len(with_grammar)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--documents", type=int, default=40, help="documents walked per measure (parser, stage)")
    parser.add_argument("--runs", type=int, default=20, help="generations per chain for the step times")
    parser.add_argument("--clock", choices=["cpu", "wall"], default="cpu")
    args = parser.parse_args()
    global CLOCK
    CLOCK = time.thread_time if args.clock == "cpu" else time.perf_counter
    torch.set_num_threads(args.threads)
    shakespeare = dk.load_model("tiny-shakespeare")
    bpes = {
        "46,896 (BPE, GPT-2's split)": hf_bpe("bpe-words.json.gz"),
        "50,000 (BPE across words)": hf_bpe("bpe-50k.json.gz"),
    }
    docs = documents(shakespeare, 2 * args.documents)
    print(f"{len(docs)} documents, {statistics.mean(len(d) for d in docs):.0f} characters on average")
    vocabularies = [("84 (tiny-shakespeare)", shakespeare.tokenizer, 84)]
    vocabularies += [(label, bpe, len(bpe.hf)) for label, bpe in bpes.items()]
    stages: list[tuple[str, Callable[[], Any]]] = [
        ("json()", lambda: dk.create("json")),
        ("nested schema", lambda: dk.create("json_schema", schema=SCHEMA)),
    ]
    print("| vocabulary | stage | tokens | parser median | parser p99 | stage median | stage p99 |")
    print("|---|---|---|---|---|---|---|")
    for label, tokenizer, V in vocabularies:
        for name, make in stages:
            t = mask_times(make(), tokenizer, V, docs)
            us = {k: (statistics.median(v) * 1e6, pct(v, 0.99) * 1e6) for k, v in t.items()}
            print(
                f"| {label} | {name} | {len(t['stage'])} | {us['parser'][0]:.1f} µs | {us['parser'][1]:.1f} µs | "
                f"{us['stage'][0]:.1f} µs | {us['stage'][1]:.1f} µs |"
            )
    models: list[tuple[str, Any, str]] = [("tiny-shakespeare (84)", shakespeare, CHAIN)]
    for label, bpe in bpes.items():
        tiny = TinyLM(len(bpe.hf), dim=16, max_positions=512)
        tiny.tokenizer = bpe
        models.append((f"TinyLM, 16 dims, {label}", tiny, CHAIN_50K))
    print("\n| model | chain | grammar first | steps | step without | step with | overhead | tokens/s with / without |")
    print("|---|---|---|---|---|---|---|---|")
    for label, model, chain in models:
        for name, make in stages:
            a, b, n = step_ratio(model, make(), chain, args.runs, new_tokens=200)
            print(
                f"| {label} | `{chain}` | {name} | {n} | {a * 1e6:.0f} µs | {b * 1e6:.0f} µs | "
                f"{(b - a) * 1e6:+.0f} µs | {a / b:.2f}x |"
            )


if __name__ == "__main__":
    main()
