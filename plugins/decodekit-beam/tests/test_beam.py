"""Beam search: hand-worked cases on a lookup-table model, greedy parity, HF parity, strategies."""

from __future__ import annotations

import importlib
import math
from collections.abc import Sequence
from typing import Any

import pytest
import torch
from decodekit_beam.search import BeamGeneration, beam_search
from pydantic import Field

import decodekit as dk
from decodekit.cache import KVCache, PreallocatedKVCache
from tinymodels import CharTokenizer, left_padded, tiny_gpt

PROMPTS = [[5, 17, 3, 9, 44, 2], [7, 8], [90, 1, 33]]

# The lookup-table model's vocabulary: EOS, content tokens, and one start token per hand-worked tree.
EOS, A, B, C, D, E, X, Y, Z, S1, S2, S3 = range(12)

# Next-token probabilities keyed by the whole history (prompt + generated); unlisted histories
# (beams extended with a zero-probability token) get a uniform distribution.
TABLE: dict[tuple[int, ...], dict[int, float]] = {
    # S1, 2 new tokens: greedy takes A (.6) then X (.4): A·X = .24. Beam search (2 beams) also
    # keeps B (.4), whose best continuation X (.9) gives B·X = .36 > A·X = .24.
    (S1,): {A: 0.6, B: 0.4},
    (S1, A): {X: 0.4, Y: 0.35, Z: 0.25},
    (S1, B): {X: 0.9, Y: 0.1},
    # S2, 3 new tokens, stop at EOS: finished hypotheses and their sums of log-probs
    #   [EOS] .4 -> -0.916;  [A, EOS] .6·.2 = .12 -> -2.120;
    #   [A, B, EOS] .6·.8·.7 = .336 -> -1.091;  [A, B, C] .6·.8·.3 = .144 -> -1.938.
    # length_penalty 0 (raw sums): [EOS] wins. length_penalty 1 (per token):
    #   [EOS] -0.916, [A, EOS] -1.060, [A, B, EOS] -0.364, [A, B, C] -0.646: [A, B, EOS] wins.
    # early_stopping=True stops after step 1, when [EOS] and [A, EOS] fill both slots: [EOS] wins.
    (S2,): {A: 0.6, EOS: 0.4},
    (S2, A): {B: 0.8, EOS: 0.2},
    (S2, A, B): {EOS: 0.7, C: 0.3},
    # S3, 4 new tokens, stop at EOS, length_penalty 1:
    #   step 0: [EOS] .5 finishes (-0.693); A (.32) and C (.18) run.
    #   step 1: [A, EOS] .192 finishes (-1.650 / 2 = -0.825); C·D (.18) and A·B (.128) run.
    #     Both slots are full. False: the best running beam at its current length, -1.715 / 2 = -0.857,
    #     cannot beat the worst kept -0.825: stop, [EOS] wins. True: full, stop. "never": at the
    #     longest length, -1.715 / 4 = -0.429 > -0.825: go on.
    #   step 2: [A, B, EOS] .128 finishes (-2.056 / 3 = -0.685) and evicts [A, EOS].
    #   step 3: [C, D, E, EOS] .18 finishes (-1.715 / 4 = -0.429) and wins.
    (S3,): {EOS: 0.5, A: 0.32, C: 0.18},
    (S3, A): {EOS: 0.6, B: 0.4},
    (S3, C): {D: 1.0},
    (S3, C, D): {E: 1.0},
    (S3, A, B): {EOS: 1.0},
    (S3, C, D, E): {EOS: 1.0},
}


