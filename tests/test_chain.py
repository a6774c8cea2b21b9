"""Chains: built in code, from specs and strings (all agreeing), order, errors, numerics, fast path == dense path."""

from __future__ import annotations

import json
import math
import re

import pytest
import torch
from decodekit_greedy.greedy import Greedy
from decodekit_repetition_penalty.repetition_penalty import RepetitionPenalty
from decodekit_temperature.temperature import Temperature
from decodekit_top_k.top_k import TopK
from decodekit_top_p.top_p import TopP
from uninstalled import uninstall

import decodekit as dk
import decodekit.plugins
from decodekit.sample import Sample
from decodekit.stage import Candidates, densify
from decodekit.testing import NEG, ctx_for

FULL = "repetition_penalty(1.1) | temperature(0.8) | top_k(50) | top_p(0.9) | sample"


def full_chain() -> dk.Chain:
    return dk.Chain(
        [
            dk.create("repetition_penalty", penalty=1.1),
            dk.create("temperature", value=0.8),
            dk.create("top_k", k=50),
            dk.create("top_p", p=0.9),
        ]
    )


def ban_token_zero(logits: torch.Tensor, ctx: dk.DecodeContext) -> torch.Tensor:
    """A third party's processor: a plain function, never registered."""
    return logits.index_fill(1, torch.tensor([0]), NEG)


# -- building chains ---------------------------------------------------------------------


def test_create_classes_and_spec_build_the_same_chain() -> None:
    by_name = full_chain()
    by_class = dk.Chain(
        [RepetitionPenalty(penalty=1.1), Temperature(value=0.8), TopK(k=50), TopP(p=0.9)], selector=Sample()
    )
    assert by_name == by_class
    assert [type(p) for p in by_name.processors] == [RepetitionPenalty, Temperature, TopK, TopP]
    assert isinstance(by_name.selector, Sample)
    x = torch.randn(4, 300, generator=torch.Generator().manual_seed(0))
    assert torch.equal(by_name(x, ctx_for(4, history=5)), by_class(x, ctx_for(4, history=5)))


def test_a_plain_function_processor_works_in_code() -> None:
    chain = dk.Chain([ban_token_zero, TopK(k=2)], selector=Greedy())
    x = torch.tensor([[9.0, 1.0, 5.0, 5.0, 2.0]])
    assert chain(x, ctx_for(1)).tolist() == [2]  # token 0 banned; 2 and 3 tie, the lowest id wins
    assert torch.equal(chain.process(x, ctx_for(1)), torch.tensor([[NEG, NEG, 5.0, 5.0, NEG]]))
    assert "ban_token_zero" in str(chain)


def test_spec_round_trips_exactly() -> None:
    chain = full_chain()
    spec = chain.to_spec()
    assert spec == [
        {"name": "repetition_penalty", "params": {"penalty": 1.1, "last_n": None, "include_prompt": True}},
        {"name": "temperature", "params": {"value": 0.8}},
        {"name": "top_k", "params": {"k": 50}},
        {"name": "top_p", "params": {"p": 0.9, "min_keep": 1}},
        {"name": "sample", "params": {}},
    ]
    assert dk.Chain.from_spec(spec) == chain
    assert dk.Chain.from_spec(spec).to_spec() == spec
    assert dk.Chain.from_spec(json.loads(json.dumps(spec))).to_spec() == spec
    assert dk.Chain.from_spec(json.dumps(spec)) == chain  # a JSON string of the spec


def test_parse_equals_the_chain_built_in_code() -> None:
    assert dk.Chain.parse(FULL) == full_chain()
    assert dk.Chain.parse("temperature(value=0.8) | top_p(0.9, min_keep=2) | greedy").to_spec() == [
        {"name": "temperature", "params": {"value": 0.8}},
        {"name": "top_p", "params": {"p": 0.9, "min_keep": 2}},
        {"name": "greedy", "params": {}},
    ]


