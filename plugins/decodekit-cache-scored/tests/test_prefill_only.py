"""`prefill_only=True`: the prompt compressed as every scored cache compresses it, every later token kept
(kvpress's semantics). The reference: the same cache without it, given the prompt and then everything after
it as one block, attends over exactly that (the prompt's kept entries and the whole block, causally)."""

from __future__ import annotations

import sys
from typing import Any

import pytest
import torch
from compile_counting import count_graphs
from decodekit_beam.search import beam_search
from decodekit_gpt.gpt import GPT

import decodekit as dk
from decodekit.prompts import left_pad
from decodekit.testing.scored_caches import ScoredCacheConformance

CACHES = ["h2o", "tova", "snapkv", "knorm", "streaming"]
PROMPTS = [[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13], [7, 8, 9]]


def _padded(prompts: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded ids and positions (negative on padding): the engine's `left_pad`, no wider than the prompts."""
    return left_pad(prompts, max(len(p) for p in prompts), "cpu")


@torch.no_grad()
def _logits(model: Any, cache: str, prompts: list[list[int]], after: torch.Tensor, one_block: bool) -> torch.Tensor:
    """Logits `[B, 1 + T, V]`: at the prompt's last token, then at each token of `after` `[B, T]`, fed one at
    a time or as one block."""
    ids, positions = _padded(prompts)
    P, T = ids.shape[1], after.shape[1]
    spec = dk.CacheSpec.for_model(model.spec, batch_size=len(prompts), capacity=P + T)
    kv = dk.create_cache(cache, spec)
    out = [model(ids, positions, kv)[:, -1:]]
    steps = positions[:, -1:] + 1 + torch.arange(T)
    blocks = [slice(0, T)] if one_block else [slice(t, t + 1) for t in range(T)]
    out += [model(after[:, b], steps[:, b], kv) for b in blocks]
    return torch.cat(out, 1)


@pytest.mark.parametrize("cache", CACHES)
@pytest.mark.parametrize("prompts", [PROMPTS[:1], PROMPTS], ids=["one", "ragged"])
def test_each_token_after_the_prompt_sees_the_prompts_kept_entries_and_every_token_since(
    model: GPT, cache: str, prompts: list[list[int]]
) -> None:
    params = "budget=6, sinks=1, recent=2"
    after = torch.randint(1, 29, (len(prompts), 12), generator=torch.Generator().manual_seed(1))
    steps = _logits(model, f"{cache}({params}, prefill_only=True)", prompts, after, one_block=False)
    block = _logits(model, f"{cache}({params})", prompts, after, one_block=True)  # 12 > slack: one long block
    torch.testing.assert_close(steps, block, rtol=1e-5, atol=1e-5)
    evicting = _logits(model, f"{cache}({params})", prompts, after, one_block=False)
    assert not torch.allclose(steps, evicting, atol=1e-3)  # the evicting cache is another cache


@pytest.mark.parametrize("cache", ["snapkv", "tova"])
def test_on_the_shipped_hugging_face_model(cache: str) -> None:
    """Through the transformers bridge: the same rule on a real prompt of Shakespeare."""
    model = dk.load_model("tiny-shakespeare-llama")
    text = model.tokenizer.encode("HAMLET:\nTo be, or not to be, that is the question:\nWhether 'tis nobler in the")
    prompt, after = text[:60], torch.tensor([text[60:]])
    steps = _logits(model, f"{cache}(budget=24, prefill_only=True)", [prompt], after, one_block=False)
    block = _logits(model, f"{cache}(budget=24, slack=4)", [prompt], after, one_block=True)
    torch.testing.assert_close(steps, block, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("cache", CACHES)
def test_speculative_decoding_and_beam_search(model: GPT, cache: str) -> None:
    spec = f"{cache}(budget=6, sinks=1, recent=2, prefill_only=True)"
    repetitive = [[3, 4, 5, 6] * 4, [5, 6, 3, 4] * 2]  # prompt lookup drafts often, and is often wrong
    want = dk.generate(model, repetitive, chain="greedy", cache=spec, max_new_tokens=15).tokens
    out: Any = dk.decode(
        model, repetitive, strategy="speculative", draft="ngram", k=12, chain="greedy", cache=spec, max_new_tokens=15
    )
    assert out.tokens == want  # k=12 > slack: after the prompt any token can be taken back
    assert sum(out.drafted) > sum(out.accepted) > 0
    kept_all = beam_search(model, PROMPTS, num_beams=3, cache="gqa", max_new_tokens=12).tokens
    roomy = f"{cache}(budget=31, prefill_only=True)"
    assert beam_search(model, PROMPTS, num_beams=3, cache=roomy, max_new_tokens=12).tokens == kept_all
    assert [len(t) for t in beam_search(model, PROMPTS, num_beams=3, cache=spec, max_new_tokens=12).tokens] == [12, 12]


def test_it_keeps_what_it_was_sized_for_and_stays_within_the_context(model: GPT) -> None:
    spec = dk.CacheSpec.for_model(model.spec, batch_size=1, capacity=10)
    kv = dk.create_cache("h2o(budget=4, sinks=1, recent=1, prefill_only=True)", spec)
    ids, positions = _padded([[1, 2, 3, 4, 5, 6]])
    model(ids, positions, kv)
    model(ids[:, :4], positions[:, :4] + 6, kv)  # 10 tokens: the capacity
    assert kv.length == 10
    kept = kv.kept(0)[0, 0].tolist()  # type: ignore[attr-defined]
    assert len(kept) == 8 and kept[4:] == [6, 7, 8, 9] and 0 in kept[:4] and 5 in kept[:4]  # a sink, the recent
    with pytest.raises(dk.ParameterError, match=r"h2o.crop: n=5 is invalid.*allowed: 6 <= n <= 10"):
        kv.crop(5)  # type: ignore[attr-defined]  # into the prompt, compressed
    kv.crop(7)  # type: ignore[attr-defined]
    assert kv.length == 7
    model(ids[:, :3], positions[:, :3] + 7, kv)
    past = r"h2o\(prefill_only=True\): layer 0 got 1 more tokens after 10, past its capacity of 10; allowed: at most 0"
    with pytest.raises(dk.CacheCapacityError, match=past):
        model(ids[:, :1], positions[:, :1] + 10, kv)
    with pytest.raises(dk.ContextLengthError, match=r"a query would attend across 40 positions, past the model"):
        dk.generate(model, [[1] * 20], cache="h2o(budget=4, sinks=1, recent=1, prefill_only=True)", max_new_tokens=20)
    long = dk.CacheSpec.for_model(model.spec, batch_size=1, capacity=100)
    roomy, scored = (f"h2o(budget=4, sinks=1, recent=1{more})" for more in (", prefill_only=True", ""))
    # budget + capacity slots against budget + 4·slack: 104 against 36
    assert dk.create_cache(roomy, long).nbytes * 36 == dk.create_cache(scored, long).nbytes * 104  # type: ignore[attr-defined]  # nbytes: not in KVCache


class _Capacity(ScoredCacheConformance):
    def __init__(self, cache: str) -> None:
        self.cache = cache

    def make(self, spec: dk.CacheSpec) -> dk.KVCache:
        return dk.create_cache(f"{self.cache}(budget=5, sinks=1, recent=1, slack=3, prefill_only=True)", spec)


@pytest.mark.parametrize("cache", CACHES)
def test_it_states_the_capacity_it_refuses_at_and_refuses_a_prompt_past_it_up_front(model: GPT, cache: str) -> None:
    _Capacity(cache).test_capacity()  # the kit's check: up to spec.capacity every token, past it none
    spec = dk.CacheSpec.for_model(model.spec, batch_size=1, capacity=5)
    kv = dk.create_cache(f"{cache}(budget=4, sinks=1, recent=1, prefill_only=True)", spec)
    assert kv.capacity == 5  # type: ignore[attr-defined]
    ids, positions = _padded([[1, 2, 3, 4, 5, 6]])
    prompt = r"layer 0 got a prompt of 6 tokens, past its capacity of 5; allowed: a prompt of at most 5"
    with pytest.raises(dk.CacheCapacityError, match=rf"{cache}\(prefill_only=True\): {prompt}"):
        model(ids, positions, kv)
    assert kv.length == 0
    roomy = dk.create_cache(f"{cache}(budget=4, sinks=1, recent=1)", spec)
    assert roomy.capacity == sys.maxsize  # type: ignore[attr-defined]  # it evicts: any length
    model(ids, positions, roomy)


@pytest.mark.slow
@pytest.mark.xdist_group("compile")  # the compiling tests in one worker: inductor starts once, reuses its kernels
def test_compile_gives_the_eager_tokens(model: GPT) -> None:
    """After the prompt the steps are a plain cache's, which `compile=True` traces into the model's graph."""
    cache = "snapkv(budget=6, sinks=1, recent=2, prefill_only=True)"
    eager = dk.generate(model, PROMPTS, chain="greedy", cache=cache, max_new_tokens=8)
    compiled = dk.generate(model, PROMPTS, chain="greedy", cache=cache, max_new_tokens=8, compile=True)
    assert compiled.tokens == eager.tokens


@pytest.mark.parametrize("cache", CACHES)
@torch.no_grad()
def test_kept_after_reorder_names_the_entries_of_the_rows_followed(model: GPT, cache: str) -> None:
    """Before: `reorder` after the prompt moved which prompt slots hold a token but not their stream slots, so
    `kept` showed row 0's slots under row 1's flags. The reference: a cache fed row 1 alone (padding and all)."""
    params = f"{cache}(budget=4, sinks=1, recent=1, prefill_only=True)"
    ids, positions = _padded([PROMPTS[0][:10], PROMPTS[1]])  # row 1 left-padded: it keeps other slots
    kv = dk.create_cache(params, dk.CacheSpec.for_model(model.spec, batch_size=2, capacity=20))
    model(ids, positions, kv)
    model(torch.tensor([[4], [4]]), positions[:, -1:] + 1, kv)
    kv.reorder(torch.tensor([1, 1]))  # type: ignore[attr-defined]
    alone = dk.create_cache(params, dk.CacheSpec.for_model(model.spec, batch_size=1, capacity=20))
    model(ids[1:], positions[1:], alone)
    model(torch.tensor([[4]]), positions[1:, -1:] + 1, alone)
    for layer in range(model.spec.n_layers):
        want = alone.kept(layer)[0].tolist()  # type: ignore[attr-defined]
        assert [row.tolist() for row in kv.kept(layer)] == [want, want]  # type: ignore[attr-defined]


@pytest.mark.parametrize("cache", CACHES)
@pytest.mark.parametrize("prefill_only", [True, False])
@torch.no_grad()
def test_a_prompt_cropped_to_nothing_is_as_if_never_fed(model: GPT, cache: str, prefill_only: bool) -> None:
    """Before: `crop(0)` right after the prompt left a block of no queries whose attention weights the caches
    that observe (h2o, tova, snapkv) then made, a RuntimeError ("cannot reshape tensor of 0 elements"). The
    reference: a fresh cache fed the second prompt and a token."""
    params = f"{cache}(budget=4, sinks=1, recent=1, prefill_only={prefill_only})"
    spec = dk.CacheSpec.for_model(model.spec, batch_size=1, capacity=20)
    kv, fresh = dk.create_cache(params, spec), dk.create_cache(params, spec)
    model(torch.tensor([PROMPTS[0]]), torch.arange(13)[None], kv)
    kv.crop(0)  # type: ignore[attr-defined]
    assert kv.length == 0
    out = [model(torch.tensor([PROMPTS[1] * 2]), torch.arange(6)[None], c) for c in (kv, fresh)]
    out += [model(torch.tensor([[4]]), torch.tensor([[6]]), c) for c in (kv, fresh)]
    torch.testing.assert_close(out[0], out[1], rtol=0, atol=0)
    torch.testing.assert_close(out[2], out[3], rtol=0, atol=0)
    assert kv.kept(0).tolist() == fresh.kept(0).tolist()  # type: ignore[attr-defined]


@pytest.mark.parametrize("cache", CACHES)
def test_speculative_decoding_compresses_the_prompt_alone(cache: str) -> None:
    """Before: the first round fed the prompt and its drafts as one forward, which a `prefill_only` cache took
    for the prompt: the drafts accepted in it were compressed with it, other tokens than `dk.generate`'s (TOVA
    here). The reference: `dk.generate` with the same cache, greedy, which the target's picks must equal."""
    model = dk.load_model("tiny-shakespeare")
    prompts = ["To be, or not to be, that is the question. To be, or not to be, that is the question. To be, or not"]
    spec = f"{cache}(budget=16, sinks=2, recent=4, prefill_only=True)"
    want = dk.generate(model, prompts, chain="greedy", cache=spec, max_new_tokens=30).tokens
    for draft in ("ngram", model):
        out: Any = dk.decode(
            model, prompts, strategy="speculative", draft=draft, k=6, chain="greedy", cache=spec, max_new_tokens=30
        )
        assert out.tokens == want
        assert sum(out.accepted) > 0


@pytest.mark.parametrize("cache", CACHES)
def test_speculative_decoding_keeps_a_one_token_prompt_apart_from_its_drafts(cache: str) -> None:
    """Before: a prompt of one token still went with its drafts in one forward (the split wanted history
    before the prompt's last token), so the budget of 1 kept only the last accepted draft. The reference:
    `dk.generate` with the same cache, greedy."""
    model = dk.load_model("tiny-shakespeare")
    spec = f"{cache}(budget=1, sinks=0, recent=1, prefill_only=True)"
    want = dk.generate(model, ["T"], chain="greedy", cache=spec, max_new_tokens=20).tokens
    out: Any = dk.decode(
        model, ["T"], strategy="speculative", draft=model, k=4, chain="greedy", cache=spec, max_new_tokens=20
    )
    assert out.tokens == want
    assert sum(out.accepted) > 0


@torch.no_grad()
def test_a_crop_into_the_prompt_says_why_it_is_refused(model: GPT) -> None:
    """Before: the message gave the evicting cache's reason, "rollback=8, never before a block longer than
    slack", where this cache's rollback is unbounded after the prompt; now it names the compressed prompt."""
    spec = dk.CacheSpec.for_model(model.spec, batch_size=1, capacity=12)
    kv = dk.create_cache("h2o(budget=4, sinks=1, recent=1, prefill_only=True)", spec)
    model(torch.tensor([PROMPTS[0][:6]]), torch.arange(6)[None], kv)
    model(torch.tensor([[3, 4]]), torch.tensor([[6, 7]]), kv)
    with pytest.raises(dk.ParameterError) as raised:
        kv.crop(2)  # type: ignore[attr-defined]
    message = str(raised.value)
    assert "h2o.crop: n=2 is invalid" in message and "allowed: 6 <= n <= 8" in message
    assert "prefill_only" in message and "rollback=8" not in message


def test_a_capacity_past_memory_is_named(model: GPT) -> None:
    """Before: the refusal named budget, slack and prefill_only, not the capacity that sized the storage
    (`budget + capacity` slots); a `gqa` cache names it too."""
    spec = dk.CacheSpec.for_model(model.spec, batch_size=1, capacity=10**13)
    named = r"h2o: budget=16, slack=8, prefill_only=True, capacity=10000000000000 is invalid"
    with pytest.raises(dk.ParameterError, match=named):
        dk.create_cache("h2o(budget=16, prefill_only=True)", spec)
    with pytest.raises(dk.ParameterError, match=r"capacity=10000000000000"):
        dk.create_cache("gqa", spec)


@pytest.mark.slow
@pytest.mark.xdist_group("compile")
@pytest.mark.parametrize("cache", ["h2o", "knorm"])
def test_compile_traces_every_step_after_the_prompt_in_two_graphs(
    model: GPT, cache: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The model's forward compiles twice (the step that compresses the prompt, then every later one) and the
    chain's step once, with no graph break: a break inside the model's loop over its layers makes torch skip
    compiling that loop. Counted with a backend that records each graph dynamo hands it, as traced. An object
    made inside the first trace (its counts unseen as inputs there) cost one more recompile."""
    compiled = count_graphs(monkeypatch)
    torch._dynamo.utils.counters.clear()
    spec = f"{cache}(budget=6, sinks=1, recent=2, prefill_only=True)"
    eager = dk.generate(model, PROMPTS, chain="greedy", cache=spec, max_new_tokens=10).tokens
    assert dk.generate(model, PROMPTS, chain="greedy", cache=spec, max_new_tokens=10, compile=True).tokens == eager
    breaks = sum(torch._dynamo.utils.counters["graph_break"].values())
    torch._dynamo.reset()
    assert (len(compiled), breaks) == (3, 0)