class TableModel:
    """A model protocol implementation whose next-token distribution is `TABLE[history]`.

    It writes (token, position) pairs to the KV cache as keys and reads the history back from
    what the cache returns, so a cache that does not follow the beams gives other histories.
    """

    spec = dk.ModelSpec(n_layers=1, n_heads=1, n_kv_heads=1, head_dim=2, vocab_size=12, max_positions=32)

    def __call__(self, input_ids: torch.Tensor, positions: torch.Tensor, cache: KVCache | None) -> torch.Tensor:
        kv = torch.stack([input_ids, positions], -1).float()[:, None]  # [B, 1, T, 2]: (token, position)
        if cache is not None:
            kv, _ = cache.update(0, kv, kv)  # [B, 1, S, 2]: every slot the cache holds
        Bsz, T = input_ids.shape
        S = kv.shape[2]
        logits = torch.zeros(Bsz, T, self.spec.vocab_size)
        for b in range(Bsz):
            for i in range(T):
                slots = kv[b, 0, : S - T + i + 1].tolist()
                history = tuple(int(tok) for tok, pos in slots if pos >= 0)  # padding has negative positions
                probs = TABLE.get(history)
                if probs is not None:  # log-probabilities, -inf for the tokens it does not list
                    logits[b, i] = float("-inf")
                    for token, p in probs.items():
                        logits[b, i, token] = math.log(p)
        return logits


def _lp(*probs: float) -> float:
    return sum(math.log(p) for p in probs)


@pytest.mark.parametrize("cache", ["dense", "gqa", "none"])
def test_beam_finds_the_sequence_greedy_misses(cache: str) -> None:
    m = TableModel()
    greedy = dk.generate(m, [[S1]], chain=dk.Chain([], selector=_argmax), max_new_tokens=2, cache=cache)
    assert greedy.tokens == [[A, X]]
    out = beam_search(m, [[S1]], num_beams=2, max_new_tokens=2, num_return_sequences=2, cache=cache)
    assert out.tokens == [[B, X]] and out.finish_reasons == ["length"]
    assert out.sequences == [[[B, X], [A, X]]]
    assert out.scores[0] == pytest.approx([_lp(0.4, 0.9) / 2, _lp(0.6, 0.4) / 2], abs=1e-6)


def test_the_table_model_catches_a_cache_that_does_not_follow_the_beams(monkeypatch: pytest.MonkeyPatch) -> None:
    """S3 swaps its beams at step 1 (C·D came from beam 1, A·B from beam 0): without reorder it goes wrong."""
    options: dict[str, Any] = {"num_beams": 2, "max_new_tokens": 4, "early_stopping": "never", "stop_tokens": [EOS]}
    assert beam_search(TableModel(), [[S3]], **options).tokens == [[C, D, E, EOS]]
    monkeypatch.setattr(PreallocatedKVCache, "reorder", lambda self, index: None)
    assert beam_search(TableModel(), [[S3]], **options).tokens != [[C, D, E, EOS]]


@pytest.mark.parametrize(
    ("length_penalty", "early_stopping", "expected", "probs"),
    [
        (1.0, False, [[A, B, EOS], [A, B, C]], [(0.6, 0.8, 0.7), (0.6, 0.8, 0.3)]),
        (0.0, False, [[EOS], [A, B, EOS]], [(0.4,), (0.6, 0.8, 0.7)]),
        (1.0, True, [[EOS], [A, EOS]], [(0.4,), (0.6, 0.2)]),
        (1.0, "never", [[A, B, EOS], [A, B, C]], [(0.6, 0.8, 0.7), (0.6, 0.8, 0.3)]),
    ],
)
def test_length_penalty_and_early_stopping_pick_the_hand_worked_winner(
    length_penalty: float, early_stopping: bool | str, expected: list[list[int]], probs: list[tuple[float, ...]]
) -> None:
    out = beam_search(
        TableModel(),
        [[S2]],
        num_beams=2,
        max_new_tokens=3,
        length_penalty=length_penalty,
        early_stopping=early_stopping,  # type: ignore[arg-type]
        num_return_sequences=2,
        stop_tokens=[EOS],
    )
    assert out.sequences == [expected]
    assert out.scores[0] == pytest.approx([_lp(*p) / len(p) ** length_penalty for p in probs], abs=1e-6)
    assert out.finish_reasons == ["stop"] and out.stopped_by == [EOS]


