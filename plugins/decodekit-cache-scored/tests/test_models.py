"""The scored caches under a real decode: the reference GPT, prefill in blocks, far past the context, beam
search and speculative decoding (rolled back on every rejection)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from decodekit_beam.search import beam_search
from decodekit_gpt.gpt import GPT

import decodekit as dk
from decodekit.rope import frequencies, rotate

CACHES = ["h2o", "tova", "snapkv", "knorm", "streaming"]
PROMPTS = [[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13], [7, 8, 9]]


@pytest.mark.parametrize("cache", CACHES)
def test_a_budget_above_everything_fed_equals_keeping_all(model: GPT, cache: str) -> None:
    """Nothing is evicted: greedy tokens equal gqa's, for a ragged batch (padding never counts)."""
    want = dk.generate(model, PROMPTS, chain="greedy", cache="gqa", max_new_tokens=18).tokens
    assert dk.generate(model, PROMPTS, chain="greedy", cache=f"{cache}(budget=31)", max_new_tokens=18).tokens == want


@pytest.mark.parametrize("cache", CACHES)
def test_a_prompt_is_cut_into_the_same_blocks_whatever_its_batch(model: GPT, cache: str) -> None:
    """A prompt past the context is prefilled in blocks of the context, which end at the prompts' last column: a
    row's blocks depend on its own length. They were cut from the batch's first column, so a 20-token prompt beside
    a 40-token one (context 32) went in as 12 + 8 tokens, alone as 20, and was compressed otherwise: its log-probs
    differed by 1e-3 to 6e-3 (and on a transformers Llama its tokens, for every scored cache)."""
    g = torch.Generator().manual_seed(0)
    long, short = torch.randint(0, 29, (40,), generator=g).tolist(), torch.randint(0, 29, (20,), generator=g).tolist()
    options: dict[str, Any] = {"chain": "greedy", "cache": f"{cache}(budget=6, sinks=1, recent=1)", "logprobs": 0}
    together = dk.generate(model, [long, short], max_new_tokens=12, **options)
    for row, prompt in enumerate((long, short)):
        alone = dk.generate(model, [prompt], max_new_tokens=12, **options)
        assert together.tokens[row] == alone.tokens[0]
        assert together.logprobs is not None and alone.logprobs is not None
        got, want = [lp.raw for lp in together.logprobs[row]], [lp.raw for lp in alone.logprobs[0]]
        assert got == pytest.approx(want, abs=1e-5), f"row {row}"


@pytest.mark.parametrize("cache", CACHES)
def test_a_budget_past_the_context_holds_the_context(model: GPT, cache: str) -> None:
    """No row holds more than the context (past it, what is held moves within it): a larger budget is the context's.
    Before: `budget=100` on this 32-position model stored 100 + 4·slack slots a layer, 68 of them never written."""
    held: list[dk.KVCache] = []

    def make(spec: dk.CacheSpec) -> dk.KVCache:
        held.append(dk.create_cache(f"{cache}(budget=100)", spec))
        return held[-1]

    out = dk.generate(model, PROMPTS, chain="greedy", cache=make, max_new_tokens=60)
    want = dk.generate(model, PROMPTS, chain="greedy", cache=f"{cache}(budget=32)", max_new_tokens=60)
    assert out.tokens == want.tokens
    assert held[0].nbytes == dk.create_cache(f"{cache}(budget=32)", held[0].spec).nbytes  # type: ignore[attr-defined]  # nbytes: not in KVCache


@pytest.mark.parametrize("cache", CACHES)
@pytest.mark.parametrize("store", ["gqa", "int8"])
def test_streams_far_past_the_context_in_fixed_memory(model: GPT, cache: str, store: str) -> None:
    held: list[dk.KVCache] = []

    def make(spec: dk.CacheSpec) -> dk.KVCache:
        held.append(dk.create_cache(f"{cache}(budget=12, sinks=2, recent=3, store={store!r})", spec))
        return held[-1]

    out = dk.generate(model, PROMPTS, cache=make, max_new_tokens=300, seed=0)
    assert [len(t) for t in out.tokens] == [300, 300]
    assert (
        held[0].nbytes  # type: ignore[attr-defined]  # nbytes: not in KVCache
        == dk.create_cache(f"{cache}(budget=12, sinks=2, recent=3, store={store!r})", held[0].spec).nbytes  # type: ignore[attr-defined]  # nbytes: not in KVCache
    )


