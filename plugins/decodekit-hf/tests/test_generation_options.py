"""`generation_options`: a checkpoint's generation config as `dk.decode` keyword arguments, against what
transformers' `generate()` does with the same config on tiny random models: beam search with its length penalty,
early stopping and returned sequences, classifier-free guidance, the length (`max_new_tokens`, `max_length` less the
prompt), the stops; options without a decodekit form still refused by name."""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
from decodekit_beam.search import BeamGeneration
from decodekit_hf import HFModel, generation_chain, generation_options
from transformers import GenerationConfig

import decodekit as dk

EOS = 95
PROMPT = [5, 17, 3, 9, 44, 2, 8, 8, 9, 60]


def hf_generate(hf: Any, config: GenerationConfig, prompt: list[int] = PROMPT) -> list[list[int]]:
    """`generate()` with the model's own config (set as it would be loaded), new tokens of each returned row."""
    hf.generation_config = config
    ids = torch.tensor([prompt])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the "default max_length" warning, where a test leaves it unset
        out = hf.generate(ids, attention_mask=torch.ones_like(ids))
    return [row[len(prompt) :] for row in out.tolist()]


# Stop ids the beams of the three weights below meet within a few steps, so that hypotheses end at different lengths
# and the length penalty and early stopping decide between them.
STOPS = [77, 13, 67, 58]


def trimmed(row: list[int]) -> list[int]:
    """A returned row up to its first stop id, included (transformers pads a finished row after it)."""
    end = next((i for i, t in enumerate(row) if t in STOPS), len(row) - 1)
    return row[: end + 1]


BEAM = dict(num_beams=3, length_penalty=0.6, early_stopping=True, eos_token_id=STOPS, pad_token_id=EOS)


@pytest.mark.parametrize(
    "extra",
    [
        dict(max_new_tokens=14),
        dict(max_new_tokens=14, length_penalty=-0.5, early_stopping=False, repetition_penalty=1.3),
        dict(max_new_tokens=10, early_stopping="never", num_return_sequences=2, no_repeat_ngram_size=2),
    ],
    ids=["penalty", "negative-penalty-heuristic", "never-two-sequences"],
)
def test_a_beam_checkpoint_decodes_as_generate_does(build_gpt2: Callable[..., Any], extra: dict[str, Any]) -> None:
    config = GenerationConfig(**(BEAM | extra))
    for seed in (1, 2, 3):  # some weights end hypotheses at EOS, some run to the length
        hf = build_gpt2(seed=seed)
        theirs = hf_generate(hf, config)
        options = generation_options(hf)
        assert options["strategy"] == "beam" and options["num_beams"] == 3
        assert options["length_penalty"] == config.length_penalty and options["early_stopping"] == config.early_stopping
        out = dk.decode(HFModel(hf), [PROMPT], **options)
        assert isinstance(out, BeamGeneration) and [list(s) for s in out.sequences[0]] == [
            trimmed(row) for row in theirs
        ]
        assert out.tokens[0] == trimmed(theirs[0])


def test_the_options_of_a_beam_config(build_gpt2: Callable[..., Any]) -> None:
    """Hand-written: the chain is the config's without num_beams (its processors, the selector unused), the length
    and stops are the config's."""
    config = GenerationConfig(**BEAM, max_new_tokens=9, repetition_penalty=1.2, stop_strings=["."])
    assert generation_options(config) == {
        "strategy": "beam",
        "num_beams": 3,
        "length_penalty": 0.6,
        "early_stopping": True,
        "num_return_sequences": 1,
        "chain": "repetition_penalty(1.2) | greedy",
        "max_new_tokens": 9,
        "stop_tokens": STOPS,
        "stop_strings": ["."],
    }
    hf = build_gpt2(seed=1)
    hf.generation_config = config
    model = HFModel(hf)
    assert model.generation_defaults(None, ["chain", "strategy", "max_new_tokens"]) == {
        "chain": "repetition_penalty(1.2) | greedy",
        "strategy": "beam(num_beams=3, length_penalty=0.6, early_stopping=True)",
        "max_new_tokens": 9,
    }


def test_guidance_scale_is_the_cfg_strategy(build_gpt2: Callable[..., Any]) -> None:
    config = GenerationConfig(guidance_scale=1.5, max_new_tokens=12, eos_token_id=None, pad_token_id=0)
    hf = build_gpt2(seed=2)
    theirs = hf_generate(hf, config)
    options = generation_options(hf)
    assert {k: options[k] for k in ("strategy", "scale", "chain")} == {
        "strategy": "cfg",
        "scale": 1.5,
        "chain": "greedy",
    }
    assert dk.decode(HFModel(hf), [PROMPT], **options).tokens == theirs
    assert HFModel(hf).generation_defaults(None, ["strategy"]) == {"strategy": "cfg(scale=1.5)"}