@pytest.mark.parametrize(
    ("early_stopping", "expected", "probs"),
    [
        (False, [[EOS], [A, EOS]], [(0.5,), (0.32, 0.6)]),
        (True, [[EOS], [A, EOS]], [(0.5,), (0.32, 0.6)]),
        ("never", [[C, D, E, EOS], [A, B, EOS]], [(0.18, 1.0, 1.0, 1.0), (0.32, 0.4, 1.0)]),
    ],
)
def test_early_stopping_false_stops_where_never_goes_on(
    early_stopping: bool | str, expected: list[list[int]], probs: list[tuple[float, ...]]
) -> None:
    out = beam_search(
        TableModel(),
        [[S3]],
        num_beams=2,
        max_new_tokens=4,
        early_stopping=early_stopping,  # type: ignore[arg-type]
        num_return_sequences=2,
        stop_tokens=[EOS],
    )
    assert out.sequences == [expected]
    assert out.scores[0] == pytest.approx([_lp(*p) / len(p) for p in probs], abs=1e-6)


def _argmax(logits: torch.Tensor, ctx: dk.DecodeContext) -> torch.Tensor:
    return logits.argmax(-1)


@pytest.mark.parametrize(
    ("cache", "length_penalty", "early_stopping"),
    [("none", 1.0, False), ("dense", 1.0, False), ("gqa", 1.0, False), ("dense", 2.0, "never"), ("dense", 2.0, False)],
)
def test_one_beam_is_greedy(cache: str, length_penalty: float, early_stopping: Any) -> None:
    """transformers runs greedy search for num_beams=1: a row ends at the first stop token it picks. With a length
    penalty > 0 and early_stopping "never" (or False), one beam went on past it with its second-best token, as a
    search of several beams does, and ended elsewhere (found by the HF bridge's fuzz)."""
    model = tiny_gpt(2)
    greedy = dk.Chain([], selector=_argmax)
    free = dk.generate(model, PROMPTS, chain=greedy, max_new_tokens=12, cache=cache)
    stop = free.tokens[0][4]
    ref = dk.generate(model, PROMPTS, chain=greedy, max_new_tokens=12, cache=cache, stop_tokens=[stop])
    options = dict(length_penalty=length_penalty, early_stopping=early_stopping)
    out = beam_search(model, PROMPTS, num_beams=1, max_new_tokens=12, cache=cache, stop_tokens=[stop], **options)
    assert out.tokens == ref.tokens
    assert out.finish_reasons == ref.finish_reasons
    assert out.finish_reasons[0] == "stop"


def test_ragged_rows_equal_searching_each_row_alone() -> None:
    m = tiny_gpt(2)
    batch = beam_search(m, PROMPTS, num_beams=3, max_new_tokens=10, num_return_sequences=3)
    for b, prompt in enumerate(PROMPTS):
        alone = beam_search(m, [prompt], num_beams=3, max_new_tokens=10, num_return_sequences=3)
        assert alone.sequences[0] == batch.sequences[b]
        assert alone.scores[0] == pytest.approx(batch.scores[b], abs=1e-5)


def test_processors_run_on_log_probs_and_the_selector_is_ignored() -> None:
    """Without X, S1's candidates are A·Y .21, A·Z .15, B·Y .04: the two best are both after A.

    The processor's output is not renormalised (as in HF): A·Y scores log(.6 · .35) / 2.
    """

    def no_x(logits: torch.Tensor, ctx: dk.DecodeContext) -> torch.Tensor:
        assert torch.allclose(logits.exp().sum(-1), torch.ones(logits.shape[0]))  # log-probabilities come in
        return logits.index_fill(1, torch.tensor([X]), float("-inf"))

    def never(logits: torch.Tensor, ctx: dk.DecodeContext) -> torch.Tensor:
        raise AssertionError("beam search called the selector")

    chain = dk.Chain([no_x], selector=never)
    out = beam_search(TableModel(), [[S1]], num_beams=2, max_new_tokens=2, num_return_sequences=2, chain=chain)
    assert out.sequences == [[[A, Y], [A, Z]]]
    assert out.scores[0] == pytest.approx([_lp(0.6, 0.35) / 2, _lp(0.6, 0.25) / 2], abs=1e-6)


def _hf_gpt2(eos: int) -> Any:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        vocab_size=100,
        n_positions=64,
        n_embd=32,
        n_layer=2,
        n_head=4,
        bos_token_id=eos,
        eos_token_id=eos,
        pad_token_id=0,
        initializer_range=0.5,  # peaked distributions, so beams are far from ties
    )
    return transformers.GPT2LMHeadModel(config).eval()


