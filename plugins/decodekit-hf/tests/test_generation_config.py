"""`generation_chain` against transformers itself: for hand-picked and random generation configs, the scores
of the `LogitsProcessorList` that `generate()` builds for the config (captured from a real `generate()` call, so
transformers' own filling of defaults, special tokens and lengths is in it) equal the derived chain's
`chain.process` on random logits and histories; greedy `generate()` equals `dk.generate` with the derived chain."""

from __future__ import annotations

import random
import re
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import torch
from decodekit_hf import HFModel, generation_chain, generation_options
from transformers import GenerationConfig

import decodekit as dk

VOCAB = 96  # conftest's tiny models
EOS = VOCAB - 1
PROMPT = 6  # the prompt's width in the processor comparisons
STEPS = (0, 1, 2, 4, 7)  # tokens generated before the compared step
ALPHABET = [*range(8), EOS]  # histories from few ids, so n-grams, sequences and penalties meet them


@pytest.fixture(scope="module")
def model(build_gpt2: Callable[..., Any]) -> Any:
    return build_gpt2(seed=3)


@contextmanager
def generation_config(model: Any, config: GenerationConfig) -> Iterator[None]:
    saved = model.generation_config
    model.generation_config = config
    try:
        yield
    finally:
        model.generation_config = saved


def hf_processors(model: Any, config: GenerationConfig) -> Any:
    """The `LogitsProcessorList` transformers' `generate()` builds for a model whose generation config is `config`
    and a prompt of `PROMPT` tokens, taken from `_get_logits_processor` during a one-token `generate()`."""
    captured: list[Any] = []
    original = model._get_logits_processor

    def spy(*args: Any, **kwargs: Any) -> Any:
        captured.append(original(*args, **kwargs))
        return captured[-1]

    prompt = torch.tensor([[1, 2, 3, 4, 5, 6][:PROMPT]])
    patched = mock.patch.object(model, "_get_logits_processor", spy)
    with generation_config(model, config), patched, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=1, pad_token_id=0)
    return captured[0]


def histories(seed: int, step: int, rows: int = 6) -> tuple[torch.Tensor, torch.Tensor]:
    """`(tokens [rows, PROMPT + step], logits [rows, VOCAB])` at random; a row of tokens from `ALPHABET`."""
    g = torch.Generator().manual_seed(seed)
    tokens = torch.tensor(ALPHABET)[torch.randint(len(ALPHABET), (rows, PROMPT + step), generator=g)]
    logits = torch.randn(rows, VOCAB, generator=g) * 3
    logits[:, :8] += 2  # the alphabet's tokens among the likely ones, so that what they are dealt matters
    return tokens, logits


def assert_same_scores(ours: torch.Tensor, theirs: torch.Tensor) -> None:
    """The same removed tokens (-inf) and the kept scores to float32 rounding."""
    removed = torch.isneginf(theirs)
    assert torch.equal(torch.isneginf(ours), removed), (ours, theirs)
    torch.testing.assert_close(ours[~removed], theirs[~removed], rtol=1e-5, atol=1e-5)


def check_config(model: Any, options: dict[str, Any], seed: int = 0) -> str:
    """Compare transformers' processors for `options` with the derived chain at every step of `STEPS`."""
    config = GenerationConfig(**options)
    text = generation_chain(config, prompt_length=PROMPT)
    chain = dk.Chain.parse(text)
    processors = hf_processors(model, config)
    for step in STEPS:
        tokens, logits = histories(seed * 100 + step, step)
        theirs = processors(tokens, logits.clone())
        ours = chain.process(logits, dk.DecodeContext(tokens=tokens, step=step))
        if config.renormalize_logits:  # transformers log-softmaxes at the end; decodekit's sample normalises itself
            ours = ours.log_softmax(-1)
        assert_same_scores(ours, theirs)
    return text