@pytest.mark.parametrize("cache", CACHES)
def test_speculative_decoding_rolls_back_and_keeps_all_when_nothing_is_evicted(model: GPT, cache: str) -> None:
    repetitive = [[3, 4, 5, 6] * 4, [5, 6, 3, 4] * 2]  # prompt lookup drafts often, and is often wrong
    want = dk.generate(model, repetitive, chain="greedy", cache="gqa", max_new_tokens=14).tokens
    out: Any = dk.decode(
        model,
        repetitive,
        strategy="speculative",
        draft="ngram",
        k=3,
        chain="greedy",
        cache=f"{cache}(budget=31)",
        max_new_tokens=14,
    )
    assert out.tokens == want
    assert sum(out.drafted) > sum(out.accepted) > 0  # drafts were rejected: crop ran


@pytest.mark.parametrize("cache", CACHES)
def test_speculative_decoding_with_evictions(model: GPT, cache: str) -> None:
    out: Any = dk.decode(
        model,
        [[3, 4, 5, 6] * 4],
        strategy="speculative",
        draft="ngram",
        k=3,
        chain="greedy",
        cache=f"{cache}(budget=10, sinks=2, recent=4, slack=4)",
        max_new_tokens=60,
    )
    assert len(out.tokens[0]) == 60 and sum(out.drafted) > sum(out.accepted) > 0


def test_speculative_refuses_more_than_the_rollback(model: GPT) -> None:
    with pytest.raises(dk.ParameterError, match=r"k=8 is invalid with cache h2o.*at most 4 \(its rollback\)"):
        dk.decode(model, [[1, 2, 3]], strategy="speculative", draft="ngram", k=8, cache="h2o(budget=12, slack=4)")


@pytest.mark.parametrize("cache", CACHES)
def test_beam_search_follows_the_beams(model: GPT, cache: str) -> None:
    want = beam_search(model, PROMPTS, num_beams=3, cache="gqa", max_new_tokens=12).tokens
    assert beam_search(model, PROMPTS, num_beams=3, cache=f"{cache}(budget=31)", max_new_tokens=12).tokens == want
    out = beam_search(model, PROMPTS, num_beams=3, cache=f"{cache}(budget=10, sinks=2, recent=3)", max_new_tokens=40)
    assert [len(t) for t in out.tokens] == [40, 40]


@pytest.mark.slow
@pytest.mark.xdist_group("compile")  # the compiling tests in one worker: inductor starts once, reuses its kernels
def test_compile_gives_the_eager_tokens_while_evicting(model: GPT) -> None:
    """`compile=True` over a cache that evicts per head. Both failed inside torch's compiler before: the step
    returned a view spanning the storage buffer it had just written (`FloatStorage.read`), and once the model's
    graphs had been compiled at other shapes, inductor emitted an unbound symbolic size for the traced cache
    (`NameError: name 's38' is not defined`, mid-run). The cache's steps now run outside the graph."""
    torch._dynamo.reset()  # shapes another test compiled GPT at (same worker: the group) hid that failure
    for prompts in ([[1, 2, 3]], [[4, 5, 6, 7, 8], [9, 10]]):  # the model's graphs at other shapes first
        dk.generate(model, prompts, chain="greedy", cache="dense", max_new_tokens=6, compile=True)
    cache = "streaming(budget=6, sinks=1, recent=2, slack=2)"
    eager = dk.generate(model, PROMPTS, chain="greedy", cache=cache, max_new_tokens=8)
    compiled = dk.generate(model, PROMPTS, chain="greedy", cache=cache, max_new_tokens=8, compile=True)
    assert compiled.tokens == eager.tokens


def test_a_model_that_never_observes_is_a_clear_error() -> None:
    """The message says what to do: a model written after docs/concepts.md's example, which attended by hand
    (update, attention_mask, SDPA), got only 'needs a model that calls observe (decodekit's GPT, HFModel)'."""
    spec = dk.CacheSpec(n_layers=1, n_heads=2, n_kv_heads=1, head_dim=8, batch_size=1, capacity=8, max_positions=32)
    cache = dk.create_cache("h2o(budget=8, recent=2)", spec)
    z = torch.zeros(1, 1, 2, 8)
    cache.update(0, z, z)
    cache.attention_mask(0, torch.tensor([[0, 1]]))
    with pytest.raises(
        dk.PluginError,
        match=r"h2o: layer 0 was fed again before the model handed its queries to observe.*allowed: a model whose "
        r"attention goes through decodekit\.cache\.cached_attention\(cache, layer, q, k, v, positions\)",
    ):
        cache.update(0, z, z)


