"""The engine: one decode loop under every strategy. Each bug found at a seam between the four loops
it replaces is a test here, and a strategy that breaks the rules is named."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from decodekit_beam.search import beam_search
from decodekit_hf.processor import as_logits_processor

import decodekit as dk
from decodekit.engine import sample_steps
from decodekit.params import NoParams
from decodekit.testing.tiny_lm import TinyLM


@pytest.fixture(scope="module")
def shakespeare() -> Any:
    return dk.load_model("tiny-shakespeare")


def test_beam_search_goes_past_the_context_with_an_evicting_cache(shakespeare: Any) -> None:
    """It raised ContextLengthError recommending the very cache it was given."""
    out = beam_search(shakespeare, ["ROMEO:"], num_beams=2, max_new_tokens=300, cache='window(size="auto")')
    assert len(out.tokens[0]) == 300 > shakespeare.spec.max_positions


def test_speculative_decoding_goes_past_the_context_with_an_evicting_cache(shakespeare: Any) -> None:
    """It failed with "exceeds the model's context ... --cache none", and --cache none was refused."""
    options: dict[str, Any] = {"chain": "greedy", "max_new_tokens": 300, "cache": 'window(size="auto")'}
    out = dk.decode(shakespeare, ["ROMEO:"], strategy="speculative(draft=ngram, k=4)", **options)
    assert out.tokens == dk.generate(shakespeare, ["ROMEO:"], **options).tokens
    assert len(out.tokens[0]) == 300


def test_speculative_k_beyond_what_the_window_takes_back_is_refused_up_front(shakespeare: Any) -> None:
    """It died mid-run with "WindowCache.crop: n=32 is invalid", losing the output."""
    with pytest.raises(dk.ParameterError, match=r"k=20 is invalid with cache window.*at most 16.*k <= 15.*slack"):
        options: dict[str, Any] = {"max_new_tokens": 300, "cache": 'window(size="auto")'}
        dk.decode(shakespeare, ["ROMEO:"], strategy="speculative(draft=ngram, k=20)", **options)


def _flat() -> TinyLM:
    """A model whose every logit is 0: every token ties for the maximum."""
    model = TinyLM(64)
    with torch.no_grad():
        model.head.weight.zero_()
    return model


def test_tied_maxima_pick_the_same_token_under_every_strategy() -> None:
    """`top_k(2) | greedy` over 64 tied maxima: [0, 0, 0, 0] from generate, a NumericsError from speculative."""
    options: dict[str, Any] = {"chain": "top_k(2) | greedy", "max_new_tokens": 4}
    assert dk.generate(_flat(), [[1, 2]], **options).tokens == [[0, 0, 0, 0]]
    assert dk.decode(_flat(), [[1, 2]], strategy="speculative(draft=ngram)", **options).tokens == [[0, 0, 0, 0]]


def test_the_transformers_bridge_keeps_tied_maxima() -> None:
    """`top_k(1)` over 20 tied maxima raised "every token was removed by the chain"."""
    scores = torch.zeros(1, 50)
    scores[0, 10:30] = 1.0
    processed = as_logits_processor("top_k(1)")(torch.tensor([[1, 2]]), scores)
    assert torch.isfinite(processed[0, 10:30]).all() and torch.isneginf(processed[0, :10]).all()
    assert int(processed.argmax()) == dk.Chain.parse("top_k(1) | greedy")(scores, dk.DecodeContext(torch.tensor([[1]])))


def test_speculative_decoding_streams_and_reports_logprobs(shakespeare: Any) -> None:
    """Speculative decoding refused logprobs and had no stream."""
    options: dict[str, Any] = {"chain": "greedy", "max_new_tokens": 20, "logprobs": 2}
    out = dk.decode(shakespeare, ["ROMEO:", "JULIET:"], strategy="speculative(draft=ngram)", **options)
    ref = dk.generate(shakespeare, ["ROMEO:", "JULIET:"], **options)
    assert out.tokens == ref.tokens and out.logprobs is not None and ref.logprobs is not None
    for mine, theirs in zip(out.logprobs, ref.logprobs):
        for a, b in zip(mine, theirs):  # the target's distribution at each emitted token
            assert a.processed == pytest.approx(b.processed, abs=1e-4) and a.raw == pytest.approx(b.raw, abs=1e-4)
            assert [t for t, _ in a.processed_top] == [t for t, _ in b.processed_top]
    stream = dk.stream(shakespeare, ["ROMEO:", "JULIET:"], strategy="speculative(draft=ngram)", **options)
    rows: list[list[int]] = [[], []]
    for event in stream:
        rows[event.row].append(event.token)
    assert rows == out.tokens and stream.result is not None and stream.result.tokens == out.tokens


# -- a strategy that breaks the rules is named ---------------------------------------------


def _register(name: str, policy: Any) -> Any:
    class Plugin:
        @dk.hookimpl
        def register_strategies(self, register: Any) -> None:
            register(name, policy, NoParams, description="a test strategy")

    plugin = Plugin()
    dk.register_plugin(plugin, name=f"plugin-{name}")
    return plugin


def _one_row_only(d: dk.Decoding, params: NoParams) -> None:
    d.open()
    while not d.emit(0, 1):
        pass


def _bad_id(token: int) -> Any:
    def policy(d: dk.Decoding, params: NoParams) -> None:
        d.open()
        d.emit(0, token)

    return policy


def _too_many(d: dk.Decoding, params: NoParams) -> None:
    d.open()
    for _ in range(100):
        d.emit(0, 1)


def _returns_a_generation(d: dk.Decoding, params: NoParams) -> dk.Generation:
    return dk.Generation(tokens=[[1]], finish_reasons=["banana"], prompt_tokens=[[1]])  # type: ignore[list-item]


def _never_opens(d: dk.Decoding, params: NoParams) -> Iterator[None]:
    yield


def _emits_before_opening(d: dk.Decoding, params: NoParams) -> None:
    d.emit(0, 1)


def _prefills_before_opening(d: dk.Decoding, params: NoParams) -> Iterator[None]:
    d.prefill()  # a generator: it runs at the first event
    yield


def _reorders_to_fewer_rows(d: dk.Decoding, params: NoParams) -> Iterator[None]:
    d.open(copies=2)
    d.reorder([0])
    yield from sample_steps(d)


def _forwards_twice_a_step(d: dk.Decoding, params: NoParams) -> Iterator[None]:
    d.open()
    logits = d.prefill()
    while True:
        d.advance(d.pick(logits))
        yield
        if d.done:
            return
        d.forward()  # a first draft's slip: the cache is fed the same column twice
        logits = d.forward()


def _prefills_twice(d: dk.Decoding, params: NoParams) -> Iterator[None]:
    d.open()
    d.prefill()
    return sample_steps(d)


def _runs_past_max_new_tokens(d: dk.Decoding, params: NoParams) -> None:
    d.open()
    logits = d.prefill()
    for _ in range(d.request.max_new_tokens + 5):  # ignores d.done: advance emits nothing on ended rows
        d.advance(d.pick(logits))
        logits = d.forward()


@pytest.mark.parametrize(
    ("policy", "prompts", "message"),
    [
        (_forwards_twice_a_step, [[1]], r"strategy rogue: forward\(\) would feed column 1 again \(the last prefill"),
        (_prefills_twice, [[1]], r"strategy rogue: prefill\(\) called twice; allowed: one prefill"),
        (
            _runs_past_max_new_tokens,
            [[1]],
            r"strategy rogue: forward\(\) would feed column 4, past the decoding's 4 columns \(the prompts' 1 \+",
        ),
        (_one_row_only, [[1], [2]], r"strategy rogue: returned with row 1 unfinished after 0 tokens"),
        (_bad_id(999), [[1]], r"strategy rogue: emitted token 999; allowed: an int in \[0, 64\)"),
        (_bad_id(-1), [[1]], r"strategy rogue: emitted token -1"),
        (_too_many, [[1]], r"strategy rogue: emitted token 1 on row 0, which had already ended \(length after 3"),
        (_returns_a_generation, [[1]], r"strategy rogue: returned a Generation; allowed: a policy over the engine"),
        (_never_opens, [[1]], r"strategy rogue: returned without opening its decoding"),
        (_emits_before_opening, [[1]], r"strategy rogue: used decoding.outputs before decoding.open\(\), which sets"),
        (_prefills_before_opening, [[1]], r"strategy rogue: used decoding.kv before decoding.open\(\)"),
        (_reorders_to_fewer_rows, [[1]], r"strategy rogue: reorder\(\[0\]\) is invalid; allowed: 2 row indices"),
    ],
)
def test_decode_holds_a_strategy_to_the_rules(policy: Any, prompts: list[list[int]], message: str) -> None:
    """`dk.decode` checked nothing a strategy returned: one row for two prompts, ids 999 and -1, 100 tokens
    for max_new_tokens=3, finish_reason="banana"."""
    plugin = _register("rogue", policy)
    try:
        with pytest.raises(dk.PluginError, match=message):
            dk.decode(TinyLM(64), prompts, strategy="rogue", max_new_tokens=3)
    finally:
        dk.unregister_plugin(plugin)


class EndsAfter:
    """A processor that leaves the logits alone and ends a row once it has `n` tokens (as a grammar
    that is complete would)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __call__(self, logits: torch.Tensor, ctx: dk.DecodeContext) -> torch.Tensor:
        return logits

    def ends_row(self, row: int, generated: Any) -> str | None:
        return f"after-{self.n}" if len(generated) >= self.n else None


