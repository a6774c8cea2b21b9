"""A soak: thousands of varied `dk.generate` / `dk.stream` / `dk.decode` calls in one process, as a long-lived service
makes them, watching for what grows or drifts over the calls: the process's RSS, Python objects by type, live
tensors, tracemalloc's top growth and the time a call takes; and a sample of seeded results replayed in a fresh
process (`--replay`), which must give the same tokens.

    nice .venv/bin/python benchmarks/soak.py --calls 2000 --out /tmp/soak          # the soak, then its replay
    nice .venv/bin/python benchmarks/soak.py --calls 300 --tracemalloc --out /tmp/soak-tm

Every request is a function of its index alone (`request(i)`), so the replay makes the same ones in a fresh process.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import statistics
import subprocess
import sys
import time
import tracemalloc
import warnings
import weakref
from collections import Counter
from pathlib import Path
from typing import Any

import torch

torch.set_num_threads(1)

import decodekit as dk  # noqa: E402
from decodekit.context import row_seeds  # noqa: E402

CACHES = [
    "dense", "gqa", "int8", "window(size=16)", "window(size=24, sinks=2, store='int8')", "h2o(budget=24)",
    "tova(budget=24)", "snapkv(budget=24)", "knorm(budget=24)", "streaming(budget=24)", "none",
]  # fmt: skip
CHAINS = [
    None, "greedy", "temperature(0.8)", "temperature(0.7) | top_p(0.9)", "top_k(5) | temperature(0.9)",
    "repetition_penalty(1.2) | top_k(20) | top_p(0.95)", "min_p(0.1) | temperature(1.1)", "typical(0.9)",
    "epsilon(0.001)", "eta(0.001)", "top_a(0.2)", "top_n_sigma(1.0)", "top_h(0.5)", "xtc(0.1, 0.5)",
    "dynamic_temperature(0.8, 0.5)", "mirostat(5.0)", "mirostat_v2(5.0)", "gumbel", "adaptive_p(0.5)",
    "frequency_penalty(0.5) | presence_penalty(0.5)", "no_repeat_ngram(3)", "dry(0.8) | temperature(0.9)",
    "exponential_decay(start=4, factor=1.1, stop_tokens=[0]) | temperature(0.8)", "min_new_tokens(4, stop_tokens=[0])",
    "logit_bias({1: 2.0, 5: -100}) | temperature(0.8)", "watermark | temperature(0.9)",
    "bad_words([[1, 2]]) | temperature(0.9)", "allowed_tokens([1, 2, 3, 10, 20, 30, 40, 50])",
    "sequence_bias([[[1, 2], 3.0]]) | temperature(0.8)",
    "json | temperature(0.8)", "regex(pattern='(thou|thee|my lord)(, [a-z]{2,7}){1,2}[.!?]') | temperature(0.8)",
]  # fmt: skip
SCHEMAS = [
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"enum": ["x", "y"]}}, "required": ["a", "b"]},
    {"type": "array", "items": {"type": "string", "pattern": "^[a-z]{1,4}$"}, "maxItems": 3},
    True,
]
PROMPTS = ["ROMEO:", "JULIET:\n", "KING RICHARD II:\nWhat", "First Citizen:\nBefore we proceed", "O", "NURSE:\n"]
LARK = 'start: name ": " word\nname: "ROMEO" | "JULIET"\nword: /[a-z]{1,7}/\n'


class StopByCallbackError(Exception):
    """A callback's way of stopping a decode (a client that went away, a budget spent)."""


def raising_at(step: int) -> Any:
    def stage(logits: torch.Tensor, ctx: dk.DecodeContext) -> torch.Tensor:
        if ctx.step >= step:
            raise StopByCallbackError(f"stopped at step {ctx.step}")
        return logits

    return stage


class Models:
    """The models a service holds, loaded once; the HF ones built from tiny random configs."""

    def __init__(self) -> None:
        self.shakespeare = dk.load_model("tiny-shakespeare")
        self.llama = dk.load_model("tiny-shakespeare-llama")
        self.hf_llama = hf_model("llama", 0)
        self.hf_gpt2 = hf_model("gpt2", 0)