# Each option alone, under do_sample=True and False (the warpers then do nothing, as in transformers).
ALONE: list[dict[str, Any]] = [
    {},
    {"temperature": 0.6},
    {"temperature": 1.7},
    {"top_k": 5},
    {"top_k": 0},
    {"top_p": 0.7},
    {"min_p": 0.1},
    {"top_h": 0.4},
    {"top_h": 1.0},
    {"typical_p": 0.5},
    {"epsilon_cutoff": 0.01},
    {"eta_cutoff": 0.05},
    {"repetition_penalty": 1.4},
    {"repetition_penalty": 0.7},
    {"no_repeat_ngram_size": 2},
    {"no_repeat_ngram_size": 1},
    {"bad_words_ids": [[3], [1, 2], [4, 5, 6], [EOS]]},
    {"sequence_bias": [[[2], float("-inf")], [[1, 3], -float("inf")], [[4], 1.5]]},  # -inf bans, as bad words do
    {"sequence_bias": [[[5, 6], float("-inf")]]},
    {"sequence_bias": [[[2], -2.5], [[1, 3], 4.0], [[5, 6, 7], -1.0]]},
    {"suppress_tokens": [0, 4, EOS]},
    {"suppress_tokens": [-3, 4]},  # an id below the vocabulary does nothing in transformers
    {"begin_suppress_tokens": [2, EOS]},
    {"min_new_tokens": 3},
    {"min_length": PROMPT + 4},
    {"exponential_decay_length_penalty": (2, 1.6)},
    {"exponential_decay_length_penalty": (0, 0.8)},
    {"renormalize_logits": True, "top_k": 4},
    {"watermarking_config": {"bias": 2.5}},
    {"watermarking_config": {"bias": 1.5, "greenlist_ratio": 0.4, "seeding_scheme": "selfhash", "context_width": 3}},
    {"watermarking_config": {"hashing_key": 7, "context_width": 2}, "top_k": 6},  # after the warpers
]


@pytest.mark.parametrize("do_sample", [True, False])
@pytest.mark.parametrize("options", ALONE, ids=lambda o: ",".join(o) or "defaults")
def test_each_option_alone_matches_transformers(model: Any, options: dict[str, Any], do_sample: bool) -> None:
    check_config(model, {"do_sample": do_sample, "eos_token_id": EOS, **options})


def test_combined_options_match_transformers(model: Any) -> None:
    options = {name: value for alone in ALONE[1:] for name, value in alone.items()}
    options |= {"temperature": 0.8, "top_k": 40, "repetition_penalty": 1.3, "no_repeat_ngram_size": 3}
    text = check_config(model, {"do_sample": True, "eos_token_id": [EOS, 7], **options})
    assert [stage.split("(")[0] for stage in text.split(" | ")] == [
        *("sequence_bias", "repetition_penalty", "no_repeat_ngram", "bad_words", "min_new_tokens"),
        *("exponential_decay", "bad_words", "min_new_tokens", "temperature", "top_h", "top_k", "top_p", "min_p"),
        *("typical", "epsilon", "eta", "watermark", "sample"),
    ]


def random_options(rng: random.Random) -> dict[str, Any]:
    """A generation config at random: each option set with chance 0.4, from values that matter on `histories`."""

    def words(longest: int) -> list[list[int]]:
        return [[rng.choice(ALPHABET) for _ in range(rng.randint(1, longest))] for _ in range(rng.randint(1, 3))]

    choices: dict[str, Callable[[], Any]] = {
        "temperature": lambda: rng.choice([0.3, 0.7, 1.0, 1.5]),
        "top_k": lambda: rng.choice([0, 1, 3, 10, 50, 200]),
        "top_p": lambda: rng.choice([0.2, 0.6, 0.9, 1.0]),
        "min_p": lambda: rng.choice([0.0, 0.02, 0.3]),
        "top_h": lambda: rng.choice([0.2, 0.5, 0.9]),
        "typical_p": lambda: rng.choice([0.3, 0.9, 1.0]),
        "epsilon_cutoff": lambda: rng.choice([0.0, 0.003, 0.03]),
        "eta_cutoff": lambda: rng.choice([0.0, 0.004, 0.08]),
        "repetition_penalty": lambda: rng.choice([0.8, 1.0, 1.2, 2.0]),
        "no_repeat_ngram_size": lambda: rng.choice([0, 1, 2, 3]),
        "bad_words_ids": lambda: words(3),
        "sequence_bias": lambda: list({tuple(w): [w, rng.uniform(-4, 4)] for w in words(3)}.values()),
        "suppress_tokens": lambda: rng.sample(ALPHABET, rng.randint(1, 3)),
        "begin_suppress_tokens": lambda: rng.sample(ALPHABET, rng.randint(1, 3)),
        "min_new_tokens": lambda: rng.choice([0, 1, 3, 8]),
        "min_length": lambda: rng.choice([0, PROMPT + 1, PROMPT + 5]),
        "exponential_decay_length_penalty": lambda: (rng.choice([0, 1, 3]), rng.choice([0.6, 1.3, 2.5])),
        "watermarking_config": lambda: {
            "bias": rng.choice([0.5, 2.0]),
            "seeding_scheme": rng.choice(["lefthash", "selfhash"]),
            "context_width": rng.choice([1, 2]),
        },
    }
    options = {name: make() for name, make in choices.items() if rng.random() < 0.4}
    options["do_sample"] = rng.random() < 0.7
    options["eos_token_id"] = rng.choice([EOS, [EOS, 3]])
    return options