class HFAdapter:
    """A transformers causal LM behind the model protocol, recomputing the whole context (cache="none")."""

    def __init__(self, hf: Any) -> None:
        self.hf = hf
        c = hf.config
        self.spec = dk.ModelSpec(c.n_layer, c.n_head, c.n_head, c.n_embd // c.n_head, c.vocab_size, c.n_positions)

    def __call__(self, input_ids: torch.Tensor, positions: torch.Tensor, cache: KVCache | None) -> torch.Tensor:
        assert cache is None
        mask = (positions >= 0).long()  # left padding: negative positions
        logits: torch.Tensor = self.hf(
            input_ids=input_ids, attention_mask=mask, position_ids=positions.clamp(min=0)
        ).logits
        return logits


@pytest.mark.slow
def test_matches_transformers_beam_search() -> None:
    eos = 58  # a token this random model often predicts, so some hypotheses end with it
    hf = _hf_gpt2(eos)
    prompts = [[5, 17, 3, 9, 44, 2], [90, 1, 33], [11, 12, 13, 14]]
    ids, mask = left_padded(prompts)
    P = ids.shape[1]
    reasons: set[str] = set()
    for length_penalty, early_stopping in [(1.0, False), (0.5, True), (2.0, "never")]:
        with torch.no_grad():
            ref = hf.generate(
                ids,
                attention_mask=mask,
                num_beams=4,
                do_sample=False,
                max_new_tokens=16,
                length_penalty=length_penalty,
                early_stopping=early_stopping,
                num_return_sequences=2,
                use_cache=False,
                output_scores=True,
                return_dict_in_generate=True,
            )
            out = beam_search(
                HFAdapter(hf),
                prompts,
                num_beams=4,
                max_new_tokens=16,
                length_penalty=length_penalty,
                early_stopping=early_stopping,  # type: ignore[arg-type]
                num_return_sequences=2,
                cache="none",
                stop_tokens=[eos],
            )
        expected = [_cut_at(row, eos) for row in ref.sequences[:, P:].tolist()]
        assert [s for seqs in out.sequences for s in seqs] == expected, (length_penalty, early_stopping)
        assert [s for sc in out.scores for s in sc] == pytest.approx(ref.sequences_scores.tolist(), rel=1e-5)
        reasons.update(out.finish_reasons)
    assert reasons == {"stop", "length"}  # both ways of finishing were exercised


def _cut_at(row: Sequence[int], eos: int) -> list[int]:
    """HF pads a sequence after its EOS; ours ends at it."""
    return list(row[: row.index(eos) + 1]) if eos in row else list(row)


@pytest.mark.parametrize("extra", [False, True])
def test_decode_dispatches_to_the_registered_strategy(extra: bool) -> None:
    """With a strategy plugin of its own installed (`echo`, between cfg and sample) the unknown name's message once
    failed the regex "installed: beam, cfg, sample": it assumed the repository's strategies were all installed."""
    plugin = EchoPlugin()
    if extra:
        dk.register_plugin(plugin, name="echo-plugin")
    try:
        _dispatches()
    finally:
        if extra:
            dk.unregister_plugin(plugin)


def _dispatches() -> None:
    m = tiny_gpt(2)
    beam = dk.decode(m, PROMPTS, strategy="beam", num_beams=2, max_new_tokens=6)
    assert isinstance(beam, BeamGeneration)
    assert beam.tokens == beam_search(m, PROMPTS, num_beams=2, max_new_tokens=6).tokens
    sample = dk.decode(m, PROMPTS, max_new_tokens=6, seed=1)  # "sample" is the default
    assert sample.tokens == dk.generate(m, PROMPTS, max_new_tokens=6, seed=1).tokens
    registry = dk.get_registry()
    assert registry.plugins["decodekit"].strategies == ["sample"]
    assert registry.plugins["decodekit-beam"].strategies == ["beam"]
    installed = ", ".join(sorted(registry.strategies))  # whatever else is installed beside the repository's
    assert {"beam", "sample"} <= set(registry.strategies)
    with pytest.raises(dk.UnknownNameError) as unknown:
        dk.decode(m, PROMPTS, strategy="beem")
    assert str(unknown.value).startswith(f"unknown strategy 'beem'; installed: {installed}; did you mean 'beam'?")


class EchoParams(dk.Params):
    times: int = Field(default=1, ge=1)


def _echo(d: dk.Decoding, params: EchoParams) -> None:
    """A custom strategy: "generates" each prompt again, each token `times` over, until the row ends."""
    d.open()
    for row, prompt in enumerate(d.prompts):
        i = 0
        while not d.emit(row, prompt[i // params.times % len(prompt)]):
            i += 1


class EchoPlugin:
    @dk.hookimpl
    def register_strategies(self, register: Any) -> None:
        register("echo", _echo, EchoParams, description="repeats the prompt")


class BeamAgainPlugin:
    @dk.hookimpl
    def register_strategies(self, register: Any) -> None:
        register("beam", "decodekit_beam.search:beam_policy", description="a second beam")


def test_a_plugin_adds_a_strategy_by_name() -> None:
    plugin = EchoPlugin()
    dk.register_plugin(plugin, name="echo-plugin")
    try:
        out = dk.decode(tiny_gpt(2), [[1, 2], [3]], strategy="echo", times=2, max_new_tokens=6)
        assert out.tokens == [[1, 1, 2, 2, 1, 1], [3] * 6] and out.finish_reasons == ["length", "length"]
        assert dk.decode(tiny_gpt(2), [[1, 2], [3]], strategy="echo(3)", max_new_tokens=3).tokens == [[1] * 3, [3] * 3]
        with pytest.raises(dk.ParameterError, match=r"strategy echo: times=0 is invalid.*1 <= times"):
            dk.decode(tiny_gpt(2), [[1]], strategy="echo", times=0)
        with pytest.raises(dk.ParameterError, match="unknown parameter tims=2; allowed parameters: times, chain"):
            dk.decode(tiny_gpt(2), [[1]], strategy="echo", tims=2)
        with pytest.raises(dk.ParameterError, match="prompts: row 0: token id 1000 is invalid"):
            dk.decode(tiny_gpt(2), [[1000]], strategy="echo")
        registry = dk.get_registry()
        assert registry.strategies["echo"].distribution == "echo-plugin"
        assert registry.plugins["echo-plugin"].strategies == ["echo"]
    finally:
        dk.unregister_plugin(plugin)
    assert "echo" not in dk.get_registry().strategies


def test_two_plugins_registering_one_strategy_name_is_an_error_naming_both() -> None:
    plugin = BeamAgainPlugin()
    try:
        with pytest.raises(
            dk.PluginError, match="'beam' is registered by 2 distributions: decodekit-beam and beam-again"
        ):
            dk.register_plugin(plugin, name="beam-again")
    finally:
        dk.unregister_plugin(plugin)
    assert dk.get_registry().strategies["beam"].distribution == "decodekit-beam"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"num_beams": 0}, r"num_beams=0 is invalid: .*; allowed: an integer 1 <= num_beams"),
        ({"num_beams": 2, "num_return_sequences": 3}, r"num_return_sequences=3 .* <= num_beams=2"),
        (
            {"length_penalty": float("inf")},
            r"length_penalty=inf is invalid: .*allowed: a number -10 <= length_penalty <= 10",
        ),
        ({"length_penalty": 700}, r"length_penalty=700 is invalid"),
        ({"length_penalty": float("nan")}, r"length_penalty=nan is invalid"),
        ({"early_stopping": "sometimes"}, r"early_stopping='sometimes' is invalid; allowed: True, False or 'never'"),
        ({"seed": 1.5}, r"seed=1.5 is invalid; allowed: an integer, 0 <= seed < 2\*\*64"),
        ({"cache": None}, r"cache=None is invalid"),
        ({"max_new_tokens": -1}, r"max_new_tokens=-1 is invalid"),
    ],
)
def test_bad_parameters_are_clear_errors(options: dict[str, Any], message: str) -> None:
    with pytest.raises(dk.ParameterError, match=message):
        beam_search(tiny_gpt(2), PROMPTS, **options)