@pytest.mark.parametrize("strategy", ["sample", "speculative(draft=ngram)", "beam(num_beams=2)"])
def test_a_stage_can_end_a_row_under_every_strategy(strategy: str) -> None:
    chain = dk.Chain([EndsAfter(3)], selector=dk.create("greedy"))
    out = dk.decode(TinyLM(64), [[1, 2], [3]], strategy=strategy, chain=chain, max_new_tokens=10)
    assert [len(t) for t in out.tokens] == [3, 3]
    assert out.finish_reasons == ["stop", "stop"] and out.stopped_by == ["after-3", "after-3"]
    events = list(dk.stream(TinyLM(64), [[1, 2], [3]], strategy=strategy, chain=chain, max_new_tokens=10))
    ends = sorted((e.row, e.step, e.finish_reason, e.stopped_by) for e in events if e.finish_reason)
    assert ends == [(0, 2, "stop", "after-3"), (1, 2, "stop", "after-3")]


def test_rows_that_cannot_fit_in_memory_are_refused_before_any_allocation(monkeypatch: pytest.MonkeyPatch) -> None:
    """num_beams=2**20 ran ~55 s and then failed a huge allocation: the rows are sized first (here against 256
    KiB). A row takes 2048 bytes, 16 a history column and 8 a vocabulary entry: 2048 + 16·2 + 8·40 = 2400."""
    monkeypatch.setattr("decodekit.engine.device_memory", lambda device: 2**18)
    with pytest.raises(dk.ParameterError) as info:
        dk.decode(TinyLM(40), [[1, 2], [3]], strategy="beam", num_beams=64, max_new_tokens=0)
    assert str(info.value) == (
        "strategy beam: num_beams=64 is invalid: its 128 rows of 2 tokens would take at least 0.0 GiB, more than "
        "the 0.0 GiB of memory of device cpu; allowed: num_beams <= 54 here"  # 2**18 // 2400 // 2 prompts
    )
    with pytest.raises(dk.ParameterError) as info:
        dk.generate(TinyLM(40), [[1]] * 110, max_new_tokens=4)  # 2048 + 16·5 + 320 = 2448 bytes a row
    assert str(info.value) == (
        "strategy sample: batch size=110 is invalid: its 110 rows of 5 tokens would take at least 0.0 GiB, more "
        "than the 0.0 GiB of memory of device cpu; allowed: batch size <= 107 here"
    )
    assert len(dk.generate(TinyLM(40), [[1]] * 107, max_new_tokens=4).tokens) == 107