def hf_model(kind: str, seed: int) -> Any:
    from decodekit_hf.model import HFModel
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    if kind == "gpt2":
        gpt2 = GPT2Config(n_layer=2, n_head=4, n_embd=32, vocab_size=96, n_positions=128, initializer_range=0.2)
        return HFModel(GPT2LMHeadModel(gpt2).eval())  # type: ignore[no-untyped-call]
    config = LlamaConfig(
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=32, intermediate_size=64,
        vocab_size=96, max_position_embeddings=128, initializer_range=0.2,
    )  # fmt: skip
    return HFModel(LlamaForCausalLM(config).eval())  # type: ignore[no-untyped-call]


def request(i: int) -> dict[str, Any]:
    """Request `i`: a kind of call and its arguments, from `i` alone."""
    r = random.Random(i * 7919 + 17)
    kind = r.choices(
        ["generate", "stream", "stream_abandoned", "generator_closed", "beam", "speculative", "cfg", "grammar",
         "bad_params", "raises", "hf", "compile", "llama"],
        weights=[30, 6, 4, 3, 5, 5, 4, 8, 4, 4, 10, 1, 5],
    )[0]  # fmt: skip
    n = r.choice([1, 1, 1, 2, 4])
    prompts = [r.choice(PROMPTS) for _ in range(r.choice([1, 1, 2, 3]))]
    opts: dict[str, Any] = {
        "max_new_tokens": r.choice([4, 12, 24, 40]),
        "cache": r.choice(CACHES),
        "chain": r.choice(CHAINS),
        "seed": r.randrange(2**32),
    }
    if n > 1:
        opts["seed"] = row_seeds([r.randrange(1000) for _ in prompts], len(prompts), n)
        prompts = [p for p in prompts for _ in range(n)]
    if r.random() < 0.3:
        opts["stop_strings"] = r.choice([["\n"], ["the", "\n\n"], ["e"], [":"]])
        opts["include_stop_str_in_output"] = r.random() < 0.5
    if r.random() < 0.3:
        opts["logprobs"] = r.choice([0, 1, 3])
    if r.random() < 0.2:
        opts["prompt_logprobs"] = r.choice([0, 2])
    if r.random() < 0.2:
        opts["stop_tokens"] = [r.randrange(84)]
    return {"i": i, "kind": kind, "prompts": prompts, "opts": opts, "r": r.random()}


