"""Unit checks of the core's small pieces: the attention mask, GQA, params, specs, the context."""

from __future__ import annotations

import dataclasses
import re
from typing import Annotated, Any, Literal

import pytest
import torch
from decodekit_beam.search import beam_search
from decodekit_gpt.gpt import GPT, GPTConfig, attention_mask
from pydantic import Field, model_validator

import decodekit as dk
from decodekit.context import row_generators
from decodekit.params import validate_params
from decodekit.plugins import cache_factory
from tinymodels import Counting, tiny_gpt


def test_attention_mask_by_hand() -> None:
    # Row 0 unpadded, row 1 with one padding column; 2 cached slots, 2 new queries.
    # Slots 0..3; queries sit in slots 2 and 3. Row 1's position 0 is in slot 1.
    positions = torch.tensor([[2, 3], [1, 2]])
    mask = attention_mask(positions, offset=2)[:, 0].int()
    assert mask.tolist() == [
        [[1, 1, 1, 0], [1, 1, 1, 1]],
        [[0, 1, 1, 0], [0, 1, 1, 1]],
    ]
    # A padding query (negative position) sees itself only, so its softmax row is never empty.
    pad = attention_mask(torch.tensor([[-1, 0]]), offset=0)[0, 0].int()
    assert pad.tolist() == [[1, 0], [0, 1]]


def test_gqa_equals_mha_with_repeated_kv_heads() -> None:
    """A GQA model and the MHA model whose kv projections repeat each group give the same logits."""
    gqa = tiny_gpt(2)
    torch.manual_seed(1)
    mha = GPT(GPTConfig(vocab_size=101, block_size=64, n_layer=2, n_head=4, n_kv_head=None, n_embd=32)).eval()
    state = gqa.state_dict()
    D, C = 8, 32
    for layer in range(2):
        for kind in ("weight", "bias"):
            w = state[f"h.{layer}.attn.c_attn.{kind}"]
            q, k, v = w.split([C, 2 * D, 2 * D], dim=0)
            rep = [t.view(2, D, *t.shape[1:]).repeat_interleave(2, dim=0).reshape(4 * D, *t.shape[1:]) for t in (k, v)]
            state[f"h.{layer}.attn.c_attn.{kind}"] = torch.cat([q, *rep])
    mha.load_state_dict(state)
    ids = torch.randint(0, 101, (2, 12))
    pos = torch.arange(12)[None].expand(2, 12)
    torch.testing.assert_close(mha(ids, pos, None), gqa(ids, pos, None), atol=1e-5, rtol=1e-5)


def test_padded_row_matches_unpadded_logits() -> None:
    m = tiny_gpt(1)
    ids = torch.tensor([[0, 0, 5, 6, 7]])
    padded = m(ids, torch.tensor([[-2, -1, 0, 1, 2]]), None)[0, 2:]
    alone = m(ids[:, 2:], torch.arange(3)[None], None)[0]
    torch.testing.assert_close(padded, alone, atol=1e-5, rtol=1e-5)


def test_training_path_equals_masked_path() -> None:
    m = tiny_gpt(2)
    ids = torch.randint(0, 101, (3, 10))
    torch.testing.assert_close(m(ids), m(ids, torch.arange(10)[None].expand(3, 10)), atol=1e-5, rtol=1e-5)


class KParams(dk.Params):
    k: int = Field(ge=1, le=100, description="how many")
    scale: float = Field(default=1.0, gt=0)


def test_param_errors_name_parameter_value_and_range() -> None:
    with pytest.raises(dk.ParameterError, match=r"^demo: k=0 is invalid: .*; allowed: an integer 1 <= k <= 100$"):
        validate_params("demo", KParams, {"k": 0})
    with pytest.raises(dk.ParameterError, match=r"scale=-2.0 is invalid.*allowed: a number 0 < scale"):
        validate_params("demo", KParams, {"k": 3, "scale": -2.0})
    with pytest.raises(dk.ParameterError, match="unknown parameter q=3; allowed parameters: k, scale"):
        validate_params("demo", KParams, {"k": 3, "q": 3})
    with pytest.raises(dk.ParameterError) as info:  # it said what was missing, not what it takes
        validate_params("demo", KParams, {})
    assert str(info.value) == "demo: missing required parameter k; allowed: an integer 1 <= k <= 100"
    with pytest.raises(dk.ParameterError, match="k='many' is invalid"):
        validate_params("demo", KParams, {"k": "many"})
    assert validate_params("demo", KParams, {"k": 3}) == KParams(k=3, scale=1.0)


