"""The decode loop: cached == uncached, ragged rows == alone, seeds, stops, errors."""

from __future__ import annotations

import os

import pytest
import torch
from decodekit_gpt.gpt import GPT

import decodekit as dk
from tinymodels import tiny_gpt

PROMPTS = [[5, 17, 3, 9, 44, 2], [7, 8], [90, 1, 33]]


@pytest.mark.parametrize("cache", ["dense", "gqa"])
def test_cached_equals_uncached_sampled(model: GPT, cache: str) -> None:
    ref = dk.generate(model, PROMPTS, max_new_tokens=24, cache="none", seed=3)
    out = dk.generate(model, PROMPTS, max_new_tokens=24, cache=cache, seed=3)
    assert out.tokens == ref.tokens
    assert all(len(t) == 24 for t in out.tokens)


@pytest.mark.parametrize("cache", ["dense", "gqa"])
def test_cached_equals_uncached_logits(model: GPT, cache: str) -> None:
    """The logits themselves agree, not only the tokens: prefill + 8 decode steps vs full recompute."""
    ids = torch.tensor([PROMPTS[0] + [11, 12, 13, 14, 15, 16, 17, 18]])
    pos = torch.arange(ids.shape[1])[None]
    full = model(ids, pos, None)
    kv = dk.create_cache(cache, dk.CacheSpec.for_model(model.spec, batch_size=1, capacity=32))
    steps = [model(ids[:, :6], pos[:, :6], kv)]
    for t in range(6, ids.shape[1]):
        steps.append(model(ids[:, t : t + 1], pos[:, t : t + 1], kv))
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)


def test_greedy_is_deterministic_and_equal_across_caches(model: GPT) -> None:
    greedy = dk.Chain([], selector=_greedy_like())
    outs = [
        dk.generate(model, PROMPTS, chain=greedy, max_new_tokens=16, cache=c).tokens for c in ("none", "dense", "gqa")
    ]
    assert outs[0] == outs[1] == outs[2]
    assert dk.generate(model, PROMPTS, chain=greedy, max_new_tokens=16).tokens == outs[0]


def _greedy_like() -> dk.Selector:
    """An argmax selector written inline, so core tests need no plugin."""

    def argmax(logits: torch.Tensor, ctx: dk.DecodeContext) -> torch.Tensor:
        return logits.argmax(-1)

    return argmax


@pytest.mark.parametrize("cache", ["none", "dense", "gqa"])
def test_ragged_rows_equal_generating_each_row_alone(cache: str) -> None:
    m = tiny_gpt(2)
    seeds = [101, 202, 303]
    batch = dk.generate(m, PROMPTS, max_new_tokens=20, cache=cache, seed=seeds)
    for prompt, seed, tokens in zip(PROMPTS, seeds, batch.tokens):
        alone = dk.generate(m, [prompt], max_new_tokens=20, cache=cache, seed=[seed])
        assert alone.tokens[0] == tokens


def test_row_output_does_not_depend_on_batch_mates() -> None:
    """seed=int: row b's stream depends on (seed, b) only — adding rows after it changes nothing."""
    m = tiny_gpt(2)
    one = dk.generate(m, [PROMPTS[0]], max_new_tokens=20, seed=7).tokens[0]
    three = dk.generate(m, [PROMPTS[0], PROMPTS[1], PROMPTS[0]], max_new_tokens=20, seed=7).tokens
    assert three[0] == one
    assert three[2] != one  # same prompt, different row: its own stream


def test_seed_none_differs_and_seed_int_repeats() -> None:
    m = tiny_gpt(2)
    a = dk.generate(m, PROMPTS, max_new_tokens=30, seed=1).tokens
    assert dk.generate(m, PROMPTS, max_new_tokens=30, seed=1).tokens == a
    assert dk.generate(m, PROMPTS, max_new_tokens=30, seed=None).tokens != a