@pytest.mark.parametrize("seed", range(60))
def test_random_configs_match_transformers(model: Any, seed: int) -> None:
    check_config(model, random_options(random.Random(seed)), seed)


def test_the_chains_read_as_transformers_fills_defaults() -> None:
    """transformers 5 gives an unset top_k its default 50 when sampling: a chain without it would be another."""
    chain = generation_chain(GenerationConfig(do_sample=True, temperature=0.6, top_p=0.9, eos_token_id=EOS))
    assert chain == "temperature(0.6) | top_k(50) | top_p(0.9) | sample"
    assert generation_chain(GenerationConfig(do_sample=True, top_k=0)) == "sample"
    assert generation_chain(GenerationConfig(temperature=0.6, top_p=0.9)) == "greedy"  # do_sample unset: False
    assert generation_chain(GenerationConfig()) == "greedy"


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"num_beams": 4}, r"num_beams=4 .*strategy='beam\(num_beams=4, length_penalty=1.0, early_stopping=False\)'"),
        ({"num_beams": 3, "do_sample": True}, r"num_beams=3 .*beam sampling"),
        ({"guidance_scale": 1.5}, r"guidance_scale=1.5 .*strategy='cfg\(scale=1.5\)'"),
        ({"penalty_alpha": 0.6, "top_k": 4}, r"penalty_alpha=0.6 .*contrastive search"),
        # transformers 5 runs constrained beam search for either (its hub's transformers-community/constrained-beam-
        # search); before, the chain was the greedy one, as if they were not there
        ({"force_words_ids": [[5], [7, 8]]}, r"force_words_ids=\[\[5\], \[7, 8\]\] .*constrained beam search"),
        ({"constraints": ["a constraint"]}, r"constraints=\['a constraint'\] .*constrained beam search"),
        # generate() rewrites the prompt's last tokens first (heal_tokens): the chain would sample from another prompt
        ({"token_healing": True}, r"token_healing=True .*prompt"),
        ({"forced_eos_token_id": EOS}, r"forced_eos_token_id=95"),
        ({"encoder_repetition_penalty": 1.2}, r"encoder_repetition_penalty=1.2"),
        ({"do_sample": True, "temperature": 0.0}, r"temperature=0.0 .*do_sample=false is its greedy"),
        ({"exponential_decay_length_penalty": (2, 1.5)}, r"exponential_decay_length_penalty=\(2, 1.5\) .*no eos_"),
        ({"sequence_bias": [[[3], float("inf")]]}, r"sequence_bias=\[\[3\], inf\] .*NaN or \+inf"),
        ({"do_sample": True, "top_p": 0.0}, r"top_p=0.0 cannot .*only the likeliest token .*top_p takes p > 0"),
        ({"watermarking_config": {"ngram_len": 5, "keys": [1, 2]}}, r"watermarking_config=.* SynthID"),
        # transformers takes these; before, the chain's parse refused them, naming watermark's parameter
        ({"watermarking_config": {"greenlist_ratio": 0.0}}, r"watermarking_config=.* greenlist_ratio=0.0 marks noth"),
        ({"watermarking_config": {"greenlist_ratio": 1.0}}, r"watermarking_config=.* greenlist_ratio=1.0 marks noth"),
    ],
)
def test_an_option_no_chain_expresses_is_refused_naming_it(options: dict[str, Any], named: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = GenerationConfig(**options)
    with pytest.raises(dk.ParameterError, match=rf"generation_chain: the generation config's {named}"):
        generation_chain(config)


@pytest.mark.parametrize(
    ("option", "value", "allowed"),
    [
        ("top_k", -1, "an integer >= 1, or 0 for no top-k"),
        ("top_k", 2.5, "an integer >= 1, or 0 for no top-k"),
        ("top_p", -0.1, r"a float in \[0, 1\] \(1: no top-p\)"),
        ("min_p", 1.5, r"a float in \[0, 1\]"),
        ("typical_p", 0.0, r"a float in \(0, 1\] \(1: no typical sampling\)"),
        ("top_h", 0.0, r"a float in \(0, 1\]"),
        ("top_h", 1.5, r"a float in \(0, 1\]"),
        ("repetition_penalty", 0.0, r"a float > 0 \(1: no penalty\)"),
    ],
)
def test_a_value_transformers_refuses_is_refused_naming_the_option(
    model: Any, option: str, value: Any, allowed: str
) -> None:
    """Named as the config's option, not as the chain stage it would become; transformers refuses it too."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = GenerationConfig(do_sample=True, eos_token_id=EOS, **{option: value})
    named = rf"generation_chain: the generation config's {option}={value!r} is invalid, as transformers' generate"
    with pytest.raises(dk.ParameterError, match=rf"{named}.*; allowed: {allowed}$"):
        generation_chain(config)
    with pytest.raises(ValueError):
        hf_processors(model, config)


def test_min_length_needs_the_prompt_length() -> None:
    config = GenerationConfig(min_length=10, eos_token_id=EOS)
    with pytest.raises(dk.ParameterError, match=r"min_length=10 counts the prompt.*prompt_length=N"):
        generation_chain(config)
    assert generation_chain(config, prompt_length=4) == f"min_new_tokens(6, [{EOS}]) | greedy"
    assert generation_chain(config, prompt_length=12) == "greedy"
    both = GenerationConfig(min_length=10, min_new_tokens=2, eos_token_id=EOS)  # min_new_tokens wins, as in HF
    assert generation_chain(both) == f"min_new_tokens(2, [{EOS}]) | greedy"


def test_a_directory_a_model_and_an_hfmodel_give_their_config(tmp_path: Path, build_gpt2: Callable[..., Any]) -> None:
    hf = build_gpt2(seed=1)
    assert generation_chain(tmp_path) == "greedy"  # no generation_config.json: generate()'s defaults
    hf.generation_config = GenerationConfig(do_sample=True, temperature=0.7, top_k=20, eos_token_id=EOS)
    hf.save_pretrained(tmp_path)
    expected = "temperature(0.7) | top_k(20) | sample"
    assert generation_chain(tmp_path) == generation_chain(hf) == generation_chain(HFModel(hf)) == expected
    assert HFModel(hf).generation_defaults(None, ["chain"]) == {"chain": expected}
    with pytest.raises(dk.ParameterError, match="is not a directory"):
        generation_chain(tmp_path / "missing")
    with pytest.raises(dk.ParameterError, match="source=int is invalid"):
        generation_chain(3)


def test_no_default_chain_without_sampling_options(build_gpt2: Callable[..., Any]) -> None:
    """A model whose generation config only carries token ids (derived from its config, as for a checkpoint
    without generation_config.json) leaves the caller's default; one that refuses raises on reading."""
    hf = build_gpt2(seed=1)
    assert HFModel(hf).generation_defaults(None, ["chain"]) == {}
    hf.generation_config = GenerationConfig(num_beams=2, do_sample=True, eos_token_id=EOS)
    with pytest.raises(dk.ParameterError, match="num_beams=2"):
        HFModel(hf).generation_defaults(None, ["chain"])


GREEDY: list[dict[str, Any]] = [
    {"repetition_penalty": 1.8},
    {"no_repeat_ngram_size": 2, "sequence_bias": [[[5, 17], -3.0], [[9], 2.5]]},
    {"bad_words_ids": [[3], [8, 9]], "suppress_tokens": [44, 60], "begin_suppress_tokens": [2]},
    {"min_new_tokens": 12, "exponential_decay_length_penalty": (4, 1.5), "repetition_penalty": 1.2},
    {"temperature": 0.5, "top_k": 3, "top_p": 0.5},  # do_sample=False: the warpers are not applied
    {"watermarking_config": {"bias": 4.0, "seeding_scheme": "selfhash", "context_width": 2}},
]


@pytest.mark.parametrize("options", GREEDY, ids=lambda o: ",".join(o))
def test_greedy_generate_equals_dk_generate(build_gpt2: Callable[..., Any], options: dict[str, Any]) -> None:
    hf = build_gpt2(seed=2)
    eos = [EOS, 60]
    config = GenerationConfig(do_sample=False, eos_token_id=eos, pad_token_id=0, max_new_tokens=40, **options)
    prompt = [5, 17, 3, 9, 44, 2, 8, 8, 9, 60]
    with generation_config(hf, config), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = hf.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long))
    model = HFModel(hf)
    with generation_config(hf, config):
        text = model.generation_defaults(None, ["chain"])["chain"]  # type: ignore[index]  # it has a config
    assert text is not None
    ours = dk.generate(model, [prompt], chain=text, max_new_tokens=40, stop_tokens=eos, cache="dense")
    assert ours.tokens[0] == theirs[0, len(prompt) :].tolist()