@pytest.mark.parametrize(
    ("name", "params", "message"),
    [
        (  # it said nothing allowed, and added the list's "should have at least 1 item after validation"
            "dry",
            {"multiplier": 1, "sequence_breakers": [[-1]]},
            "dry: sequence_breakers.0.0=-1 is invalid: Input should be greater than or equal to 0; "
            "allowed: sequence_breakers: a list of non-empty lists of integers in [0, 2**63)",
        ),
        (
            "sequence_bias",
            {"biases": [[[1], "a"]]},
            "sequence_bias: biases.0.1='a' is invalid: Input should be a number, not a bool or a string; "
            "allowed: biases: a list of pairs [a non-empty list of integers in [0, 2**63), a number in "
            "[-10000, 10000]], non-empty",
        ),
        (  # pydantic locates a dict key's error as bias.-1.[key]
            "logit_bias",
            {"bias": {-1: 1.0}},
            "logit_bias: bias key=-1 is invalid: Input should be greater than or equal to 0; "
            "allowed: bias: a dict mapping integers in [0, 2**63) to numbers in [-100, 100]",
        ),
        (  # it added "pattern.list[nullable[str]].1=3 is invalid: ...", pydantic's tag for the union's member
            "regex",
            {"pattern": ["a", 3]},
            "regex: pattern=['a', 3] is invalid; allowed: a string or a list of strings or Nones",
        ),
    ],
)
def test_nested_param_errors_name_the_path_value_and_what_is_allowed(
    name: str, params: dict[str, object], message: str
) -> None:
    with pytest.raises(dk.ParameterError) as info:
        dk.create(name, **params)
    assert str(info.value) == message


def test_specs_reject_bad_shapes() -> None:
    with pytest.raises(dk.ParameterError, match="n_kv_heads=3 is invalid; allowed: a divisor of n_heads=4"):
        dk.CacheSpec(n_layers=1, n_heads=4, n_kv_heads=3, head_dim=8, batch_size=1, capacity=4)
    with pytest.raises(dk.ParameterError, match="capacity=0 is invalid; allowed: an integer >= 1"):
        dk.CacheSpec(n_layers=1, n_heads=4, n_kv_heads=2, head_dim=8, batch_size=1, capacity=0)
    with pytest.raises(dk.ParameterError, match="n_kv_head=3 is invalid"):
        GPTConfig(n_head=4, n_kv_head=3, n_embd=32)


@pytest.mark.parametrize("base", [-1.0, 0.0, float("nan"), float("inf"), "10000", True])
def test_specs_reject_a_rope_base_whose_frequencies_are_not_finite(base: object) -> None:
    """Before: accepted; a window past the context then moved its sinks to NaN, a NumericsError at step 18
    ('the model's logits contain NaN', the service's fault), or a TypeError for the string."""
    shape: dict[str, Any] = {"n_layers": 1, "n_heads": 4, "n_kv_heads": 2, "head_dim": 8}
    refusal = rf"rope_base={re.escape(repr(base))} is invalid; allowed: None \(positions that are not rotary\) or a"
    with pytest.raises(dk.ParameterError, match=f"^ModelSpec: {refusal}"):
        dk.ModelSpec(**shape, vocab_size=10, max_positions=8, rope_base=base)  # type: ignore[arg-type]
    with pytest.raises(dk.ParameterError, match=f"^CacheSpec: {refusal}"):
        dk.CacheSpec(**shape, batch_size=1, capacity=4, rope_base=base)  # type: ignore[arg-type]
    assert dk.ModelSpec(**shape, vocab_size=10, max_positions=8, rope_base=500000).rope_base == 500000  # an int