def test_string_form_round_trips() -> None:
    chain = full_chain()
    assert str(chain) == (
        "repetition_penalty(penalty=1.1, last_n=None, include_prompt=True) | temperature(value=0.8) | "
        "top_k(k=50) | top_p(p=0.9, min_keep=1) | sample"
    )
    assert dk.Chain.parse(str(chain)) == chain
    greedy = dk.Chain.parse("top_k(3) | greedy")
    assert dk.Chain.parse(str(greedy)) == greedy


def test_the_selector_defaults_to_sample() -> None:
    assert isinstance(dk.Chain.parse("top_k(3)").selector, Sample)
    assert dk.Chain.parse("top_k(3)") == dk.Chain.parse("top_k(3) | sample")


# -- order ---------------------------------------------------------------------------------


def test_order_is_kept_and_matters() -> None:
    # probabilities 0.55, 0.3, 0.15. top_p(0.6) first keeps {0, 1} (the mass before token 1 is 0.55);
    # temperature(0.5) first sharpens them to 0.729, 0.217, 0.054, and top_p(0.6) keeps {0} alone.
    x = torch.log(torch.tensor([[0.55, 0.3, 0.15]]))
    temperature_first = dk.Chain.parse("temperature(0.5) | top_p(0.6)")
    truncation_first = dk.Chain.parse("top_p(0.6) | temperature(0.5)")
    assert [type(p) for p in temperature_first.processors] == [Temperature, TopP]
    assert [type(p) for p in truncation_first.processors] == [TopP, Temperature]
    assert torch.isfinite(temperature_first.process(x, ctx_for(1))).tolist() == [[True, False, False]]
    assert torch.isfinite(truncation_first.process(x, ctx_for(1))).tolist() == [[True, True, False]]
    assert torch.allclose(truncation_first.process(x, ctx_for(1))[0, :2], 2 * x[0, :2])


def test_temperature_and_top_k_commute() -> None:
    # top_k keeps the same tokens whatever the (positive) temperature: the two orders agree
    x = torch.tensor([[1.0, 4.0, 2.0, 3.0]])
    a = dk.Chain.parse("temperature(0.5) | top_k(2)").process(x, ctx_for(1))
    b = dk.Chain.parse("top_k(2) | temperature(0.5)").process(x, ctx_for(1))
    assert torch.equal(a, b) and torch.equal(a, torch.tensor([[NEG, 8.0, NEG, 6.0]]))


# -- errors --------------------------------------------------------------------------------


def test_a_sampler_not_installed_lists_the_installed_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DECODEKIT_LOAD_PLUGINS", "decodekit-greedy")  # the others installed, left out
    uninstall(monkeypatch, "decodekit-top-k")
    with pytest.raises(dk.UnknownNameError) as e:
        dk.Chain.parse("top_k(5) | greedy")
    msg = str(e.value)
    assert "sampler 'top_k' is not installed" in msg and "installed: greedy, sample" in msg
    assert "decodekit-top-k registers it: pip install decodekit-top-k (" in msg  # a standard name


def test_a_sampler_installed_but_left_out_says_how_to_enable_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """It said "is not installed ... pip install decodekit-top-k" of a plugin DECODEKIT_LOAD_PLUGINS left out."""
    monkeypatch.setenv("DECODEKIT_LOAD_PLUGINS", "decodekit-greedy")
    monkeypatch.setattr(decodekit.plugins, "_registry", None)  # rebuilt from the variable on first use
    with pytest.raises(dk.UnknownNameError) as e:
        dk.Chain.parse("top_k(5) | greedy")
    assert str(e.value) == (
        "sampler 'top_k' is installed but disabled: DECODEKIT_LOAD_PLUGINS does not list decodekit-top-k; add it to "
        "DECODEKIT_LOAD_PLUGINS (or unset DECODEKIT_LOAD_PLUGINS) to enable it"
    )


def test_an_unknown_sampler_lists_the_installed_ones() -> None:
    with pytest.raises(dk.UnknownNameError) as e:
        dk.Chain.parse("topk(5) | sample")
    msg = str(e.value)
    assert "unknown sampler 'topk'" in msg and "did you mean 'top_k'" in msg
    for name in ("greedy", "repetition_penalty", "sample", "temperature", "top_k", "top_p"):
        assert name in msg
    with pytest.raises(dk.UnknownNameError):
        dk.Chain.from_spec([{"name": "topk", "params": {}}])