def test_per_row_stop_tokens_and_finish_reasons() -> None:
    m = tiny_gpt(2)
    free = dk.generate(m, PROMPTS, max_new_tokens=12, seed=5)
    stop0 = free.tokens[0][3]
    stop1 = free.tokens[1][6]
    out = dk.generate(m, PROMPTS, max_new_tokens=12, seed=5, stop_tokens=[[stop0], [stop1], []])
    first0 = free.tokens[0].index(stop0)
    first1 = free.tokens[1].index(stop1)
    assert out.tokens[0] == free.tokens[0][: first0 + 1]  # the stop token ends the row, included
    assert out.tokens[1] == free.tokens[1][: first1 + 1]
    assert out.tokens[2] == free.tokens[2]
    assert out.finish_reasons == ["stop", "stop", "length"]
    assert out.stopped_by[:2] == [stop0, stop1]


def test_shared_stop_tokens_apply_to_every_row() -> None:
    m = tiny_gpt(2)
    free = dk.generate(m, PROMPTS, max_new_tokens=10, seed=5)
    stop = free.tokens[2][0]
    out = dk.generate(m, PROMPTS, max_new_tokens=10, seed=5, stop_tokens=[stop])
    assert out.tokens[2] == [stop] and out.finish_reasons[2] == "stop"
    for b in (0, 1):
        cut = free.tokens[b].index(stop) + 1 if stop in free.tokens[b] else 10
        assert out.tokens[b] == free.tokens[b][:cut]


def test_stream_events_match_generate(text_model: GPT) -> None:
    out = dk.generate(text_model, ["To be", "or"], max_new_tokens=9, seed=2)
    events = list(dk.stream(text_model, ["To be", "or"], max_new_tokens=9, seed=2))
    for b in range(2):
        row = [e for e in events if e.row == b]
        assert [e.token for e in row] == out.tokens[b]
        assert [e.step for e in row] == list(range(9))
        assert "".join(e.text or "" for e in row) == out.text[b]  # type: ignore[index]
        assert row[-1].finish_reason == "length" and all(e.finish_reason is None for e in row[:-1])
    assert out.text == [text_model.tokenizer.decode(t) for t in out.tokens]  # type: ignore[union-attr,operator]


def test_stop_strings_across_token_boundaries(text_model: GPT) -> None:
    free = dk.generate(text_model, "Hamlet", max_new_tokens=20, seed=4)
    text = free.text[0]  # type: ignore[index]
    stop = text[5:8]  # three characters: three tokens, so the match spans token boundaries
    out = dk.generate(text_model, "Hamlet", max_new_tokens=20, seed=4, stop_strings=[stop])
    cut = text.find(stop)
    assert out.text == [text[:cut]]
    assert out.finish_reasons == ["stop"] and out.stopped_by == [stop]
    assert out.tokens[0] == free.tokens[0][: cut + 3]
    streamed = "".join(
        e.text or "" for e in dk.stream(text_model, "Hamlet", max_new_tokens=20, seed=4, stop_strings=[stop])
    )
    assert streamed == text[:cut]  # streamed text never shows (a part of) the stop string


def test_stop_strings_per_prompt_end_each_prompt_by_its_own(text_model: GPT) -> None:
    """One list per prompt (vLLM's per-request `stop`): each prompt decodes as alone with its own strings."""
    prompts, seeds = ["Hamlet", "To be", "or"], [4, 5, 6]
    free = dk.generate(text_model, prompts, max_new_tokens=20, seed=seeds)
    own = [[text[5:8]] for text in free.text or []]  # each row's own, from inside its free text
    own[2] = []  # none: this row runs to its length
    out = dk.generate(text_model, prompts, max_new_tokens=20, seed=seeds, stop_strings=own)
    for b, prompt in enumerate(prompts):
        alone = dk.generate(text_model, prompt, max_new_tokens=20, seed=[seeds[b]], stop_strings=own[b])
        assert (out.text[b], out.finish_reasons[b], out.stopped_by[b]) == (  # type: ignore[index]
            alone.text[0],  # type: ignore[index]
            alone.finish_reasons[0],
            alone.stopped_by[0],
        )
    assert out.finish_reasons == ["stop", "stop", "length"]
    assert out.text == [t[: t.find(s[0])] for t, s in zip(free.text[:2], own)] + [free.text[2]]  # type: ignore[index]