@pytest.mark.parametrize("splittable", ["no", 0, None])
def test_model_spec_rejects_a_splittable_that_is_not_a_bool(splittable: object) -> None:
    """A truthy string would let the engine share a prefix the model computes otherwise."""
    with pytest.raises(dk.ParameterError, match=rf"^ModelSpec: splittable={re.escape(repr(splittable))} is invalid; "):
        dk.ModelSpec(1, 4, 2, 8, 10, 8, splittable=splittable)  # type: ignore[arg-type]


def test_decode_context_defaults_and_views() -> None:
    tokens = torch.tensor([[0, 0, 5, 6, 9], [1, 2, 3, 4, 8]])
    ctx = dk.DecodeContext(tokens=tokens)
    assert ctx.step == 0 and ctx.valid_mask() is None and ctx.generated.shape == (2, 0)
    ragged = dk.DecodeContext(tokens=tokens, prompt_lengths=torch.tensor([2, 4]), step=1)
    assert ragged.generated.tolist() == [[9], [8]]
    assert ragged.valid_mask().int().tolist() == [[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]]  # type: ignore[union-attr]
    with pytest.raises(dk.ParameterError, match=r"tokens of shape \(5,\)"):
        dk.DecodeContext(tokens=tokens[0])


@pytest.mark.parametrize("step", [6, 9, -1])
def test_a_context_whose_step_is_not_within_its_columns_is_refused_naming_it(step: int) -> None:
    """`step=6` over 5 columns was accepted, and `generated` then gave 5 tokens where `step` counted 6 (-1: none)."""
    tokens = torch.tensor([[0, 0, 5, 6, 9], [1, 2, 3, 4, 8]])
    with pytest.raises(dk.ParameterError, match=rf"^DecodeContext: step={step} is invalid for tokens of 5 columns; "):
        dk.DecodeContext(tokens=tokens, step=step)
    assert dk.DecodeContext(tokens=tokens, step=5).generated.tolist() == tokens.tolist()  # every column generated


def test_the_kits_ctx_for_without_a_history_holds_its_step() -> None:
    """`ctx_for(3, step=7)`, a plugin's hand-made test as the kit's docstring shows it, holds its 7 generated tokens
    (one column before a context's step was checked against its columns)."""
    from decodekit.testing import ctx_for

    assert ctx_for(3, step=7).tokens.shape == (3, 7)
    assert ctx_for(3, step=7).generated.tolist() == ctx_for(3, step=7, history=7).tokens.tolist()
    assert ctx_for(2).tokens.shape == (2, 1)


def test_row_generators_are_batch_invariant() -> None:
    a = row_generators(42, 1)
    b = row_generators(42, 3)
    assert torch.rand(4, generator=a[0]).tolist() == torch.rand(4, generator=b[0]).tolist()
    assert torch.rand(4, generator=b[1]).tolist() != torch.rand(4, generator=row_generators(42, 3)[2]).tolist()
    per_row = row_generators([7, 8], 2)
    assert torch.rand(2, generator=per_row[1]).tolist() == torch.rand(2, generator=row_generators([8], 1)[0]).tolist()
    with pytest.raises(dk.ParameterError, match="2 per-row seeds given"):
        row_generators([1, 2], 3)


def test_uniform_draws_are_each_generators_own_sequence() -> None:
    n = 70
    for rows in (1, 3):
        ctx = dk.DecodeContext(tokens=torch.zeros(rows, 2, dtype=torch.long), generators=row_generators(9, rows))
        draws = torch.cat([ctx.uniform(keepdim=True) for _ in range(n)], 1)  # [rows, n]
        assert draws.dtype == torch.float32 and draws.shape == (rows, n)
        for b, g in enumerate(row_generators(9, rows)):
            assert draws[b].tolist() == torch.rand(n, generator=g).tolist()
        assert ctx.uniform().shape == (rows,)
    # A stage drawing from a generator directly sees exactly the draws ctx.uniform() has made.
    ctx = dk.DecodeContext(tokens=torch.zeros(1, 2, dtype=torch.long), generators=row_generators(9, 1))
    ctx.uniform()
    assert ctx.generators is not None
    assert torch.rand(1, generator=ctx.generators[0]).item() == torch.rand(2, generator=row_generators(9, 1)[0])[1]