def test_suppressed_ids_past_the_vocabulary_are_dropped_as_transformers_ignores_them(model: Any) -> None:
    """transformers' suppressions mask `isin(vocabulary, ids)`: an id past the vocabulary does nothing, where a
    bad_words stage would refuse it. A source that knows its vocabulary (a model, a directory) drops it."""
    config = GenerationConfig(suppress_tokens=[1, VOCAB + 5], begin_suppress_tokens=[2, VOCAB], eos_token_id=EOS)
    with generation_config(model, config):
        text = generation_chain(model)
        assert (
            text
            == generation_chain(HFModel(model))
            == HFModel(model).generation_defaults(None, ["chain"])["chain"]  # type: ignore[index]
            == "bad_words([[1]]) | min_new_tokens(1, [2]) | greedy"
        )
        processors = hf_processors(model, config)
    chain = dk.Chain.parse(text)
    for step in STEPS:
        tokens, logits = histories(step, step)
        ours = chain.process(logits, dk.DecodeContext(tokens=tokens, step=step))
        assert_same_scores(ours, processors(tokens, logits.clone()))


def test_ids_past_the_models_vocabulary_are_named_or_dropped_as_transformers_takes_them(model: Any) -> None:
    """From the generation-config fuzz: a bad word past the vocabulary or negative (transformers refuses both) is
    refused as the config's bad_words_ids, not as the chain's bad_words stage; an empty one, which transformers
    ignores, bans nothing (the stage refused it); an EOS id outside the vocabulary, which transformers' masks never
    meet, is left out of the length stages (its min_new_tokens stage refused it)."""
    for words, top in (([[3], [VOCAB]], VOCAB), ([[3, -1]], 2**63)):
        model.generation_config = GenerationConfig(bad_words_ids=words, eos_token_id=EOS)
        named = f"the generation config's bad_words_ids={words!r} is invalid, as transformers' generate() finds it too"
        allowed = f"allowed: a list of lists of ids in [0, {top})"
        with pytest.raises(dk.ParameterError, match=re.escape(f"{named}; {allowed}")):
            generation_chain(model if top == VOCAB else model.generation_config)  # a bare config: no vocabulary
        with pytest.raises(ValueError):
            hf_processors(model, model.generation_config)
    assert generation_chain(GenerationConfig(bad_words_ids=[[], [4]], eos_token_id=EOS)) == "bad_words([[4]]) | greedy"
    model.generation_config = GenerationConfig(min_new_tokens=2, eos_token_id=[EOS, VOCAB, -1])
    assert generation_chain(model) == f"min_new_tokens(2, [{EOS}]) | greedy"