def test_logprobs_raw_and_processed(model: GPT) -> None:
    chain = dk.Chain([lambda x, ctx: x / 0.5])
    out = dk.generate(model, [PROMPTS[0]], chain=chain, max_new_tokens=4, seed=0, logprobs=3)
    assert out.logprobs is not None
    ids = torch.tensor([PROMPTS[0] + out.tokens[0]])
    logits = model(ids, torch.arange(ids.shape[1])[None], None)[0]
    for step, lp in enumerate(out.logprobs[0]):
        raw = torch.log_softmax(logits[len(PROMPTS[0]) - 1 + step], -1)
        processed = torch.log_softmax(logits[len(PROMPTS[0]) - 1 + step] / 0.5, -1)
        token = out.tokens[0][step]
        assert lp.raw == pytest.approx(raw[token].item(), abs=1e-5)
        assert lp.processed == pytest.approx(processed[token].item(), abs=1e-5)
        assert [t for t, _ in lp.raw_top] == raw.topk(3).indices.tolist()
        assert [t for t, _ in lp.processed_top] == processed.topk(3).indices.tolist()


def test_uncached_crops_to_the_context_beyond_max_positions() -> None:
    """Past the context, each token comes from the last 16 tokens at positions 0..15 (the notes' crop)."""
    m = tiny_gpt(2, block_size=16)
    prompt = list(range(1, 15))
    out = dk.generate(m, [prompt], chain=dk.Chain([], selector=_greedy_like()), max_new_tokens=10, cache="none")
    assert len(out.tokens[0]) == 10
    history = prompt + out.tokens[0]
    for step in range(10):
        seen = history[: len(prompt) + step][-16:]
        logits = m(torch.tensor([seen]), torch.arange(len(seen))[None], None)[0, -1]
        assert out.tokens[0][step] == int(logits.argmax())


@pytest.mark.parametrize("prompt_length", [16, 13])
def test_uncached_scores_past_the_context_come_from_exactly_the_last_max_positions_tokens(prompt_length: int) -> None:
    """The crop's window is the last 16 tokens, not 15: each token's raw log-probability is the model's on them at
    positions 0..15 (argmax tokens alone did not tell a window one token short from it)."""
    m = tiny_gpt(2, block_size=16)
    prompt = [(7 * i) % 101 for i in range(1, prompt_length + 1)]
    chain = dk.Chain([], selector=_greedy_like())
    out = dk.generate(m, [prompt], chain=chain, max_new_tokens=6, cache="none", logprobs=1)
    assert out.logprobs is not None
    history = prompt + out.tokens[0]
    for step, (token, lp) in enumerate(zip(out.tokens[0], out.logprobs[0], strict=True)):
        seen = history[: len(prompt) + step][-16:]
        assert len(seen) == 16 or step + prompt_length < 16
        with torch.no_grad():
            reference = m(torch.tensor([seen]), torch.arange(len(seen))[None], None)[0, -1].float().log_softmax(-1)
        assert lp.raw == pytest.approx(float(reference[token]), abs=1e-5), step


@pytest.mark.parametrize("cache", ["dense", "gqa"])
def test_context_overflow_is_a_clear_error(cache: str) -> None:
    m = tiny_gpt(2, block_size=16)
    with pytest.raises(dk.ContextLengthError, match=r"10 tokens \+ max_new_tokens=7 = 17 .* 16 positions"):
        dk.generate(m, [list(range(10))], max_new_tokens=7, cache=cache)
    with pytest.raises(dk.ContextLengthError, match="block_size=16"):
        m(torch.zeros(1, 17, dtype=torch.long), torch.arange(17)[None], None)


def test_bad_prompts_and_parameters() -> None:
    m = tiny_gpt(2)
    with pytest.raises(dk.ParameterError, match="row 1 is empty"):
        dk.generate(m, [[1], []])
    with pytest.raises(dk.ParameterError, match=r"row 0: token id 101 is invalid; allowed: 0 <= id < vocab_size=101"):
        dk.generate(m, [[1, 101]])
    with pytest.raises(dk.ParameterError, match="no tokenizer"):
        dk.generate(m, "hello")
    with pytest.raises(dk.ParameterError, match="max_new_tokens=-1"):
        dk.generate(m, [[1]], max_new_tokens=-1)
    with pytest.raises(dk.UnknownNameError, match="unknown cache backend 'paged'; installed: .*dense.*gqa"):
        dk.generate(m, [[1]], max_new_tokens=4, cache="paged")
    with pytest.raises(dk.ParameterError, match="3 lists given for 1 prompts"):
        dk.generate(m, [[1]], max_new_tokens=4, stop_tokens=[[1], [2], [3]])