def test_fork_draws_what_the_context_will_and_changes_nothing_in_it() -> None:
    stage = Counting()
    ctx = dk.DecodeContext(tokens=torch.zeros(2, 5, dtype=torch.long), step=4, generators=row_generators(3, 2))
    ctx.state_for(stage)
    stage(torch.zeros(2, 5), ctx)
    ctx.uniform()
    fork = ctx.fork()
    assert fork.step == 4 and fork.tokens is ctx.tokens
    forked = [fork.uniform().tolist() for _ in range(70)]
    stage(torch.zeros(2, 5), fork)
    assert fork.state_for(stage) == [2] and ctx.state_for(stage) == [1]  # the same state, copied
    assert [ctx.uniform().tolist() for _ in range(70)] == forked  # the context then draws the same


@dataclasses.dataclass(eq=False)
class _PluginContext(dk.DecodeContext):
    eos_id: int = -1

    def is_eos(self, token: int) -> bool:
        return token == self.eos_id


def test_a_fork_of_a_context_subclass_is_one_too() -> None:
    ctx = _PluginContext(tokens=torch.zeros(1, 2, dtype=torch.long), eos_id=7)
    fork = ctx.fork()
    assert type(fork) is _PluginContext and fork.eos_id == 7 and fork.is_eos(7)
    fork.eos_id = 3
    assert ctx.eos_id == 7


def test_last_only_is_the_last_column_of_the_full_logits() -> None:
    m = tiny_gpt(2)
    ids = torch.randint(0, 101, (2, 9))
    pos = torch.tensor([list(range(9)), [-2, -1, *range(7)]])
    full = m(ids, pos, None)
    last = m(ids, pos, None, last_only=True)
    assert last.shape == (2, 1, 101)
    torch.testing.assert_close(last, full[:, -1:], atol=1e-5, rtol=1e-5)


def test_number_parameters_take_numbers_only() -> None:
    """`top_k(True)` was top_k(1), `window(size=True)` a one-token window, `num_beams='2'` two beams."""
    with pytest.raises(dk.ParameterError, match=r"top_k: k=True is invalid: Input should be a number, not a bool"):
        dk.create("top_k", k=True)
    with pytest.raises(dk.ParameterError, match=r"k='2' is invalid"):
        dk.Chain.from_spec([{"name": "top_k", "params": {"k": "2"}}])
    with pytest.raises(dk.ParameterError, match=r"cache window: size=True is invalid"):
        dk.create_cache("window", dk.CacheSpec(1, 1, 1, 2, 1, 4), size=True)
    with pytest.raises(dk.ParameterError, match=r"beam_search: num_beams='2' is invalid"):
        beam_search(tiny_gpt(2), [[1]], num_beams="2")  # type: ignore[arg-type]
    assert dk.Chain.parse("top_k(5)") == dk.Chain.from_spec([{"name": "top_k", "params": {"k": 5}}])
    assert cache_factory("window(size=auto)").params.size == "auto"  # type: ignore[attr-defined]  # a literal


class NestedNumbers(dk.Params):
    sizes: list[int] = Field(default_factory=list)
    by_name: dict[str, float] = Field(default_factory=dict)
    pair: tuple[int, str] | None = None