def test_nan_names_step_row_and_beam() -> None:
    def poison(logits: torch.Tensor, ctx: dk.DecodeContext) -> torch.Tensor:
        if ctx.step == 2:
            logits = logits.clone()
            logits[2 * 2 + 1] = float("nan")  # row 2, beam 1
        return logits

    with pytest.raises(dk.NumericsError, match=r"step 2, row 2: .*NaN.*\(beam 1\)"):
        beam_search(tiny_gpt(2), PROMPTS, num_beams=2, max_new_tokens=5, chain=dk.Chain([poison]))


def test_zero_new_tokens() -> None:
    out = beam_search(tiny_gpt(2), PROMPTS, max_new_tokens=0)
    assert out.tokens == [[], [], []] and out.finish_reasons == ["length"] * 3


def test_zero_new_tokens_gives_each_prompt_one_empty_sequence_with_its_text() -> None:
    """A sequence's fields are the row's: an empty text "" where the model has a tokenizer (a scoring line of a beam
    job with -n showed `"text": null`), None without one."""
    text_model = tiny_gpt(2, vocab_size=95)
    text_model.tokenizer = CharTokenizer()  # type: ignore[assignment]
    out = beam_search(text_model, ["To be", "or"], num_beams=3, num_return_sequences=2, max_new_tokens=0, logprobs=1)
    assert out.text == ["", ""] and out.sequences == [[[]], [[]]] and out.scores == [[0.0], [0.0]]
    assert out.sequence_texts == [[""], [""]] and out.sequence_logprobs == [[[]], [[]]]
    assert out.sequence_finish_reasons == [["length"], ["length"]] and out.sequence_stopped_by == [[None], [None]]
    ids = beam_search(tiny_gpt(2), PROMPTS, num_beams=2, num_return_sequences=2, max_new_tokens=0)
    assert ids.text is None and ids.sequence_texts == [[None]] * 3