def test_tensor_prompts_and_zero_new_tokens() -> None:
    m = tiny_gpt(2)
    t = torch.tensor([[1, 2, 3], [4, 5, 6]])
    assert (
        dk.generate(m, t, max_new_tokens=5, seed=0).tokens
        == dk.generate(m, t.tolist(), max_new_tokens=5, seed=0).tokens
    )
    assert dk.generate(m, t, max_new_tokens=0).tokens == [[], []]


def test_nan_logits_name_step_and_row() -> None:
    m = tiny_gpt(2)

    def poison(logits: torch.Tensor, ctx: dk.DecodeContext) -> torch.Tensor:
        if ctx.step == 2:
            logits = logits.clone()
            logits[1] = float("nan")
        return logits

    with pytest.raises(dk.NumericsError, match="step 2, row 1: .*NaN"):
        dk.generate(m, PROMPTS, chain=dk.Chain([poison]), max_new_tokens=5)

    def remove_all(logits: torch.Tensor, ctx: dk.DecodeContext) -> torch.Tensor:
        out = logits.clone()
        out[2] = float("-inf")
        return out

    with pytest.raises(dk.NumericsError, match="step 0, row 2: .*every token was removed"):
        dk.generate(m, PROMPTS, chain=dk.Chain([remove_all]), max_new_tokens=5)


class NaNAtStep:
    """A model whose logits for `row` are NaN from decode step `at` on (the prefill gives step 0)."""

    def __init__(self, model: GPT, row: int, at: int) -> None:
        self.model, self.row, self.at, self.calls = model, row, at, 0
        self.spec = model.spec

    def __call__(self, ids: torch.Tensor, positions: torch.Tensor, cache: object = None) -> torch.Tensor:
        logits: torch.Tensor = self.model(ids, positions, cache)
        self.calls += 1
        if self.calls > self.at:
            logits[self.row] = float("nan")
        return logits


@pytest.mark.parametrize(
    "chain", ["repetition_penalty(1.3) | temperature(0.7) | sample", "greedy", "top_k(5) | sample"]
)
def test_the_models_nan_is_named_as_such_after_in_place_stages(chain: str) -> None:
    model = NaNAtStep(tiny_gpt(2), row=1, at=3)
    with pytest.raises(dk.NumericsError, match="step 3, row 1: .*the model's logits contain NaN"):
        dk.generate(model, PROMPTS, chain=chain, max_new_tokens=6, seed=0)


def test_a_finished_row_that_cannot_be_sampled_does_not_stop_the_others() -> None:
    m = tiny_gpt(2)
    first = dk.generate(m, PROMPTS, chain="greedy", max_new_tokens=1).tokens
    model = NaNAtStep(m, row=0, at=2)  # row 0 stops at step 0 on its own first token; NaN from step 2
    out = dk.generate(model, PROMPTS, chain="greedy", max_new_tokens=5, stop_tokens=[[first[0][0]], [], []])
    assert out.tokens[0] == first[0] and out.finish_reasons[0] == "stop"
    assert [len(t) for t in out.tokens[1:]] == [5, 5]
    assert out.tokens[1:] == dk.generate(m, PROMPTS[1:], chain="greedy", max_new_tokens=5).tokens


def test_stateful_stage_state_is_per_generation() -> None:
    """init_state runs once per generation; the stage sees the same object every step."""
    m = tiny_gpt(2)

    class Counter(dk.ProcessorBase[dk.NoParams]):
        name = "counter"

        def init_state(self, ctx: dk.DecodeContext) -> list[int]:
            return [0] * ctx.batch_size

        def __call__(self, logits: torch.Tensor, ctx: dk.DecodeContext) -> torch.Tensor:
            state = ctx.state_for(self)
            for b in range(len(state)):
                state[b] += 1
            assert state == [ctx.step + 1] * ctx.batch_size
            return logits

    counter = Counter()
    chain = dk.Chain([counter])
    dk.generate(m, PROMPTS, chain=chain, max_new_tokens=6, seed=0)
    dk.generate(m, PROMPTS, chain=chain, max_new_tokens=6, seed=0)  # fresh state: the assert holds again