def run(models: Models, req: dict[str, Any]) -> list[list[int]] | None:
    """Make request `req`; its tokens, or None where the call has no result to compare (abandoned, an error)."""
    kind, prompts, opts, x = req["kind"], req["prompts"], dict(req["opts"]), req["r"]
    model = models.shakespeare
    if kind == "llama":
        model, kind = models.llama, "generate"
    if kind == "generate":
        return dk.generate(model, prompts, **opts).tokens
    if kind == "stream":
        events = dk.stream(model, prompts, **opts)
        for _ in events:
            pass
        assert events.result is not None
        return events.result.tokens
    if kind == "stream_abandoned":  # a client that went away: its stream dropped half-way, never closed
        opts["max_new_tokens"] = 40
        events = dk.stream(model, prompts, **opts)
        for k, _ in enumerate(events):
            if k == 5:
                break
        if x < 0.5:
            events.close()
        return None
    if kind == "generator_closed":  # an async server wrapping the stream in a generator it closes early

        def gen() -> Any:
            yield from dk.stream(model, prompts, **(opts | {"max_new_tokens": 40}))

        g = gen()
        next(g)
        next(g)
        g.close()
        return None
    if kind == "beam":
        opts.pop("chain")
        opts.pop("logprobs", None)
        if "knorm" in opts["cache"] or "h2o" in opts["cache"] or "tova" in opts["cache"] or "snapkv" in opts["cache"]:
            opts["cache"] = "dense"
        if "streaming" in opts["cache"] or opts["cache"] == "none":
            opts["cache"] = "gqa"
        try:
            out = dk.decode(model, prompts, strategy="beam", num_beams=2 if x < 0.5 else 3, **opts)
        except dk.ParameterError:
            return None
        return out.tokens
    if kind == "speculative":
        draft = "tiny-shakespeare-draft" if x < 0.6 else "ngram"
        opts["cache"] = "dense" if x < 0.8 else "gqa"
        try:
            out = dk.decode(model, prompts, strategy="speculative", draft=draft, k=r_int(x, 2, 5), **opts)
        except dk.ParameterError:  # a selector without a distribution to verify against
            return None
        return out.tokens
    if kind == "cfg":
        opts["cache"] = "dense"
        try:
            out = dk.decode(model, prompts, strategy="cfg", scale=1.5, negative="Farewell", **opts)
        except dk.ParameterError:
            return None
        return out.tokens
    if kind == "grammar":
        which = int(x * 4)
        if which == 0:
            stage = dk.create("json_schema", schema=SCHEMAS[int(x * 100) % 3])
        elif which == 1:
            stage = dk.create("grammar", lark=LARK)
        elif which == 2:
            stage = dk.create("regex", pattern="[a-z]{2,6}( [a-z]{2,6}){0,3}\\.")
        else:
            stage = dk.create("json")
        opts["chain"] = dk.Chain([stage, dk.create("temperature", value=0.9)])
        opts["cache"] = r_choice(x, ["dense", "gqa", "window(size=16)"])
        return dk.generate(model, prompts, **opts).tokens
    if kind == "bad_params":
        bad = r_choice(x, [{"chain": "top_p(2)"}, {"max_new_tokens": -1}, {"cache": "windw"}, {"seed": -3},
                           {"logprobs": 10_000}, {"chain": "top_k(5) | sample | top_p(0.5)"}])  # fmt: skip
        try:
            dk.generate(model, prompts, **(opts | bad))
        except (dk.ParameterError, dk.ChainSpecError, dk.UnknownNameError):
            return None
        raise AssertionError(f"not refused: {bad}")
    if kind == "raises":
        chain = dk.Chain([raising_at(r_int(x, 0, 8)), dk.create("temperature", value=0.8)])
        try:
            dk.generate(model, prompts, **(opts | {"chain": chain, "max_new_tokens": 12}))
        except StopByCallbackError:
            return None
        raise AssertionError("did not raise")
    if kind == "hf":
        hf = models.hf_llama if x < 0.5 else models.hf_gpt2
        ids = [[ord(c) % 90 + 1 for c in p] for p in prompts]
        opts.pop("stop_strings", None)
        opts.pop("include_stop_str_in_output", None)
        if isinstance(opts["chain"], str) and ("json" in opts["chain"] or "regex" in opts["chain"]):
            opts["chain"] = "temperature(0.8)"
        if hf is models.hf_gpt2 and opts["cache"] not in ("dense", "gqa", "int8", "none"):
            opts["cache"] = "dense"  # learned positions: a cache that evicts is refused past the context anyway
        return dk.generate(hf, ids, **opts).tokens
    if kind == "compile":
        opts["cache"] = r_choice(x, ["dense", "gqa"])
        opts["chain"] = r_choice(x, ["temperature(0.8) | top_k(20)", "greedy", "top_p(0.9)"])
        return dk.generate(model, prompts, compile=True, **opts).tokens
    raise AssertionError(kind)


def r_int(x: float, lo: int, hi: int) -> int:
    return lo + int(x * 1000) % (hi - lo + 1)


def r_choice(x: float, items: list[Any]) -> Any:
    return items[int(x * 1000) % len(items)]


def warning_registry() -> int:
    """Entries in every module's `__warningregistry__` (one per distinct warning text and line shown)."""
    held = (getattr(m, "__warningregistry__", None) for m in list(sys.modules.values()))
    return sum(len(r) for r in held if isinstance(r, dict))


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def live_tensors() -> int:
    return sum(1 for o in gc.get_objects() if isinstance(o, torch.Tensor))


def types_count() -> Counter[str]:
    return Counter(type(o).__qualname__ for o in gc.get_objects())