def test_max_new_tokens_stops_where_generate_stops(build_gpt2: Callable[..., Any]) -> None:
    hf = build_gpt2(seed=1)
    config = GenerationConfig(do_sample=False, max_new_tokens=7, eos_token_id=None, pad_token_id=0)
    theirs = hf_generate(hf, config)
    options = generation_options(hf)
    assert options == {"strategy": "sample", "chain": "greedy", "max_new_tokens": 7}
    out = dk.decode(HFModel(hf), [PROMPT], **options)
    assert len(theirs[0]) == 7 and out.tokens == theirs and out.finish_reasons == ["length"]


def test_max_length_counts_the_prompt(build_gpt2: Callable[..., Any]) -> None:
    """transformers' `_prepare_generated_length`: max_length less the prompt's width; max_new_tokens wins over it."""
    hf = build_gpt2(seed=1)
    config = GenerationConfig(max_length=len(PROMPT) + 4, eos_token_id=None, pad_token_id=0)
    theirs = hf_generate(hf, config)
    assert len(theirs[0]) == 4 and generation_options(hf, prompt_length=len(PROMPT))["max_new_tokens"] == 4
    assert "max_new_tokens" not in generation_options(hf)  # it counts a prompt that was not given
    assert HFModel(hf).generation_defaults(len(PROMPT), ["max_new_tokens"]) == {"max_new_tokens": 4}
    assert HFModel(hf).generation_defaults(None, ["max_new_tokens"]) == {"max_length": 4 + len(PROMPT)}
    both = GenerationConfig(max_length=30, max_new_tokens=6)
    assert generation_options(both, prompt_length=10)["max_new_tokens"] == 6
    with pytest.raises(dk.ParameterError, match=r"max_length=14 counts the prompt, and the prompt has 14 tokens"):
        generation_options(GenerationConfig(max_length=14), prompt_length=14)


def test_a_config_without_a_length_gives_none(build_gpt2: Callable[..., Any]) -> None:
    """transformers' own max_length=20 is its default, not the checkpoint's: the caller's length stands."""
    assert generation_options(GenerationConfig(do_sample=True, top_k=5)) == {
        "strategy": "sample",
        "chain": "top_k(5) | sample",
    }
    hf = build_gpt2(seed=1)
    assert HFModel(hf).generation_defaults(10, ["strategy", "max_new_tokens"]) == {}


@pytest.mark.parametrize(
    ("options", "named"),
    [
        (dict(num_beams=2, do_sample=True), "num_beams=2.*beam sampling"),
        (dict(num_beams=2, guidance_scale=2.0), "num_beams=2.*beam search with guidance_scale"),
        (dict(do_sample=True, num_return_sequences=3), "num_return_sequences=3.*-n N"),
        (dict(num_beams=2, penalty_alpha=0.6), "penalty_alpha=0.6"),
        (dict(guidance_scale=2.0, forced_bos_token_id=3), "forced_bos_token_id=3"),
    ],
)
def test_options_without_a_decodekit_form_are_refused_by_name(options: dict[str, Any], named: str) -> None:
    with pytest.raises(dk.ParameterError, match=named):
        generation_options(GenerationConfig(**options))


def test_generation_chain_still_refuses_beams(build_gpt2: Callable[..., Any]) -> None:
    """The chain alone cannot say "beam": generation_chain keeps its advice; the model's default chain is now the
    beam's chain, with the strategy beside it."""
    with pytest.raises(dk.ParameterError, match=r"--strategy 'beam\(num_beams=2"):
        generation_chain(GenerationConfig(num_beams=2))
    hf = build_gpt2(seed=1)
    hf.generation_config = GenerationConfig(num_beams=2, eos_token_id=EOS)
    assert HFModel(hf).generation_defaults(None, ["chain"]) == {"chain": "greedy"}


def test_generation_defaults_work_out_only_the_keys_asked(build_gpt2: Callable[..., Any]) -> None:
    """The command line asks only for the options it is not given: a config setting its refuses (beam sampling,
    min_length without a prompt, a prompt past max_length) is refused for the key that needs it alone."""
    hf = build_gpt2(seed=1)
    model = HFModel(hf)
    hf.generation_config = GenerationConfig(num_beams=2, do_sample=True, max_new_tokens=5, stop_strings=".")
    assert model.generation_defaults(None, ["max_new_tokens", "stop_strings"]) == {
        "max_new_tokens": 5,
        "stop_strings": ["."],
    }
    for key in ("chain", "strategy"):
        with pytest.raises(dk.ParameterError, match="num_beams=2"):
            model.generation_defaults(None, [key])
    hf.generation_config = GenerationConfig(do_sample=True, top_k=5, min_length=12, max_length=14, eos_token_id=EOS)
    assert model.generation_defaults(None, ["strategy", "max_new_tokens"]) == {"max_length": 14}
    with pytest.raises(dk.ParameterError, match="min_length"):
        model.generation_defaults(None, ["chain"])
    assert model.generation_defaults(10, ["chain"]) == {"chain": f"min_new_tokens(2, [{EOS}]) | top_k(5) | sample"}
    assert model.generation_defaults(20, ["chain"]) == {"chain": "top_k(5) | sample"}  # 12 already past
    with pytest.raises(dk.ParameterError, match="max_length=14 counts the prompt"):
        model.generation_defaults(20, ["max_new_tokens"])


