"""Every argument of generate / stream / beam_search / decode is checked before any model work:
a `ParameterError` naming the argument, the value and what is allowed; and a huge
`max_new_tokens` allocates only what the generation uses."""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from decodekit_beam.search import beam_search

import decodekit as dk
import decodekit.engine
import decodekit.loop
from tinymodels import tiny_gpt

V = 101  # tiny_gpt's vocabulary
BAD_ARGUMENTS = [
    ({"seed": 1.5}, r"seed=1.5 is invalid; allowed: an integer, 0 <= seed < 2\*\*64"),
    ({"seed": True}, r"seed=True is invalid"),
    ({"seed": -1}, r"seed=-1 is invalid"),
    ({"seed": [2**64]}, r"seed\[0\]=18446744073709551616 is invalid; allowed: an integer, 0 <= seed < 2\*\*64"),
    ({"seed": [1, 2]}, r"seed: 2 seeds given for 1 prompts; allowed: one int, or one per prompt \(1\)"),
    ({"seed": "7"}, r"seed='7' is invalid"),
    ({"logprobs": 2.5}, r"logprobs=2.5 is invalid; allowed: an integer 0 <= logprobs <= 101, or None"),
    ({"logprobs": V + 1}, r"logprobs=102 is invalid"),
    ({"cache": None}, r"cache=None is invalid; allowed: a cache backend name, 'name\(args\)', 'none', or a factory"),
    ({"cache": 5}, r"cache=5 is invalid"),
    ({"stop_tokens": None}, r"stop_tokens=None is invalid; allowed: a list of token ids, or one list per prompt"),
    ({"stop_tokens": 3}, r"stop_tokens=3 is invalid"),
    ({"stop_tokens": [1.0]}, r"stop_tokens: token id 1.0 \(float\) is invalid; allowed: an int"),
    ({"stop_tokens": [V]}, r"stop_tokens: token id 101 is invalid; allowed: 0 <= id < vocab_size=101"),
    ({"stop_tokens": [[1], ["a"]]}, r"2 lists given for 1 prompts"),
    ({"stop_strings": 7}, r"stop_strings=7 is invalid; allowed: a string, a list of strings, or one list per prompt"),
    ({"stop_strings": [["a"], "b"]}, r"stop_strings=\[\['a'\], 'b'\] is invalid; allowed: a string, a list of "),
    ({"stop_strings": [["a"], ["b"]]}, r"stop_strings: 2 lists given for 1 prompts; allowed: one list for every "),
    ({"stop_strings": [["a", 3]]}, r"stop_strings\[0\]=\['a', 3\] is invalid; allowed: a string, a list of "),
    ({"stop_strings": [("\n", "")]}, r"stop_strings\[0\]=\('\\n', ''\): an empty string would end every row"),
    ({"stop_strings": ["a", 3]}, r"stop_strings=\['a', 3\] is invalid"),
    # were dropped without a word, while the command line refuses `--stop ''`
    ({"stop_strings": ""}, r"stop_strings='': an empty string would end every row at once; allowed: non-empty"),
    ({"stop_strings": ["\n", ""]}, r"stop_strings=\['\\n', ''\]: an empty string would end every row at once"),
    ({"max_new_tokens": 2.0}, r"max_new_tokens=2.0 is invalid; allowed: an integer >= 0"),
    ({"max_new_tokens": True}, r"max_new_tokens=True is invalid"),
    ({"chain": 5}, r"chain=5 is invalid; allowed: a Chain \(stage objects: dk.Chain\(\[...\]\)\), a chain string, "),
    (
        {"max_new_token": 5},
        r"unknown parameter max_new_token=5; allowed parameters: (.*, )?chain, max_new_tokens, ",
    ),
]
BAD_PROMPTS = [
    ([[1.0, 2]], r"prompts: row 0: token id 1.0 \(float\) is invalid; allowed: an int"),
    ([[1, 2.7]], r"prompts: row 0: token id 2.7 \(float\)"),
    ([[2**64]], r"prompts: row 0: token id 18446744073709551616 is invalid; allowed: 0 <= id < vocab_size=101"),
    ([[-1]], r"token id -1 is invalid"),
    ([[True]], r"token id True \(bool\) is invalid"),
    ([[torch.tensor(1.0)]], r"token id tensor\(1.\) \(Tensor\) is invalid"),
    (torch.tensor([[1.0, 2.0]]), r"prompts: tensor of shape \(1, 2\) and dtype torch.float32; allowed: integer"),
    (torch.tensor([[1, V]]), r"prompts: row 0: token id 101 is invalid"),
    (None, r"prompts=None is invalid"),
    (5, r"prompts=5 is invalid"),
    ([[1], [None]], r"prompts: row 1: token id None \(NoneType\)"),
    ([], r"prompts: no rows"),
    (b"\x01\x02", r"prompts=b'\\x01\\x02' is bytes; allowed: text \(decode the bytes first\) or token ids"),
    (bytearray(b"\x01"), r"prompts=bytearray\(b'\\x01'\) is bytes"),
    ([bytearray(b"\x01")], r"prompts: row 0: bytearray\(b'\\x01'\) is invalid; allowed: a sequence of token ids"),
    # before: "prompts: row 1 is text, but the model has no tokenizer; pass token ids" (no value, no allowed)
    ([[1], "ROMEO:"], r"prompts: row 1='ROMEO:' is text, but the model has no tokenizer; allowed: token ids"),
]