class _ModeRecorder:
    """A model that notes whether each of its calls ran in inference mode."""

    def __init__(self, model: GPT) -> None:
        self.model = model
        self.spec = model.spec
        self.modes: list[bool] = []

    def __call__(self, *args: object, **kwargs: object) -> torch.Tensor:
        self.modes.append(torch.is_inference_mode_enabled())
        out: torch.Tensor = self.model(*args, **kwargs)
        return out

    def parameters(self) -> object:
        return self.model.parameters()


def test_stream_leaves_inference_mode_between_events_and_generate_holds_it() -> None:
    model = _ModeRecorder(tiny_gpt())
    between = [torch.is_inference_mode_enabled() for _ in dk.stream(model, [[1, 2, 3]], max_new_tokens=5, seed=0)]
    assert between == [False] * 5 and model.modes == [True] * 5  # the prefill and four decode steps
    model.modes = []
    out = dk.generate(model, [[1, 2, 3]], max_new_tokens=5, seed=0)
    assert model.modes == [True] * 5 and not torch.is_inference_mode_enabled()
    assert out.tokens == dk.generate(tiny_gpt(), [[1, 2, 3]], max_new_tokens=5, seed=0).tokens


@pytest.mark.parametrize("value", ["+1", "100000", "\u00b2", "9" * 5000])  # more than the CPUs; "²".isdigit()
def test_decodekit_threads_beyond_the_cpus_is_an_error_not_a_crash(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    """DECODEKIT_THREADS=100000 crashed the process in torch's OpenMP runtime (a segfault, or libgomp's abort)."""
    cpus = len(os.sched_getaffinity(0))
    value = str(cpus + 1) if value == "+1" else value  # one more than the CPUs, which torch would accept
    monkeypatch.setenv("DECODEKIT_THREADS", value)
    with pytest.raises(dk.ParameterError) as info:
        dk.generate(tiny_gpt(2), [[1, 2]], max_new_tokens=1)
    assert str(info.value) == (
        f"DECODEKIT_THREADS={value!r} is invalid; allowed: an integer 0 <= N <= {cpus}, the CPUs this process "
        "can use (0: torch's setting)"
    )


def test_a_small_model_decodes_on_one_thread_unless_the_caller_chose(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI picked one thread for small models, dk.generate did not (53-85 s against 7.7 s loaded)."""
    import decodekit.threads as threads_module

    seen: list[int] = []

    def spy(logits: torch.Tensor, ctx: dk.DecodeContext) -> torch.Tensor:
        seen.append(torch.get_num_threads())
        return logits

    model = tiny_gpt(2)
    monkeypatch.setattr(threads_module, "_STARTED_WITH", torch.get_num_threads())
    before = torch.get_num_threads()
    dk.generate(model, [[1, 2]], chain=dk.Chain([spy]), max_new_tokens=3)
    assert seen == [1, 1, 1] and torch.get_num_threads() == before  # restored after
    seen.clear()
    monkeypatch.setattr(threads_module, "_STARTED_WITH", before + 1)  # the caller chose `before`
    dk.generate(model, [[1, 2]], chain=dk.Chain([spy]), max_new_tokens=2)
    assert seen == [before, before]
    seen.clear()
    cpus = len(os.sched_getaffinity(0))  # at most the CPUs this process can use
    monkeypatch.setenv("DECODEKIT_THREADS", str(cpus))
    events = dk.stream(model, [[1, 2]], chain=dk.Chain([spy]), max_new_tokens=2)
    for _ in events:
        assert torch.get_num_threads() == before  # the caller's threads between events
    assert seen == [cpus, cpus]
    monkeypatch.setenv("DECODEKIT_THREADS", "many")
    with pytest.raises(dk.ParameterError, match="DECODEKIT_THREADS='many' is invalid"):
        dk.generate(model, [[1, 2]], max_new_tokens=1)