def test_the_command_line_takes_them(capsys: pytest.CaptureFixture[str]) -> None:
    """`decodekit generate --cache "h2o(budget=32, recent=8)"`: the string form works there too."""
    import json

    from decodekit_cli import main

    args = ["generate", "ROMEO:", "--cache", "h2o(budget=32, recent=8)", "--max-new-tokens", "300", "--json"]
    assert main([*args, "--chain", "greedy"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert len(report["samples"][0]["tokens"]) == 300  # past tiny-shakespeare's 256-character context


@pytest.mark.parametrize(("budget", "block"), [(8, 24), (8, 32), (32, 1), (40, 3)])
def test_a_block_past_the_context_sees_every_key_within_it_and_none_twice(budget: int, block: int) -> None:
    """Past the context the held keys are moved within it, beyond the block's own: a block of 32 (the context)
    after 32 tokens, or one token with a budget of the whole context, saw held keys at negative distances (in
    the query's future) and at its own tokens' distances (the text degenerated)."""
    M, D, base = 32, 16, 100.0
    spec = dk.CacheSpec(
        n_layers=1, n_heads=1, n_kv_heads=1, head_dim=D, batch_size=1, capacity=1, dtype=torch.float64,
        rope_base=base, max_positions=M,
    )  # fmt: skip
    cache = dk.create_cache(f"streaming(budget={budget}, sinks=0, recent=0)", spec)
    e = torch.randn(1, 1, 1, D, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    candidates = torch.arange(-2 * M, 3 * M)
    table = torch.cat([rotate(e, int(p), frequencies(D, base)) for p in candidates], 2)[
        0, 0
    ]  # the key at each position

    def feed(start: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        positions = torch.arange(start, start + n)
        k = torch.cat([rotate(e, int(p), frequencies(D, base)) for p in positions], 2)
        keys, _ = cache.update(0, k, k.clone())  # type: ignore[attr-defined]
        return keys[0, 0], cache.attention_mask(0, positions[None])[0, 0]  # type: ignore[attr-defined]

    feed(0, M)
    keys, mask = feed(M, block)
    seen = candidates[torch.cdist(keys, table).argmin(-1)]  # the position each returned key is rotated to
    for q in range(block):
        distances = sorted((M + q - seen[mask[q]]).tolist())
        held = min(budget, M, M - block)
        assert distances == list(range(q + 1 + held)), f"query {q} of the block sees distances {distances}"


@pytest.mark.parametrize(
    "cache",
    [
        "snapkv(budget=16, slack=40)",
        "snapkv(budget=4, sinks=0, recent=0)",
        "snapkv(budget=6, sinks=1, recent=1, window=2, kernel=1)",
        "h2o(budget=4, sinks=0, recent=0)",
    ],
)
def test_a_prompts_tokens_do_not_depend_on_its_batch(cache: str) -> None:
    """A prompt of at most `slack` tokens alone was a short forward (SnapKV's decode rule), left-padded beside a
    longer one a long block (its prompt rule): a prompt is now compressed as a whole however short, and a block
    no longer than the window is all window."""
    shakespeare = dk.load_model("tiny-shakespeare")
    short, long = "JULIET:\nO Romeo, Romeo! wherefore", "KING HENRY:\nWhat say you, my lords, to this? Speak, I pray.\n"
    for prompt in (short, short[:7]):
        alone = dk.generate(shakespeare, prompt, chain="greedy", cache=cache, max_new_tokens=40).tokens[0]
        assert (
            dk.generate(shakespeare, [prompt, long], chain="greedy", cache=cache, max_new_tokens=40).tokens[0] == alone
        )
        assert (
            dk.generate(shakespeare, [long, prompt], chain="greedy", cache=cache, max_new_tokens=40).tokens[1] == alone
        )


def test_a_prompt_within_snapkvs_window_keeps_its_sinks(model: GPT) -> None:
    """The window is kept, but after the sinks and the recent tokens: a 14-token prompt is all window, and
    with the window's score infinite like theirs the newest would have pushed the sinks out."""
    spec = dk.CacheSpec.for_model(model.spec, batch_size=1, capacity=20)
    cache = dk.create_cache("snapkv(budget=12)", spec)  # sinks=4, recent=8, window=16
    with torch.inference_mode():
        model(torch.arange(1, 15)[None], torch.arange(14)[None], cache)
    assert sorted(s for s in cache.kept(0)[0, 0].tolist() if s >= 0) == [0, 1, 2, 3, *range(6, 14)]  # type: ignore[attr-defined]


@pytest.mark.parametrize("decode", ["h2o", "tova", "knorm"])
def test_snapkv_decodes_with_each_eviction_rule(model: GPT, decode: str) -> None:
    """Past the prompt SnapKV evicts by its `decode` rule; key-norm needs no attention (it raised before)."""
    want = dk.generate(model, PROMPTS, chain="greedy", cache="gqa", max_new_tokens=18).tokens
    cache = f"snapkv(budget=31, decode={decode!r})"
    assert dk.generate(model, PROMPTS, chain="greedy", cache=cache, max_new_tokens=18).tokens == want
    out = dk.generate(
        model,
        PROMPTS,
        chain="greedy",
        cache=f"snapkv(budget=12, sinks=2, recent=2, decode={decode!r})",
        max_new_tokens=18,
    )
    assert [len(t) for t in out.tokens] == [18, 18]