def test_nested_number_parameters_take_numbers_only() -> None:
    """`window(size=[8, 8, 8, True])` made a one-token layer, `[8, "8"]` an 8, while `size=True` was refused."""
    spec = dk.CacheSpec(4, 1, 1, 2, 1, 4)
    for value in (True, "8"):
        with pytest.raises(dk.ParameterError) as info:
            dk.create_cache("window", spec, size=[8, 8, 8, value])
        assert str(info.value) == (
            f"cache window: size.3={value!r} is invalid: Input should be a number, not a bool or a string; "
            "allowed: size: an integer, a list of integers or 'auto'"
        )
    with pytest.raises(dk.ParameterError, match=r"^p: sizes.1=False is invalid: Input should be a number.*; "):
        validate_params("p", NestedNumbers, {"sizes": [1, False]})
    with pytest.raises(dk.ParameterError, match=r"^p: by_name.a='2.5' is invalid: Input should be a number"):
        validate_params("p", NestedNumbers, {"by_name": {"a": "2.5"}})
    given = {"sizes": [1, 2], "by_name": {"a": 2.5}, "pair": (3, "x")}  # a str where the type takes one
    assert validate_params("p", NestedNumbers, given) == NestedNumbers(**given)  # type: ignore[arg-type]


class TakesStringsToo(dk.Params):
    id: str | int | None = None
    flag: int | bool = 0
    size: Annotated[int, Field(ge=1)] | Literal["auto"] = "auto"


def test_a_number_parameter_that_takes_strings_or_bools_too_takes_them() -> None:
    """`decodekit generate --input` refused every line with `"id": "romeo"` (str | int) as "not a number"."""
    given = {"id": "romeo", "flag": True, "size": "auto"}
    assert validate_params("p", TakesStringsToo, given) == TakesStringsToo(**given)  # type: ignore[arg-type]
    assert validate_params("p", TakesStringsToo, {"id": 3, "size": 4}) == TakesStringsToo(id=3, size=4)
    for value in ("4", True):  # only the literal "auto" besides numbers
        with pytest.raises(dk.ParameterError, match=rf"^p: size={value!r} is invalid: Input should be a number"):
            validate_params("p", TakesStringsToo, {"size": value})


def test_a_validator_across_parameters_names_them_and_its_rule() -> None:
    """A model_validator's error read `clampish: ={'lo': 2, 'hi': 1} is invalid`."""

    class Clamp(dk.Params):
        lo: float = 0.0
        hi: float = 1.0

        @model_validator(mode="after")
        def _ordered(self) -> Clamp:
            if self.lo > self.hi:
                raise ValueError("lo must be <= hi")
            return self

    with pytest.raises(dk.ParameterError, match=r"^clampish: lo=2, hi=1 are invalid together: lo must be <= hi$"):
        validate_params("clampish", Clamp, {"lo": 2, "hi": 1})


@pytest.mark.parametrize("rows", [1, 3])
def test_draw_uniforms_refills_its_tensor_with_the_generators_numbers(rows: int) -> None:
    """A second `draw_uniforms` writes into the first's tensor (a compiled step sees one it knows), and the
    numbers are still each row's generator's own, in order; outside inference mode an inference tensor is
    replaced, not written."""
    tokens = torch.zeros(rows, 2, dtype=torch.long)
    ctx = dk.DecodeContext(tokens=tokens, generators=row_generators(4, rows))
    with torch.inference_mode():
        ctx.draw_uniforms(2)
        first = ctx.draws
        assert first is not None
        first_values = first.clone()
        ctx.uniform()
        ctx.draw_uniforms(2)
    assert ctx.draws is first and ctx.drawn == 0
    ctx.draw_uniforms(2)  # outside inference mode: a new tensor
    assert ctx.draws is not first and not ctx.draws.is_inference()
    ctx.draw_uniforms(3)  # another width: a new tensor
    assert ctx.draws.shape == (rows, 3)
    drawn = torch.cat([first_values, first], 1)
    later = ctx.draws
    for b, g in enumerate(row_generators(4, rows)):
        expected = torch.rand(9, generator=g)
        assert drawn[b].tolist() == expected[:4].tolist()
        assert later[b].tolist() == expected[6:].tolist()
    torch.manual_seed(5)
    plain = dk.DecodeContext(tokens=tokens)
    plain.draw_uniforms()
    plain.draw_uniforms()
    torch.manual_seed(5)
    assert plain.draws is not None and plain.draws.view(-1).tolist() == torch.rand(2 * rows)[rows:].tolist()