def soak(args: argparse.Namespace) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    models = Models()
    # Warnings under Python's default filters, shown to a log (here: nowhere), as a service has them.
    warnings.showwarning = lambda *a, **k: None
    if args.tracemalloc:
        tracemalloc.start(8)
    times: list[tuple[int, str, float]] = []
    samples: dict[int, Any] = {}
    marks: list[dict[str, Any]] = []
    types_at: dict[int, Counter[str]] = {}
    snap = None
    errors = Counter[str]()
    t_all = time.perf_counter()
    for i in range(args.start, args.start + args.calls):
        req = request(i)
        if req["kind"] in args.skip:
            continue
        t = time.perf_counter()
        try:
            tokens = run(models, req)
        except Exception as exc:
            key = f"{req['kind']}: {type(exc).__name__}: {str(exc)[:160]}"
            if errors[key] == 0:
                print(f"call {i} {json.dumps(req['opts'], default=str)}: {key}", flush=True)
            errors[key] += 1
            tokens = None
        times.append((i, req["kind"], time.perf_counter() - t))
        if tokens is not None and i % args.sample_every == 0:
            samples[i] = tokens
        k = i - args.start + 1
        if k % args.mark_every == 0 or k == 1:
            gc.collect()
            mark = {
                "call": k, "rss_mib": round(rss_mib(), 1), "gc_objects": len(gc.get_objects()),
                "tensors": live_tensors(), "elapsed_s": round(time.perf_counter() - t_all, 1),
                "warningregistry": warning_registry(),
            }  # fmt: skip
            marks.append(mark)
            print(json.dumps(mark), flush=True)
            types_at[k] = types_count()
            if args.tracemalloc:
                now = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
                if snap is not None:
                    for stat in now.compare_to(snap, "lineno")[:6]:
                        print("   ", stat, flush=True)
                if snap is None and k >= 2 * args.mark_every:  # past the warm-up: the baseline
                    snap = now
    first_k = sorted(types_at)[1] if len(types_at) > 1 else sorted(types_at)[0]
    grew = (types_at[max(types_at)] - types_at[first_k]).most_common(15)
    dec = max(len(times) // 10, 1)
    first, last = [t for _, _, t in times[:dec]], [t for _, _, t in times[-dec:]]
    by_kind: dict[str, list[float]] = {}
    for _, kind, t in times:
        by_kind.setdefault(kind, []).append(t)
    kind_drift = {
        kind: (round(statistics.median(ts[: len(ts) // 10 or 1]) * 1000, 1),
               round(statistics.median(ts[-(len(ts) // 10 or 1):]) * 1000, 1), len(ts))
        for kind, ts in sorted(by_kind.items())
    }  # fmt: skip
    summary = {
        "calls": len(times),
        "wall_s": round(time.perf_counter() - t_all, 1),
        "marks": marks,
        f"objects_grown_since_call_{first_k}": grew,
        "first_decile_mean_ms": round(statistics.mean(first) * 1000, 1),
        "last_decile_mean_ms": round(statistics.mean(last) * 1000, 1),
        "median_ms_by_kind_first_vs_last_decile": kind_drift,
        "unexpected_errors": dict(errors),
    }
    (out / "samples.json").write_text(json.dumps(samples))
    (out / "times.json").write_text(json.dumps(times))
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps({k: v for k, v in summary.items() if k != "marks"}, indent=1), flush=True)
    swapped_models_freed()


def swapped_models_freed() -> None:
    """A service swapping models: each one dropped is freed, whatever it decoded (eager; a stream abandoned)."""
    refs = []
    for seed in range(3):
        hf = hf_model("llama", seed)
        dk.generate(hf, [[1, 2, 3]], max_new_tokens=8, cache="window(size=8)", seed=0)
        events = dk.stream(hf, [[4, 5]], max_new_tokens=30, seed=0)
        next(events)
        refs.append(weakref.ref(hf))
        del hf, events
    gc.collect()
    print("swapped models alive after gc:", sum(ref() is not None for ref in refs), "of", len(refs), flush=True)


def replay(args: argparse.Namespace) -> None:
    """The sampled requests again, in this fresh process: the same tokens."""
    samples = {int(k): v for k, v in json.loads((Path(args.out) / "samples.json").read_text()).items()}
    models = Models()
    warnings.simplefilter("ignore")
    differ = []
    for i, tokens in sorted(samples.items()):
        if run(models, request(i)) != tokens:
            differ.append((i, request(i)["kind"], request(i)["opts"]))
    print(f"replayed {len(samples)} sampled calls in a fresh process: {len(differ)} differ", flush=True)
    for d in differ[:20]:
        print("  differs:", d, flush=True)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--start", type=int, default=0)
    p.add_argument("--mark-every", type=int, default=100)
    p.add_argument("--sample-every", type=int, default=7)
    p.add_argument("--tracemalloc", action="store_true")
    p.add_argument("--skip", nargs="*", default=[], help="kinds of request left out (e.g. compile)")
    p.add_argument("--replay", action="store_true", help="only replay the samples of an earlier run in --out")
    p.add_argument("--no-replay", action="store_true")
    p.add_argument("--out", default="/tmp/soak")
    args = p.parse_args()
    if args.replay:
        replay(args)
        return
    soak(args)
    if not args.no_replay:
        subprocess.run([sys.executable, __file__, "--replay", "--out", args.out], check=True)


if __name__ == "__main__":
    main()