@pytest.mark.parametrize(("stage", "said"), [("beam(num_beams=4)", "a strategy"), ("gqa", "a cache backend")])
def test_a_strategy_or_cache_in_a_chain_is_said_to_be_one(stage: str, said: str) -> None:
    """transformers' beam search is a strategy here: `beam` in a chain was "no installed plugin distribution registers
    it", though decodekit-beam is installed and registers it."""
    name = stage.split("(")[0]
    with pytest.raises(dk.UnknownNameError, match=rf"^unknown sampler '{name}'; installed: .*; '{name}' is {said}, "):
        dk.Chain.parse(f"temperature(0.7) | {stage}")


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("top_k(5", r"at position 7: expected ',' or '\)' to close the '\(' at position 5, found the end"),
        ("top_k(5) || sample", r"at position 10: expected a chain stage name, found '\|'"),
        ("top_k(5) |", "at position 10: expected a chain stage name, found the end"),
        ("1 + 2", "at position 0: expected a chain stage name, found '1'"),
        ("top_k(k=&) | sample", "at position 8: expected a literal"),
        ("top_k(**{'k': 5})", "at position 6: expected a literal"),
        ("greedy | top_k(5)", "selector"),
        ("sample | greedy", "selector"),
    ],
)
def test_bad_chain_strings(text: str, match: str) -> None:
    with pytest.raises(dk.ChainSpecError, match=match):
        dk.Chain.parse(text)


def test_a_selector_must_be_last() -> None:
    with pytest.raises(dk.ChainSpecError, match="selector"):
        dk.Chain([Greedy(), TopK(k=5)])
    with pytest.raises(dk.ChainSpecError, match="selector"):
        dk.Chain.from_spec([{"name": "sample"}, {"name": "top_k", "params": {"k": 5}}])


def test_a_processor_given_as_the_selector_is_refused_at_construction() -> None:
    """It was accepted and failed at the first step with a raw TypeError (the selector returned logits)."""
    with pytest.raises(dk.ChainSpecError) as info:
        dk.Chain([], selector=dk.create("temperature", value=1.0))
    assert str(info.value) == (
        "Chain: selector=temperature(value=1.0) is a processor; allowed: a selector (sample, greedy, ...), "
        "or None for sample; a processor goes in the list of processors"
    )


def test_bad_specs() -> None:
    for spec in ([{"params": {"k": 5}}], [{"name": "top_k", "params": [5]}], [{"name": "top_k", "extra": 1}], "[1,"):
        with pytest.raises(dk.ChainSpecError):
            dk.Chain.from_spec(spec)  # type: ignore[arg-type]


def test_bad_parameters_in_a_string_name_the_parameter() -> None:
    with pytest.raises(dk.ParameterError, match=r"top_p: p=1\.5 is invalid.*0 < p <= 1"):
        dk.Chain.parse("top_p(1.5)")
    with pytest.raises(dk.ParameterError, match="top_k: 2 positional values"):
        dk.Chain.parse("top_k(5, 6)")


def test_an_unregistered_callable_does_not_serialise() -> None:
    chain = dk.Chain([ban_token_zero, TopK(k=5)])
    with pytest.raises(dk.ChainSpecError, match="ban_token_zero.*not a registered sampler"):
        chain.to_spec()


class MyTopK(TopK):
    """A third party's variant of a registered stage, itself unregistered (its own `__call__` left out here)."""


class MySample(Sample):
    """The same, of the core's own selector."""


def test_a_subclass_of_a_registered_stage_is_named_after_itself() -> None:
    """It took its base's name: its spec rebuilt a plain `top_k`, and the two chains compared equal."""
    mine = dk.Chain([MyTopK(k=2)])
    assert str(mine) == "my_top_k(k=2) | sample"
    assert mine != dk.Chain([TopK(k=2)])
    with pytest.raises(dk.UnknownNameError, match="unknown sampler 'my_top_k'"):
        dk.Chain.from_spec(mine.to_spec())