def test_prompt_logprobs_count_the_prefill_s_logits_in_a_row_s_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """Scoring keeps a prefill's logits of every prompt column (float32: 4 bytes a vocabulary entry), which a batch
    of long prompts may not fit where its rows alone would: 2048 + 16·61 + (8 + 4·60)·40 = 12,944 bytes a row, where
    without them 2048 + 976 + 320 = 3,344 (30 rows: 100,320 bytes, within 256 KiB)."""
    monkeypatch.setattr("decodekit.engine.device_memory", lambda device: 2**18)
    prompts = [[1] * 60] * 30
    assert len(dk.generate(TinyLM(40), prompts, max_new_tokens=1).tokens) == 30
    with pytest.raises(dk.ParameterError) as info:
        dk.generate(TinyLM(40), prompts, max_new_tokens=1, prompt_logprobs=0)
    assert str(info.value) == (
        "strategy sample: batch size=30 is invalid: its 30 rows of 61 tokens and the logits of 60 prompt columns "
        "(prompt_logprobs) would take at least 0.0 GiB, more than the 0.0 GiB of memory of device cpu; allowed: "
        "batch size <= 20 here"  # 2**18 // 12,944
    )
    assert dk.generate(TinyLM(40), prompts[:20], max_new_tokens=1, prompt_logprobs=0).prompt_logprobs is not None