@pytest.mark.parametrize("stage", ["logit_bias({101: 1.0})", "allowed_tokens([3, 150])"])
def test_zero_new_tokens_refuses_a_chain_past_the_vocabulary_as_sample_does(stage: str) -> None:
    """With no new tokens beam search ran no chain, so took a stage `sample` refuses (ids past the 101 tokens)."""
    model = tiny_gpt(2)
    with pytest.raises(dk.ParameterError) as refused:
        dk.generate(model, PROMPTS, chain=stage, max_new_tokens=0)
    assert "outside the vocabulary of 101 tokens" in str(refused.value)
    with pytest.raises(dk.ParameterError) as info:
        beam_search(model, PROMPTS, chain=stage, max_new_tokens=0)
    assert str(info.value) == str(refused.value)


def test_text_prompts_and_text_without_the_stop_token() -> None:
    text_model = tiny_gpt(2, vocab_size=95)
    text_model.tokenizer = CharTokenizer()  # type: ignore[assignment]
    free = beam_search(text_model, ["To be", "or"], num_beams=3, max_new_tokens=8)
    stop = free.tokens[0][2]
    out = beam_search(text_model, ["To be", "or"], num_beams=3, max_new_tokens=8, stop_tokens=[stop])
    assert out.text is not None
    for tokens, text, reason in zip(out.tokens, out.text, out.finish_reasons):
        kept = tokens[:-1] if reason == "stop" else tokens
        assert text == CharTokenizer().decode(kept)
    assert out.finish_reasons[0] == "stop" or len(out.tokens[0]) == 8