def test_a_subclass_of_the_cores_sample_is_named_after_itself() -> None:
    """`Sample` named itself "sample" in a class attribute, which its subclasses inherited."""
    mine = dk.Chain([MySample()])
    assert str(mine) == "my_sample" and mine.to_spec() == [{"name": "my_sample", "params": {}}]
    assert str(dk.Chain([Sample()])) == "sample"
    with pytest.raises(dk.UnknownNameError, match="unknown sampler 'my_sample'"):
        dk.Chain.from_spec(mine.to_spec())


# -- numerics --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "temperature(0.8) | sample",
        "top_k(5) | top_p(0.9) | sample",
        "top_k(3) | greedy",
    ],
)
def test_a_nan_row_is_an_error_naming_step_and_row(text: str) -> None:
    x = torch.randn(3, 100, generator=torch.Generator().manual_seed(0))
    x[1, 17] = math.nan
    with pytest.raises(dk.NumericsError, match=r"step 7, row 1: .*NaN"):
        dk.Chain.parse(text)(x, ctx_for(3, step=7, history=8))


@pytest.mark.parametrize(
    "text",
    [
        "temperature(0.8) | sample",
        "top_k(5) | sample",
        "top_k(5) | top_p(0.5) | greedy",
    ],
)
def test_a_row_with_every_token_removed_is_an_error_naming_step_and_row(text: str) -> None:
    def remove_row_2(logits: torch.Tensor, ctx: dk.DecodeContext) -> torch.Tensor:
        return logits.index_fill(0, torch.tensor([2]), NEG)

    parsed = dk.Chain.parse(text)
    chain = dk.Chain([remove_row_2, *parsed.processors], selector=parsed.selector)
    x = torch.randn(4, 100, generator=torch.Generator().manual_seed(0))
    with pytest.raises(dk.NumericsError, match=r"step 3, row 2: .*every token was removed"):
        chain(x, ctx_for(4, step=3, history=4))


# -- fast path == dense path -------------------------------------------------------------------

FAST_PATH_CHAINS = [
    "repetition_penalty(1.1) | temperature(0.8) | top_k(50) | top_p(0.9)",
    "temperature(0.8) | top_p(0.9)",
    "top_k(40) | temperature(0.7) | top_p(0.8)",
    "top_p(0.95) | top_k(20) | repetition_penalty(1.5) | temperature(1.3)",
    "temperature(0) | top_k(5)",
    "top_k(100) | temperature(0)",
]


def peaked_logits(batch: int, vocab: int = 50_257, *, ties: bool = False) -> torch.Tensor:
    """Shuffled Zipf-like rows, `-1.2 · log(rank) + noise`; with ties, rounded as bfloat16 would."""
    g = torch.Generator().manual_seed(batch)
    base = -1.2 * torch.log(torch.arange(1, vocab + 1, dtype=torch.float32))
    x = torch.stack(
        [base[torch.randperm(vocab, generator=g)] + 0.1 * torch.randn(vocab, generator=g) for _ in range(batch)]
    )
    return x.bfloat16().float() if ties else x