_CAPPED_ALLOCATION = """
import resource
import decodekit as dk
from decodekit.testing.tiny_lm import TinyLM

model = TinyLM(max_positions=4096)
size = int(next(line for line in open("/proc/self/status") if line.startswith("VmSize")).split()[1]) * 1024
resource.setrlimit(resource.RLIMIT_AS, (size + 2**30, size + 2**30))  # 1 GiB more than this process maps now
try:
    dk.generate(model, [[1, 2, 3]] * 2048, max_new_tokens=4000, cache="dense", seed=0)
except dk.ParameterError as exc:
    print(exc)
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="the address space is read from Linux's /proc")
def test_a_cache_the_device_cannot_allocate_now_is_a_parameter_error_naming_it() -> None:
    """A cache that fits the device's memory in all but not what is free: torch's allocator raised a RuntimeError
    (the CLI's "unexpected RuntimeError"; a batch job stopped at that line, --on-error skip or not). 2,048 rows of
    4,003 slots, 2 heads of keys (and values) 8 wide in float32: 0.5 GiB a buffer, 4 of them past the 1 GiB left."""
    done = subprocess.run([sys.executable, "-c", _CAPPED_ALLOCATION], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("cache 'dense': 2,048 rows of 4,0"), done.stdout
    assert "slots are invalid: device cpu could not allocate them (" in done.stdout
    assert done.stdout.rstrip().endswith(
        "allowed: fewer rows (prompts, samples or beams) or tokens, or a cache that stores less (int8, window)"
    )


@pytest.mark.parametrize("strategy", ["sample", "beam", "speculative"])
def test_stream_refuses_rows_that_cannot_fit_when_it_is_called(monkeypatch: pytest.MonkeyPatch, strategy: str) -> None:
    """dk.stream with num_beams=64 (or 110 prompts) returned a stream, and the row check raised only when the
    first event was asked for: the policy opens its decoding when stream() is called. 2048 + 16·5 + 320 = 2448."""
    monkeypatch.setattr("decodekit.engine.device_memory", lambda device: 2**18)
    option = {"num_beams": 64} if strategy == "beam" else {}
    prompts = [[1], [2]] if strategy == "beam" else [[1]] * 110
    with pytest.raises(dk.ParameterError, match=rf"^strategy {strategy}: (num_beams=64|batch size=110) is invalid"):
        dk.stream(TinyLM(40), prompts, strategy=strategy, max_new_tokens=4, **option)
    monkeypatch.undo()  # the whole memory: the stream runs as decode does
    events = dk.stream(TinyLM(40), [[1]] * 2, strategy=strategy, max_new_tokens=4, seed=0, **option)
    generated = dk.decode(TinyLM(40), [[1]] * 2, strategy=strategy, max_new_tokens=4, seed=0, **option)
    assert [e.token for e in events if e.row == 0] == generated.tokens[0]
    assert events.result == generated


def test_validate_stops_a_policy_that_calls_its_model_directly() -> None:
    """A policy may call `d.model` itself rather than through `prefill`/`forward`/`runs`: `dk.validate` ran
    that model for real (and, were the policy to loop on it, decoded the whole request)."""
    calls: list[str] = []

    class Counted(TinyLM):
        def forward(self, *args: Any, **kwargs: Any) -> torch.Tensor:
            calls.append("forward")
            return super().forward(*args, **kwargs)

    def policy(d: dk.Decoding, params: NoParams) -> None:
        d.open()
        assert d.model.spec.vocab_size == 64  # what a policy reads of its model still reads through
        d.model(d.buf[:, : d.width], d.positions[:, : d.width], d.kv)
        d.model.forward(d.buf[:, : d.width], d.positions[:, : d.width], d.kv)  # type: ignore[attr-defined]  # a Counted
        raise AssertionError("the policy ran on past its first model call")

    plugin = _register("direct", policy)
    try:
        request = dk.validate(Counted(64), [[1, 2]], strategy="direct", max_new_tokens=3)
    finally:
        dk.unregister_plugin(plugin)
    assert request.max_new_tokens == 3 and calls == []


def test_past_the_context_the_hint_names_a_cache_that_takes_this_model_further() -> None:
    from decodekit_gpt.gpt import GPT, GPTConfig

    def hint(model: Any) -> str:
        with pytest.raises(dk.ContextLengthError) as info:
            dk.generate(model, [[1, 2]], max_new_tokens=40, cache="gqa")
        return str(info.value)

    torch.manual_seed(0)
    rotary = GPT(GPTConfig(vocab_size=101, block_size=16, n_layer=2, n_head=4, n_embd=32, position="rope")).eval()
    assert "use a cache that evicts (cache='window(size=N)')" in hint(rotary)  # "auto" needs a calibration
    assert dk.generate(rotary, [[1, 2]], max_new_tokens=40, cache="window(size=8)").finish_reasons == ["length"]
    rotary.attention_windows = (8, 8)
    assert "use a cache that evicts (cache='window(size=\"auto\")')" in hint(rotary)
    assert dk.generate(rotary, [[1, 2]], max_new_tokens=40, cache='window(size="auto")').finish_reasons == ["length"]
    learned = GPT(GPTConfig(vocab_size=101, block_size=16, n_layer=2, n_head=4, n_embd=32)).eval()
    assert "evicts" not in hint(learned)  # an evicting cache is refused for absolute positions
    with pytest.raises(dk.ContextLengthError, match="its positions are absolute"):
        dk.generate(learned, [[1, 2]], max_new_tokens=40, cache="window(size=8)")


class _ReachGrowsWithTheText(dk.PreallocatedKVCache):
    """An evicting cache's first draft: its reach counts every token, as a cache that keeps all would."""

    def reach(self, new: int) -> int:
        return self.length + new


def test_a_reach_past_the_context_names_the_call_and_the_text() -> None:
    """Before, the refusal said only "a query would attend across 70 positions": a plugin's author could not tell
    that the engine had asked their cache's reach about the whole text."""
    message = r"reach\(70\) = 70 for the prompt of 6 tokens \+ max_new_tokens=64 = 70 tokens: a query would attend"
    with pytest.raises(dk.ContextLengthError, match=message):
        dk.generate(TinyLM(64), [[1] * 6], cache=_ReachGrowsWithTheText, max_new_tokens=64)