def test_every_returned_hypothesis_has_its_text_finish_reason_and_logprobs() -> None:
    """A caller showing every hypothesis (the command line's -n) gets each one's text, finish reason, stop token and
    logprobs as the best one's row reports them; the best one's equal its row's."""
    text_model = tiny_gpt(2, vocab_size=95)
    text_model.tokenizer = CharTokenizer()  # type: ignore[assignment]
    stop = beam_search(text_model, ["To be"], num_beams=3, max_new_tokens=8).tokens[0][2]
    out = beam_search(
        text_model, ["To be"], num_beams=3, max_new_tokens=8, stop_tokens=[stop], num_return_sequences=3, logprobs=0
    )
    assert out.text is not None and out.logprobs is not None
    assert out.sequence_texts[0][0] == out.text[0] and out.sequence_finish_reasons[0][0] == out.finish_reasons[0]
    assert out.sequence_logprobs[0][0] == out.logprobs[0]
    for tokens, text, reason, by, lps in zip(
        out.sequences[0],
        out.sequence_texts[0],
        out.sequence_finish_reasons[0],
        out.sequence_stopped_by[0],
        out.sequence_logprobs[0],
    ):
        assert (reason, by) == (("stop", stop) if tokens[-1] == stop else ("length", None))
        assert text == CharTokenizer().decode(tokens[:-1] if reason == "stop" else tokens)
        assert lps is not None and len(lps) == len(tokens)
    assert "stop" in out.sequence_finish_reasons[0]  # the stop token ended one at least


def test_dk_generate_stays_the_function_after_beam_search() -> None:
    """The decode loop's module is not named `generate`, so importing it can't hide `dk.generate`."""
    importlib.import_module("decodekit.loop")
    importlib.import_module("decodekit_beam.search")
    assert callable(dk.generate) and dk.generate.__name__ == "generate"


def test_too_many_beams_are_refused_naming_num_beams(monkeypatch: pytest.MonkeyPatch) -> None:
    """num_beams=2**30 was refused by the plugin's own check as "max_new_tokens=64 is invalid ... allowed:
    max_new_tokens <= 0": the engine's row check names num_beams. A row: 2048 + 16·(2 + 64) + 8·101 = 3912 bytes."""
    monkeypatch.setattr("decodekit.engine.device_memory", lambda device: 2**34)
    with pytest.raises(dk.ParameterError) as info:
        dk.decode(tiny_gpt(block_size=128), [[1, 2]], strategy="beam", num_beams=2**30, max_new_tokens=64)
    assert str(info.value) == (
        "strategy beam: num_beams=1073741824 is invalid: its 1,073,741,824 rows of 66 tokens would take at least "
        "3,912.0 GiB, more than the 16.0 GiB of memory of device cpu; allowed: num_beams <= 4,391,582 here"
    )


def test_validate_refuses_too_many_beams_as_decode_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """`dk.validate` opened a 1-row sample decoding, so it accepted num_beams=2**30; it now refuses it with
    `dk.decode`'s message, and a request that fits passes without any model call."""
    monkeypatch.setattr("decodekit.engine.device_memory", lambda device: 2**34)
    model = tiny_gpt(block_size=128)
    with pytest.raises(dk.ParameterError) as info:
        dk.validate(model, [[1, 2]], strategy="beam", num_beams=2**30, max_new_tokens=64)
    assert str(info.value) == (
        "strategy beam: num_beams=1073741824 is invalid: its 1,073,741,824 rows of 66 tokens would take at least "
        "3,912.0 GiB, more than the 16.0 GiB of memory of device cpu; allowed: num_beams <= 4,391,582 here"
    )

    def no_model_calls(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("validate ran the model")

    monkeypatch.setattr(model, "forward", no_model_calls)
    request = dk.validate(model, [[1, 2]], strategy="beam", num_beams=4, max_new_tokens=64)
    assert request.max_new_tokens == 64


def test_scores_that_overflow_are_a_numerics_error() -> None:
    """`exponential_decay` with a factor near float's maximum gives the stop token a "log-probability" of 3.4e38,
    and the beams' sums reach +inf, which ranks nothing: every hypothesis was dropped and the search ended with
    an empty row, a PluginError blaming the strategy (found by the fuzz, seed 1902)."""
    from decodekit.testing.fuzz.generation import ModelKey, tiny_model

    model = tiny_model(ModelKey(vocab_size=2, dtype="bfloat16", tokenizer=True))
    decay = dk.create("exponential_decay", start=2, factor=1.5e308, stop_tokens=[0])
    with pytest.raises(dk.NumericsError, match=r"step 4, prompt 0: the beams' cumulative log-probabilities reached"):
        beam_search(model, [[0, 1, 0, 0, 1, 0]], chain=dk.Chain([decay]), length_penalty=0.0, max_new_tokens=6)