@pytest.mark.parametrize(
    ("option", "value", "allowed"),
    [
        ("bad_words_ids", [3, 4], "a list of lists of ids in [0, 9223372036854775808)"),
        ("eos_token_id", 1.5, "a token id or a list of token ids"),
        ("eos_token_id", "3", "a token id or a list of token ids"),
        ("suppress_tokens", "3", "a token id or a list of token ids"),
        ("begin_suppress_tokens", [1.5], "a token id or a list of token ids"),
        ("min_new_tokens", 1.5, "an integer >= 0"),
    ],
)
def test_a_value_of_the_wrong_type_is_refused_naming_the_option(option: str, value: Any, allowed: str) -> None:
    """From the generation-config fuzz (a generation_config.json written by hand): a flat bad_words_ids or an EOS id of
    1.5 crashed with a TypeError; '3' as EOS or as suppressed ids, min_new_tokens=1.5 were read as 3 and 1, where
    generate() fails on them."""
    config = GenerationConfig(eos_token_id=EOS, min_new_tokens=2)
    setattr(config, option, value)  # as loaded from a file: GenerationConfig does not check the type
    named = re.escape(f"the generation config's {option}={value!r} is invalid")
    for read in (generation_chain, generation_options):
        with pytest.raises(dk.ParameterError, match=rf"{named}.*; allowed: {re.escape(allowed)}$"):
            read(config)