def test_generation_defaults_leave_num_return_sequences_to_the_caller(build_gpt2: Callable[..., Any]) -> None:
    """generation_options refuses num_return_sequences without beams (a decode draws one sample per prompt); the
    command line draws -n samples of its own, so its defaults give the count only when asked for it (no -n)."""
    hf = build_gpt2(seed=1)
    hf.generation_config = GenerationConfig(do_sample=True, top_k=5, num_return_sequences=2)
    with pytest.raises(dk.ParameterError, match="num_return_sequences"):
        generation_options(hf)
    keys = ["chain", "strategy", "max_new_tokens", "stop_strings"]
    assert HFModel(hf).generation_defaults(3, keys) == {"chain": "top_k(5) | sample"}
    assert HFModel(hf).generation_defaults(3, ["num_return_sequences"]) == {"num_return_sequences": 2}


@pytest.mark.parametrize(
    ("options", "named"),
    [
        (dict(guidance_scale=float("nan")), r"guidance_scale=nan: strategy cfg: scale=nan is invalid"),
        (dict(guidance_scale=1e300), r"guidance_scale=1e\+300: .*; allowed: a number -10000 <= scale <= 10000$"),
        (dict(num_beams=2, length_penalty=float("inf")), r"length_penalty=inf: strategy beam"),
        (dict(num_beams=2, num_return_sequences=0), r"num_return_sequences=0: transformers' generate\(\) fails"),
        (dict(num_beams=0), r"num_beams=0: transformers' generate\(\) fails on it; allowed: an integer >= 1$"),
        (dict(num_beams=-1), r"num_beams=-1"),
        (dict(num_return_sequences=0), r"num_return_sequences=0"),
    ],
)
def test_a_value_the_strategy_refuses_is_named_as_the_configs_option(
    build_gpt2: Callable[..., Any], options: dict[str, Any], named: str
) -> None:
    """From the generation-config fuzz: these went through, then the decode named the strategy's parameter (`scale`,
    not `guidance_scale`), or (a count below one, on which generate() divides by zero) decoded greedily; the command
    line's defaults too (`decodekit generate -m hf:DIR` said "strategy cfg: scale=inf is invalid")."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = GenerationConfig(**options)
    with pytest.raises(dk.ParameterError, match=rf"generation_options: the generation config's {named}"):
        generation_options(config)
    hf = build_gpt2(seed=1)
    hf.generation_config = config
    with pytest.raises(dk.ParameterError, match=rf"generation_options: the generation config's {named}"):
        HFModel(hf).generation_defaults(None, ["strategy"])


def test_eos_ids_outside_the_vocabulary_are_not_stop_tokens(build_gpt2: Callable[..., Any]) -> None:
    """From the generation-config fuzz: as HFModel.stop_tokens, ids outside the vocabulary are left out (generate()
    never meets them); they were passed on as stop_tokens, which the decode refused."""
    hf = build_gpt2(seed=1)
    hf.generation_config = GenerationConfig(eos_token_id=[EOS, 96, -1], max_new_tokens=3, pad_token_id=0)
    options = generation_options(hf)
    assert options["stop_tokens"] == [EOS]
    assert dk.decode(HFModel(hf), [PROMPT], **options).tokens == hf_generate(hf, hf.generation_config)


@pytest.mark.parametrize("stops", [5, ["ab", 5], [["a"]]])
def test_stop_strings_that_are_not_strings_are_refused_by_name(build_gpt2: Callable[..., Any], stops: Any) -> None:
    """From the generation-config fuzz, a checkpoint's generation_config.json written by hand: `stop_strings: 5` was
    the command line's "unexpected TypeError: 'int' object is not iterable", `["ab", 5]` stopped at the text "5"."""
    hf = build_gpt2(seed=1)
    hf.generation_config = GenerationConfig(max_new_tokens=3)
    hf.generation_config.stop_strings = stops  # as loaded from a file: GenerationConfig does not check it
    named = f"generation config's stop_strings={stops!r}: transformers' generate() fails on it; allowed: a string or"
    reads: list[Callable[[], object]] = [
        lambda: generation_options(hf),
        lambda: HFModel(hf).generation_defaults(None, ["stop_strings"]),
    ]
    for read in reads:
        with pytest.raises(dk.ParameterError, match=re.escape(named)):
            read()