def fast_and_dense(text: str, selector: dk.Selector, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokens from the chain (candidates, rows they cannot hold redone) and from `chain.process` +
    the selector, same seeds."""
    chain = dk.Chain(dk.Chain.parse(text).processors, selector=selector)
    fast = chain(x, ctx_for(x.shape[0], seed=11, step=2, history=40))
    ctx = ctx_for(x.shape[0], seed=11, step=2, history=40)
    return fast, chain.selector(chain.process(x, ctx), ctx)


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("text", FAST_PATH_CHAINS)
def test_fast_path_picks_what_the_dense_path_picks_greedy(text: str, ties: bool) -> None:
    fast, dense = fast_and_dense(text, Greedy(), peaked_logits(6, ties=ties))
    assert torch.equal(fast, dense)


def test_fast_path_picks_what_the_dense_path_picks_sample() -> None:
    for text in FAST_PATH_CHAINS:
        fast, dense = fast_and_dense(text, Sample(), peaked_logits(6))
        assert torch.equal(fast, dense), text


@pytest.mark.parametrize("text", FAST_PATH_CHAINS)
def test_fast_path_processes_what_the_dense_path_processes(text: str) -> None:
    chain = dk.Chain.parse(text)
    x = peaked_logits(4, ties=True)
    fast = chain._process_fast(x, ctx_for(4, history=40))
    assert isinstance(fast, Candidates)  # every chain here truncates
    dense = chain.process(x, ctx_for(4, history=40))
    held = ~torch.isnan(fast.values).any(-1)  # the rows whose result fits the candidate sets
    assert torch.equal(densify(fast, x.shape[1])[held], dense[held])
    assert bool(held.any()) or text.startswith("top_p(0.95)")  # that nucleus is ~13,000 tokens: redone densely


def test_ties_past_the_candidates_room_are_redone_densely_with_the_same_draws() -> None:
    x = torch.randn(3, 500, generator=torch.Generator().manual_seed(2))
    x[1, 100:130] = 9.0  # 30 tokens tied at the largest value: more than top_k(3)'s room of 6
    chain = dk.Chain.parse("top_k(3) | sample")
    marked = chain._select(x, ctx_for(3, seed=4))
    assert marked[1].item() == -1 and bool((marked[[0, 2]] >= 0).all())
    ctx = ctx_for(3, seed=4)
    tokens = chain(x, ctx)
    dense_ctx = ctx_for(3, seed=4)
    dense = chain.selector(chain.process(x, dense_ctx), dense_ctx)
    assert torch.equal(tokens, dense) and 100 <= int(tokens[1]) < 130
    # the context went on as the dense path's: the next draws are the same
    assert torch.equal(ctx.uniform(), dense_ctx.uniform())


def test_a_step_redone_densely_reports_logprobs_only_when_asked() -> None:
    """A step the candidates could not hold (top_k(3) over 30 tied tokens) is redone densely; its logprobs were
    scored (a log-softmax, ranks and a read-back over the vocabulary) and returned unasked, so a stream's event had
    them at such a step and no other."""
    x = torch.randn(2, 500, generator=torch.Generator().manual_seed(2))
    x[1, 100:130] = 9.0  # more tied than top_k(3)'s room of 6: this row is redone
    chain = dk.Chain.parse("top_k(3) | sample")
    unasked = chain.step(x, ctx_for(2, seed=4))
    asked = chain.step(x, ctx_for(2, seed=4), logprobs=0)
    assert unasked.logprobs is None and asked.logprobs is not None
    assert unasked.ids == asked.ids and 100 <= unasked.ids[1] < 130


def test_select_leaves_the_logits_alone() -> None:
    def view_of_input(logits: torch.Tensor, ctx: dk.DecodeContext) -> torch.Tensor:
        return logits[:, :]  # a processor may return a view of its input

    for chain in (full_chain(), dk.Chain([view_of_input, *full_chain().processors])):
        x = peaked_logits(3)
        before = x.clone()
        chain._select(x, ctx_for(3, seed=5, history=40))
        assert torch.equal(x, before)


def test_process_and_trace_work_in_float32_on_half_logits_as_step_does() -> None:
    """process ran float16 logits in float16 and kept token 25 where step (in float32) picked 114."""
    torch.manual_seed(3)
    x = (torch.randn(1, 130) * 1e-3).half()
    chain = dk.Chain.parse("temperature(7549) | temperature(0) | greedy")
    assert chain.step(x, ctx_for(1)).ids == [114]
    processed = chain.process(x, ctx_for(1))
    assert processed.dtype == torch.float32
    assert torch.isfinite(processed[0]).nonzero().flatten().tolist() == [114]
    trace = chain.trace(x, ctx_for(1))
    assert [t.dtype for _, t in trace] == [torch.float32] * 3
    assert torch.equal(trace[-1][1], processed)
    assert torch.equal(chain.distribution(x, ctx_for(1)), processed)


def test_a_stage_given_params_twice_or_of_another_model_names_what_is_allowed() -> None:
    from decodekit_top_k.params import TopKParams
    from decodekit_top_p.params import TopPParams

    with pytest.raises(
        dk.errors.ParameterError,
        match=r"top_k: params=TopKParams\(k=5\) and keyword parameters \['k'\] are invalid together; allowed: one",
    ):
        TopK(TopKParams(k=5), k=5)
    with pytest.raises(
        dk.errors.ParameterError,
        match=r"top_k: params of type TopPParams is invalid; allowed: a TopKParams, or keyword parameters",
    ):
        TopK(TopPParams(p=0.5))  # type: ignore[arg-type]


@pytest.mark.parametrize("shape", [(30,), (2, 30), (1, 1, 30)])
@pytest.mark.parametrize("call", ["__call__", "step", "distribution", "process", "trace"])
def test_logits_of_the_wrong_shape_are_named(shape: tuple[int, ...], call: str) -> None:
    """1-D logits were an IndexError (step) or a TypeError (distribution); two rows for one were taken silently."""
    chain = dk.Chain.parse("top_k(5) | sample")
    with pytest.raises(
        dk.ParameterError, match=rf"logits of shape {re.escape(str(shape))} are invalid for a context of 1 rows"
    ):
        getattr(chain, call)(torch.zeros(shape), ctx_for(1))


@pytest.mark.parametrize("call", ["__call__", "step", "distribution", "process", "trace"])
def test_a_context_that_is_none_or_transformers_input_ids_is_named(call: str) -> None:
    """transformers' processors are called `(input_ids, scores)`: a chain called so, or without a context, was an
    AttributeError ("'Tensor' object has no attribute 'tokens'")."""
    chain, scores, input_ids = dk.Chain.parse("top_k(5) | sample"), torch.zeros(1, 30), torch.zeros(1, 4).long()
    allowed = (
        r"; allowed: a dk.DecodeContext \(dk.DecodeContext\(tokens=history \[B, T\]\)\); in transformers' "
        r"generate\(\), decodekit_hf.processor.as_logits_processor\(chain\)$"
    )
    with pytest.raises(dk.ParameterError, match=r"^ctx=None is invalid" + allowed):
        getattr(chain, call)(scores, None)
    with pytest.raises(dk.ParameterError, match=r"^ctx of type Tensor is invalid" + allowed):
        getattr(chain, call)(input_ids, scores)


def test_distribution_gives_a_row_that_is_not_live_as_process_does() -> None:
    """A row the candidate path marks (top_k(3) over two finite tokens) is redone densely even when the caller
    says it is not live: beam search adds -inf to a dead beam's row, and NaN + -inf ranked first in its topk,
    which closed the prompt with no hypothesis (a PluginError; found by the compose fuzz with xtc | top_k)."""
    inf = float("inf")
    x = torch.tensor([[-1.6, -2.2, -2.2, -1.9, -1.4, -3.0, -2.0], [-inf, -2.2, -inf, -inf, -inf, -3.0, -inf]])
    chain = dk.Chain.parse("top_k(3)")
    ctx = dk.DecodeContext(torch.tensor([[3, 4]] * 2))
    out = chain.distribution(x, ctx, live=[True, False])
    assert torch.equal(out, chain.process(x, dk.DecodeContext(torch.tensor([[3, 4]] * 2))))
    assert not out.isnan().any()


def test_a_stage_is_labelled_one_way_in_the_chain_string_its_trace_and_explain() -> None:
    """`str(chain)`, `Chain.trace` and `explain` each spelled a stage their own way (`trace` wrote a parameterless
    stage `name()`, the chain string `name`); one function, `stage_label`, writes them all."""
    from decodekit.chain import stage_label

    chain = dk.Chain.parse("temperature(0.5) | top_k(k=5) | greedy")
    trace = chain.trace(torch.randn(1, 130), ctx_for(1))
    assert [name for name, _ in trace[1:]] == str(chain).split(" | ")[:-1]
    assert str(chain) == "temperature(value=0.5) | top_k(k=5) | greedy"
    assert stage_label(chain.processors[1], every=False) == "top_k(k=5)"  # k has no default: always shown
    assert stage_label(dk.Chain.parse("top_p(p=0.9, min_keep=1)").processors[0], every=False) == "top_p(p=0.9)"