def _entry_points() -> list[Any]:
    """generate, stream (checked at the call, before the first event), beam_search, decode."""

    def stream(model: Any, prompts: Any, **kw: Any) -> Any:
        return dk.stream(model, prompts, **kw)  # not iterated: the call itself must raise

    return [dk.generate, stream, beam_search, dk.decode]


@pytest.mark.parametrize(("kwargs", "message"), BAD_ARGUMENTS)
def test_bad_arguments_name_the_argument_the_value_and_what_is_allowed(kwargs: dict[str, Any], message: str) -> None:
    model = tiny_gpt(2)
    for call in _entry_points():
        if call is beam_search and "logprobs" in kwargs:
            continue  # beam search rejects every logprobs value (test_beam)
        with pytest.raises(dk.ParameterError, match=message):
            call(model, [[1, 2]], **kwargs)


@pytest.mark.parametrize(("prompts", "message"), BAD_PROMPTS)
def test_bad_prompts_are_parameter_errors(prompts: Any, message: str) -> None:
    model = tiny_gpt(2)
    for call in _entry_points():
        with pytest.raises(dk.ParameterError, match=message):
            call(model, prompts)


@pytest.mark.parametrize(("kwargs", "message"), BAD_ARGUMENTS[:12])
def test_arguments_are_checked_even_when_nothing_is_generated(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(dk.ParameterError, match=message):
        dk.generate(tiny_gpt(2), [[1, 2]], max_new_tokens=0, **kwargs)
    with pytest.raises(dk.UnknownNameError, match="unknown cache backend 'nope'"):
        dk.generate(tiny_gpt(2), [[1, 2]], max_new_tokens=0, cache="nope")


def test_stage_objects_outside_a_chain_say_to_wrap_them() -> None:
    model, stage = tiny_gpt(2), dk.create("top_k", k=5)
    wrap = r"\(stage objects: dk.Chain\(\[...\]\)\)"
    with pytest.raises(dk.ChainSpecError, match=rf"chain spec: stage 0 is top_k\(k=5\), a stage object; .* {wrap}$"):
        dk.generate(model, [[1, 2]], chain=[stage])  # transformers' habit: a list of processors
    with pytest.raises(dk.ParameterError, match=rf"chain=top_k\(k=5\) is invalid; allowed: a Chain {wrap}"):
        dk.generate(model, [[1, 2]], chain=stage)
    assert dk.generate(model, [[1, 2]], chain=dk.Chain([stage]), max_new_tokens=2).finish_reasons == ["length"]


def test_a_model_without_a_spec_is_named() -> None:
    with pytest.raises(dk.ParameterError, match="model object: no spec.vocab_size; allowed: a model with a"):
        dk.generate(object(), [[1]])  # type: ignore[arg-type]  # not a model: the run-time check names it


class LookAlikeSpec(torch.nn.Module):
    """A model whose spec has a ModelSpec's required fields but is no ModelSpec (a namespace, a dict-like class)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(10, 10)
        self.spec = SimpleNamespace(n_layers=1, n_heads=1, n_kv_heads=1, head_dim=4, vocab_size=10, max_positions=64)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, cache: object) -> torch.Tensor:
        embedded: torch.Tensor = self.embed(input_ids)
        return embedded


def test_a_spec_that_is_no_model_spec_is_named() -> None:
    """Before: AttributeError: 'types.SimpleNamespace' object has no attribute 'value_dim', from inside the cache."""
    said = (
        "model LookAlikeSpec: its spec is a SimpleNamespace, not a decodekit.ModelSpec; allowed: a "
        "decodekit.ModelSpec (it checks its fields and gives the optional ones their defaults)"
    )
    with pytest.raises(dk.ParameterError) as refused:
        dk.generate(LookAlikeSpec().eval(), [[1, 2, 3]], max_new_tokens=2)  # type: ignore[arg-type]  # the point
    assert str(refused.value) == said


class EncodeOnly:
    def encode(self, text: str) -> list[int]:
        return [ord(c) % 64 for c in text]


@pytest.mark.parametrize("prompts", ["abc", [[1, 2, 3]]])
def test_a_tokenizer_without_decode_is_named_before_the_model_runs(prompts: Any) -> None:
    """Before: AttributeError: 'EncodeOnly' object has no attribute 'decode', after the first token was drawn."""
    model = tiny_gpt(2)
    model.tokenizer = EncodeOnly()  # type: ignore[assignment]
    said = (
        "model GPT: its tokenizer EncodeOnly has no decode; allowed: a tokenizer with encode(text) -> ids and "
        "decode(ids) -> text (decodekit.prompts.Tokenizer), or tokenizer = None (token ids in and out)"
    )
    with pytest.raises(dk.ParameterError) as refused:
        dk.generate(model, prompts, max_new_tokens=2, chain="greedy")
    assert str(refused.value) == said


def test_a_model_name_in_place_of_a_model_says_to_load_it() -> None:
    """Before: "model str: no spec.vocab_size; allowed: a model with a decodekit.ModelSpec `spec`"."""
    said = "model='tiny-shakespeare' is a name, not a model; allowed: a model object: dk.load_model('tiny-shakespeare')"
    with pytest.raises(dk.ParameterError) as refused:
        dk.generate("tiny-shakespeare", "ROMEO:")  # type: ignore[arg-type]
    assert str(refused.value) == said


def test_good_alternatives_are_accepted() -> None:
    """The forms the checks must not reject: tuples, ranges, tensors, one string, numpy-free ints."""
    model = tiny_gpt(2)
    ref = dk.generate(model, [[1, 2, 3]], chain="greedy", max_new_tokens=4).tokens
    for prompts in ([(1, 2, 3)], (range(1, 4),), torch.tensor([1, 2, 3]), torch.tensor([[1, 2, 3]], dtype=torch.int32)):
        assert dk.generate(model, prompts, chain="greedy", max_new_tokens=4).tokens == ref
    out = dk.generate(model, [[1], [2]], max_new_tokens=3, seed=(2**64 - 1, 0), stop_tokens=torch.tensor([5]))
    assert len(out.tokens) == 2
    np = pytest.importorskip("numpy")
    ids = [np.int64(1), torch.tensor(2), 3]  # integers of other libraries are integers
    assert dk.generate(model, [ids], chain="greedy", max_new_tokens=4, stop_tokens=[torch.tensor(0)]).tokens == ref


def test_a_huge_max_new_tokens_without_a_cache_allocates_only_what_it_uses() -> None:
    """2**62 new tokens would need 2**65 bytes of history up front; streaming allocates as it goes."""
    model = tiny_gpt(2, block_size=8)
    events = dk.stream(model, [[1, 2]], max_new_tokens=2**62, cache="none", seed=0)
    first = [e.token for e in itertools.islice(events, 20)]
    bounded = dk.generate(model, [[1, 2]], max_new_tokens=20, cache="none", seed=0).tokens[0]
    assert first == bounded  # the same tokens as a run that knew its length
    stop = bounded[0]
    out = dk.generate(model, [[1, 2]], max_new_tokens=2**62, cache="none", seed=0, stop_tokens=[stop])
    assert out.tokens == [[stop]] and out.finish_reasons == ["stop"]


def test_a_huge_max_new_tokens_with_a_cache_is_a_context_error_before_any_allocation() -> None:
    with pytest.raises(dk.ContextLengthError, match=r"max_new_tokens=4611686018427387904 = 4611686018427387906"):
        dk.generate(tiny_gpt(2), [[1, 2]], max_new_tokens=2**62, cache="dense")


@pytest.mark.parametrize("cache", ["none", "gqa"])
def test_history_grown_on_the_way_equals_history_preallocated(cache: str, monkeypatch: pytest.MonkeyPatch) -> None:
    model = tiny_gpt(2)
    prompts = [[5, 17, 3, 9], [7]]
    chain = "repetition_penalty(1.3) | temperature(0.9) | sample"
    ref = dk.generate(model, prompts, chain=chain, max_new_tokens=21, cache=cache, seed=4).tokens
    monkeypatch.setattr(decodekit.engine, "PREALLOCATED_COLUMNS", 3)  # grows at steps 3, 7 and 15
    assert dk.generate(model, prompts, chain=chain, max_new_tokens=21, cache=cache, seed=4).tokens == ref


def test_beam_search_refuses_what_would_not_fit_in_memory() -> None:
    """The rows are what must fit (the engine's check_rows, naming num_beams); a huge max_new_tokens is not refused
    up front (hypotheses, like a sample's outputs, grow only as generated: a row may end on a stop token)."""
    with pytest.raises(dk.ParameterError, match=r"^strategy beam: num_beams=1073741824 is invalid: its 1,073,741,824"):
        beam_search(tiny_gpt(2), [[1, 2]], num_beams=2**30, max_new_tokens=2**62, cache="none")


def test_stop_strings_need_a_tokenizer() -> None:
    # before: "stop_strings: the model has no tokenizer to decode text with; use stop_tokens" (no value, no allowed)
    refusal = r"stop_strings=\['\\n'\] is invalid: the model has no tokenizer to decode text with; allowed: stop_tokens"
    with pytest.raises(dk.ParameterError, match=refusal):
        dk.generate(tiny_gpt(2), [[1]], stop_strings=["\n"])
    model = tiny_gpt(2)
    model.tokenizer = __import__("tinymodels").CharTokenizer()  # type: ignore[assignment]
    assert dk.generate(model, ["ab"], stop_strings="b", max_new_tokens=2).text is not None  # one string is one stop


def test_beam_search_takes_a_seed_for_stages_that_draw() -> None:
    """xtc draws a uniform per row and step: with a seed, beam search is reproducible."""
    model = tiny_gpt(2)
    chain = "xtc(threshold=0.01, probability=0.5)"
    runs = [beam_search(model, [[1, 2, 3]], chain=chain, max_new_tokens=8, seed=1).tokens for _ in range(2)]
    assert runs[0] == runs[1]


@pytest.mark.xdist_group("compile")  # the compiling tests in one worker: inductor starts once, reuses its kernels
@pytest.mark.parametrize("strategy", ["beam", "speculative(draft=ngram)"])
def test_every_strategy_takes_compile(strategy: str) -> None:
    model = tiny_gpt(n_layer=1)  # the flag's way through each strategy is the point: one layer is a smaller graph
    eager = dk.decode(model, [[1, 2]], strategy=strategy, chain="greedy", max_new_tokens=4)
    compiled = dk.decode(model, [[1, 2]], strategy=strategy, chain="greedy", max_new_tokens=4, compile=True)
    assert compiled.tokens == eager.tokens


def test_compile_is_refused_up_front_where_torch_compile_lacks_isolate_recompiles(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """torch before 2.13 has no `torch.compile(isolate_recompiles=)`: compile=True was a TypeError from inside the
    decode there (and the chain's `guard_filter_fn` a RuntimeError on torch 2.5), not an argument refused."""

    def torch_2_5_compile(
        model: Any = None, *, fullgraph: bool = False, dynamic: bool | None = None, backend: Any = "inductor",
        mode: str | None = None, options: dict[str, Any] | None = None, disable: bool = False,
    ) -> Any:  # fmt: skip
        raise AssertionError("compiled, not refused")

    monkeypatch.setattr(torch, "compile", torch_2_5_compile)
    monkeypatch.setattr(torch, "__version__", "2.5.0")
    with pytest.raises(
        dk.ParameterError,
        match=r"^compile=True needs torch 2\.13 or later \(torch\.compile's isolate_recompiles\); this is torch "
        r"2\.5\.0; allowed: compile=False \(the same tokens, eagerly\)$",
    ):
        dk.generate(tiny_gpt(n_layer=1), [[1, 2]], chain="greedy", max_new_tokens=2, compile=True)


@dataclass(frozen=True)
class Named:
    """A model that is equal to another of its name (a dataclass), whatever its weights."""

    name: str
    inner: Any = field(compare=False)

    @property
    def spec(self) -> Any:
        return self.inner.spec

    def __call__(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        logits: torch.Tensor = self.inner(*args, **kwargs)
        return logits


@dataclass(slots=True)
class Slotted:  # eq=True without frozen: no hash, as most dataclasses; slots: no weak reference either
    inner: Any

    @property
    def spec(self) -> Any:
        return self.inner.spec

    def __call__(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        logits: torch.Tensor = self.inner(*args, **kwargs)
        return logits


@pytest.mark.xdist_group("compile")
def test_compile_runs_the_model_it_is_given_whatever_its_equality() -> None:
    """The compiled models were kept by the model's == and hash: a model equal to one compiled before ran that
    one's weights, and an unhashable one (a dataclass) or one without weak references was a TypeError."""
    prompts = [[5, 9, 3, 40]]
    models: list[Any] = [Named("m", tiny_gpt(n_layer=1, seed=0)), Named("m", tiny_gpt(n_layer=1, seed=3))]
    models.append(Slotted(models[1].inner))
    eager = [dk.generate(m, prompts, chain="greedy", max_new_tokens=5).tokens for m in models]
    assert models[0] == models[1] and eager[0] != eager[1]  # equal, yet not the same weights
    for model, tokens in zip(models, eager):
        assert dk.generate(model, prompts, chain="greedy", max_new_tokens=5, compile=True).tokens == tokens


def test_an_unknown_keyword_names_the_entry_point_and_all_it_takes() -> None:
    model = tiny_gpt(2)
    with pytest.raises(
        dk.ParameterError, match=r"^generate: unknown parameter temprature=0.7; allowed parameters: chain,"
    ):
        dk.generate(model, [[1]], temprature=0.7)  # type: ignore[call-arg]
    with pytest.raises(dk.ParameterError, match=r"^stream: unknown parameter temprature=0.7"):
        dk.stream(model, [[1]], temprature=0.7)  # type: ignore[call-arg]
    with pytest.raises(
        dk.ParameterError,
        match=r"^beam_search: unknown parameter temprature=0.7; allowed parameters: num_beams, length_penalty, "
        r"early_stopping, num_return_sequences, chain, max_new_tokens",
    ):
        beam_search(model, [[1]], temprature=0.7)  # type: ignore[call-arg]


def test_a_strategy_given_to_generate_is_told_where_a_strategy_goes() -> None:
    with pytest.raises(
        dk.ParameterError, match=r"; a strategy is chosen with dk\.decode\(model, prompts, strategy=\.\.\.\)$"
    ):
        dk.generate(tiny_gpt(2), [[1]], strategy="beam")  # type: ignore[call-arg]


@pytest.mark.parametrize("returned", [None, "dense", 3])
def test_a_cache_factory_that_returns_no_cache_is_named(returned: Any) -> None:
    """A factory's slip (a missing `return`) decoded with no cache at all, many times slower and silently."""
    with pytest.raises(dk.ParameterError, match=rf"cache=.* returned {returned!r}; allowed: a factory"):
        dk.generate(tiny_gpt(), [[1, 2, 3]], max_new_tokens=2, cache=lambda spec: returned)


def test_a_wrong_count_of_seeds_or_stop_lists_is_counted_in_prompts_not_rows() -> None:
    """Beam search decodes num_beams rows a prompt: a count said in rows ("one per row (2)" of 4 rows) misleads."""
    model, prompts = tiny_gpt(2), [[1, 2], [3]]
    with pytest.raises(dk.ParameterError, match=r"^seed: 3 seeds given for 2 prompts; allowed: one int, or one per "):
        beam_search(model, prompts, num_beams=2, max_new_tokens=2, seed=[1, 2, 3])
    with pytest.raises(dk.ParameterError, match=r"^stop_tokens: 3 lists given for 2 prompts; allowed: one list for "):
        beam_search(model, prompts, num_beams=2, max_new_tokens=2, stop_tokens=[[1], [2], [3]])


@pytest.mark.parametrize(
    ("option", "hint"),
    [
        ({"temperature": 0.7}, "; a sampler is a stage of the chain: chain='temperature(0.7)'"),
        ({"top_p": 0.9}, "; a sampler is a stage of the chain: chain='top_p(0.9)'"),
        ({"n": 4}, "; for n samples of each prompt, repeat it n times and seed the copies with "),
        ({"num_return_sequences": 4}, "; for n samples of each prompt, repeat it n times and seed the copies with "),
        ({"do_sample": False}, "; a chain samples (do_sample=True) unless it ends in another selector; do_sample=F"),
        ({"stop": ["\n"]}, "; did you mean 'stop_strings'?"),
        ({"attention_mask": [[1]]}, "; prompts are padded here: give each one's ids unpadded (a list of lists)"),
        ({"eos_token_id": 2}, "; did you mean 'stop_tokens'?"),
        ({"min_tokens": 3}, "; vLLM's min_tokens is a stage of the chain: chain='min_new_tokens(n, [eos ids])'"),
        ({"pad_token_id": 0}, "; prompts are padded here: give each one's ids unpadded (a list of lists)"),
        ({"num_beams": 4}, "; beam search is a strategy: dk.decode(model, prompts, strategy='beam', num_beams=...)"),
        ({"max_length": 20}, "; max_new_tokens counts the new tokens alone (max_length less the prompt's)"),
        ({"ignore_eos": True}, "; a row stops only at the stop_tokens given: leave the eos out of them"),
        ({"generation_config": None}, "; decodekit_hf.generation_options(config) gives it as dk.decode's keywords"),
        ({"n_predict": 20}, "; llama.cpp's n_predict is max_new_tokens"),
        ({"n_probs": 3}, "; llama.cpp's n_probs is logprobs=n: the model's top n (raw_top); post_sampling_probs: proc"),
        ({"repeat_penalty": 1.1}, "; llama.cpp's repeat_penalty is a stage of the chain: chain='repetition_penalty(r,"),
        ({"samplers": "top_k;temperature"}, "; llama.cpp's samplers are the chain's stages in that order"),
        ({"mirostat": 2}, "; llama.cpp's mirostat 1 is chain='temperature(t) | mirostat(tau, eta)', 2 chain='temper"),
        ({"typical_p": 0.9}, "; a sampler is a stage of the chain: chain='typical(mass)'"),
        ({"logit_bias": {5: 1.0}}, "; a sampler is a stage of the chain: chain='logit_bias({5: 1.0})'"),
        (
            {"logit_bias": [[5, 1.0]]},
            "; a sampler is a stage of the chain: chain='logit_bias(...)', where logit_bias: "
            "bias=[[5, 1.0]] is invalid: Input should be a valid dictionary; allowed: a dict mapping integers",
        ),
    ],
)
def test_another_librarys_sampling_keyword_is_told_where_it_goes(option: dict[str, Any], hint: str) -> None:
    """vLLM's and transformers' per-request `temperature`, `top_p` and `n` are not options here: the message says
    what gives them (the chain; copies seeded by `row_seeds`), as a batch line's error does. Their names for options
    that are here under others say which (`do_sample` was "did you mean 'compile'?", `min_tokens` "'max_new_tokens'?",
    `pad_token_id` "'stop_tokens'?", `stop`, `num_beams` and `max_length` had no hint). llama.cpp's `mirostat=2` was
    "chain='mirostat(2)'" (its mode read as mirostat's tau), its `logit_bias` pairs a chain the sampler then refused,
    and `n_predict`, `n_probs`, `repeat_penalty` and `samplers` had no hint."""
    with pytest.raises(dk.ParameterError, match=re.escape(hint)) as info:
        dk.generate(tiny_gpt(2), [[1]], **option)
    assert str(info.value).startswith(f"generate: unknown parameter {next(iter(option))}=")
    with pytest.raises(dk.ParameterError, match=re.escape(hint)):
        dk.stream(tiny_gpt(2), [[1]], **option)


def test_seeds_as_an_array_or_a_tensor_are_one_per_prompt_however_many() -> None:
    """seed=torch.tensor([11]) for one prompt was read as the one seed 11 (a tensor of one element has __index__),
    so its prompt drew from mix_seed(11, 0), not from 11 as seed=[11] gives it, and a tensor of two was refused."""
    import numpy as np

    from decodekit.context import row_seeds

    model, prompts = tiny_gpt(2), [[1, 2], [3]]
    listed = dk.generate(model, prompts[:1], seed=[11], max_new_tokens=8).tokens
    assert dk.generate(model, prompts[:1], seed=11, max_new_tokens=8).tokens != listed  # the two readings differ
    for seeds in (torch.tensor([11]), np.array([11])):
        assert dk.generate(model, prompts[:1], seed=seeds, max_new_tokens=8).tokens == listed  # type: ignore[arg-type]
        assert row_seeds(seeds, 1, 3) == row_seeds([11], 1, 3)
    both = dk.generate(model, prompts, seed=[11, 12], max_new_tokens=8).tokens
    assert dk.generate(model, prompts, seed=torch.tensor([11, 12]), max_new_tokens=8).tokens == both  # type: ignore[arg-type]
    with pytest.raises(dk.ParameterError, match=r"^seed: 1 seeds given for 2 prompts"):
        dk.generate(model, prompts, seed=torch.tensor([11]), max_new_tokens=8)  # type: ignore[arg-type]


def test_seed_minus_one_is_told_that_none_draws_a_fresh_seed() -> None:
    """llama.cpp's -1 is "a fresh seed"; here that is None. Before: the range alone was said."""
    said = (
        "seed=-1 is invalid; allowed: an integer, 0 <= seed < 2**64, or None (a fresh seed each call: llama.cpp's -1)"
    )
    with pytest.raises(dk.ParameterError, match=f"^{re.escape(said)}$"):
        dk.generate(tiny_gpt(2), [[1]], seed=-1, max_new_tokens=2)
    with pytest.raises(dk.ParameterError, match=r"^seed=-2 is invalid; allowed: an integer, 0 <= seed < 2\*\*64$"):
        dk.generate(tiny_gpt(2), [[1]], seed=-2, max_new_tokens=2)


def test_row_seeds_takes_the_integers_dk_generate_takes_and_refuses_the_rest() -> None:
    """concepts.md's pass@k recipe: a NumPy seed (a config's, `np.random.randint`'s) was "TypeError: 'numpy.int64'
    object is not iterable", and a seed read as text ("11", an environment variable's) one seed per digit, 1 and 1."""
    import numpy as np

    from decodekit.context import row_seeds

    model, n = tiny_gpt(2), 3
    assert row_seeds(np.int64(11), 2, n) == row_seeds(torch.tensor(11), 2, n) == row_seeds(11, 2, n)
    assert row_seeds([np.int64(11)], 1, n) == row_seeds([11], 1, n)
    # one per prompt as an array or a tensor, as row_seeds took them before it took NumPy's integers
    assert row_seeds(np.array([11, 12]), 2, n) == row_seeds(torch.tensor([11, 12]), 2, n) == row_seeds([11, 12], 2, n)
    samples = dk.generate(model, [[1, 2]] * n, seed=row_seeds(np.int64(11), 1, n), max_new_tokens=4)
    alone = dk.generate(model, [[1, 2]], seed=np.int64(11), max_new_tokens=4)  # type: ignore[arg-type]
    assert samples.tokens[0] == alone.tokens[0]
    for seed in ("11", 11.0, [1.5], True, np.array([1.5]), np.array([[11, 12]])):
        with pytest.raises(dk.ParameterError, match=r"^row_seeds: seed=.* is invalid; allowed: an integer, one per "):
            row_seeds(seed, 1, n)  # type: ignore[arg-type]
