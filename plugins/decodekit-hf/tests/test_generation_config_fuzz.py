"""Fuzz of a checkpoint's generation config: hypothesis-drawn `GenerationConfig`s (every option `generation_options`
reads, with hostile values: NaN, infinities, zero and negative counts, ids past the vocabulary, empty lists) through
`generation_options` and `dk.decode`, and through `decodekit generate --model hf:DIR`.

Each config ends one of three ways: transformers refuses to build it (not ours to judge); `generation_options` or the
decode raises a decodekit error naming an option the config sets; or it decodes, and where the decode is greedy (or
beam search, or guided greedy) its tokens are `model.generate()`'s with the same config. A crash, an error naming
nothing the config sets, or other tokens is a finding. The command line with the config saved in a checkpoint ends
in a documented status without a traceback. The cases are the same on every run (`derandomize`);
DECODEKIT_HF_CONFIG_FUZZ_EXAMPLES=2000 runs more (the suite runs 150 configs and 15 commands)."""

from __future__ import annotations

import json
import math
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from cli_runner import cli_captured
from decodekit_hf import HFModel, generation_options
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from transformers import GenerationConfig

import decodekit as dk

EXAMPLES = int(os.environ.get("DECODEKIT_HF_CONFIG_FUZZ_EXAMPLES", "150"))
VOCAB, EOS = 96, 95
PROMPT = [5, 17, 3, 9, 44, 2, 8, 8, 9, 60]
GENERATE_FAILED = "note: generate() fails where decodekit decodes"  # counted by a campaign, not a failure
DEFAULT_NEW = 10  # what generate()'s own max_length=20 leaves the prompt: the length where the config sets none

NAN, INF = math.nan, math.inf
ID = st.sampled_from([0, 3, 8, 9, EOS, VOCAB, -1, 2**63, 10**10])
WRONG = st.sampled_from(["3", 1.5, [1.5], None, True])  # values of the wrong type, as a hand-written file may hold
IDS = st.lists(ID, max_size=3)
FLOAT = [NAN, INF, -INF, -1.0, 0.0, 1e-300, 5e-324, 1e308]
# option: values from usual to hostile (transformers refuses to build some configs: those cases end there)
OPTIONS: dict[str, st.SearchStrategy[Any]] = {
    "do_sample": st.booleans(),
    "num_beams": st.sampled_from([1, 2, 3, 0, -1, 2.5, "2"]),
    "temperature": st.sampled_from([0.7, 1.0, 1.5, 1e4, *FLOAT]),
    "top_k": st.sampled_from([1, 5, 50, 0, -1, 10**9, 2**63]),
    "top_p": st.sampled_from([0.5, 0.9, 1.0, 1.5, *FLOAT]),
    "min_p": st.sampled_from([0.05, 0.5, 1.0, 2.0, *FLOAT]),
    "typical_p": st.sampled_from([0.5, 0.95, 1.0, 2.0, *FLOAT]),
    "epsilon_cutoff": st.sampled_from([3e-4, 0.02, 1.0, *FLOAT]),
    "eta_cutoff": st.sampled_from([3e-4, 0.02, 1.0, *FLOAT]),
    "repetition_penalty": st.sampled_from([1.2, 0.8, 1.0, 1e4, *FLOAT]),
    "no_repeat_ngram_size": st.sampled_from([0, 1, 2, 3, -1, 10**9]),
    "encoder_repetition_penalty": st.sampled_from([1.0, 1.3]),
    "encoder_no_repeat_ngram_size": st.sampled_from([0, 2]),
    "min_length": st.sampled_from([0, 5, 12, 15, -1, 10**9]),
    "min_new_tokens": st.sampled_from([0, 1, 3, -1, 10**9, 1.5]),
    "max_length": st.sampled_from([11, 14, 18, 10, 5, 0, -1, 10**9]),
    "max_new_tokens": st.sampled_from([0, 1, 4, 8, -1, 10**9, 2.5, "4"]),
    "bad_words_ids": st.one_of(
        st.lists(st.lists(ID, min_size=1, max_size=2), min_size=1, max_size=2), st.sampled_from([[[]], [3, 4], [[1.5]]])
    ),
    "suppress_tokens": st.one_of(IDS, WRONG),
    "begin_suppress_tokens": IDS,
    "forced_bos_token_id": ID,
    "forced_eos_token_id": ID,
    "guidance_scale": st.sampled_from([1.0, 1.5, 3.0, 0.0, -2.0, NAN, INF, 1e300]),
    "num_return_sequences": st.sampled_from([1, 2, 3, 0, -1]),
    "stop_strings": st.sampled_from(["a", ["a", "b"], ".", [""], [], ["ab", 5], 5, [["a"]]]),
    "early_stopping": st.sampled_from([True, False, "never", "sometimes", 2]),
    "length_penalty": st.sampled_from([1.0, 0.0, -0.5, 2.0, NAN, INF]),
    "eos_token_id": st.one_of(ID, IDS, st.none(), WRONG),
    "pad_token_id": st.sampled_from([0, EOS, None]),
}


def configs() -> st.SearchStrategy[dict[str, Any]]:
    """Each option set or not: a few at a time (a config with many hostile ones ends at its first refusal)."""
    return st.lists(st.sampled_from(sorted(OPTIONS)), max_size=6, unique=True).flatmap(
        lambda names: st.fixed_dictionaries({n: OPTIONS[n] for n in names})
    )


def build(options: dict[str, Any]) -> GenerationConfig | None:
    """The config, or None where transformers refuses to build it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return GenerationConfig(**options)
        except (ValueError, TypeError):
            return None


def trimmed_equal(ours: list[int], theirs: list[int], pad: int | None) -> bool:
    """`ours` is `theirs` up to where ours ended, and `generate()` padded the rest (a row it finished early)."""
    rest = theirs[len(ours) :]
    return theirs[: len(ours)] == ours and all(t == pad for t in rest)


def _named(error: Exception, options: dict[str, Any]) -> bool:
    text = str(error)
    return any(name in text for name in options) or "max_new_tokens" in text or "max_length" in text


def check(hf: Any, tokenizer: Any, options: dict[str, Any]) -> list[str]:
    """What is wrong with how decodekit takes this config (nothing, when it holds)."""
    config = build(options)
    if config is None:
        return []
    hf.generation_config = config
    try:
        got = generation_options(hf, prompt_length=len(PROMPT))
    except dk.DecodekitError as exc:
        return [] if _named(exc, options) else [f"generation_options refused naming no option set: {exc}"]
    got.setdefault("max_new_tokens", DEFAULT_NEW)
    try:
        ours = dk.decode(HFModel(hf, tokenizer), [PROMPT], seed=0, **got)
    except dk.DecodekitError as exc:
        return [] if _named(exc, options) else [f"decode refused naming no option set: {type(exc).__name__}: {exc}"]
    problems = [f"{len(ours.tokens[0])} tokens, max_new_tokens={got['max_new_tokens']}"] * (
        len(ours.tokens[0]) > got["max_new_tokens"]
    )
    if got["chain"].endswith("greedy"):  # greedy, beam search, guided greedy: generate() decodes the same
        problems += _against_generate(hf, tokenizer, config, got, ours)
    return problems


def _against_generate(hf: Any, tokenizer: Any, config: GenerationConfig, got: dict[str, Any], ours: Any) -> list[str]:
    ids = torch.tensor([PROMPT])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            out = hf.generate(
                ids, attention_mask=torch.ones_like(ids), max_new_tokens=got["max_new_tokens"], tokenizer=tokenizer
            )
        except Exception as exc:  # transformers' own failure (ids past 2**63, eos []): nothing to compare
            return [f"{GENERATE_FAILED}: {type(exc).__name__}: {str(exc)[:200]}"]
    theirs = [row[len(PROMPT) :] for row in out.tolist()]
    pad = config.pad_token_id if config.pad_token_id is not None else _first(config.eos_token_id)
    rows = [list(s) for s in ours.sequences[0]] if got["strategy"] == "beam" else ours.tokens
    if len(rows) != len(theirs) or not all(trimmed_equal(a, b, pad) for a, b in zip(rows, theirs)):
        return [f"tokens {rows} where generate() gives {theirs} ({got})"]
    return []


def _first(eos: Any) -> int | None:
    return eos[0] if isinstance(eos, list) and eos else eos if isinstance(eos, int) else None


FUZZ = settings(
    max_examples=EXAMPLES,
    derandomize=True,  # the same cases on every run: a failure is a regression, never luck
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)


@pytest.fixture(scope="module")
def hf(build_gpt2: Callable[..., Any]) -> Any:
    return build_gpt2(seed=2)


@FUZZ
@given(configs())
def test_a_generation_config_decodes_as_generate_or_is_refused_by_name(
    hf: Any, char_tokenizer: Any, options: dict[str, Any]
) -> None:
    problems = [p for p in check(hf, char_tokenizer, options) if not p.startswith(GENERATE_FAILED)]
    assert not problems, f"{problems}\n{options!r}"


# -- the command line: the config saved with a checkpoint ------------------------------------------------------------

CLI_EXAMPLES = max(1, EXAMPLES // 10)
CLI_FLAGS = [[], ["-n", "2"], ["--strategy", "beam(num_beams=2)"], ["--temperature", "0.7"], ["--max-new-tokens", "4"]]


@pytest.fixture(scope="module")
def checkpoint(build_gpt2: Callable[..., Any], char_tokenizer: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model (not `hf`, whose config the cases above set) and tokenizer saved; each case writes its own
    generation_config.json."""
    path = tmp_path_factory.mktemp("ckpt")
    build_gpt2(seed=2).save_pretrained(path)
    char_tokenizer.save_pretrained(path)
    return path


def write_config(checkpoint: Path, options: dict[str, Any]) -> None:
    """The options as a checkpoint's generation_config.json, written by hand: save_pretrained would validate them
    (a file from elsewhere need not have been), and JSON takes NaN and Infinity as Python writes them."""
    (checkpoint / "generation_config.json").write_text(json.dumps(options))


@settings(FUZZ, max_examples=CLI_EXAMPLES)
@given(configs(), st.sampled_from(CLI_FLAGS))
def test_the_command_line_with_a_checkpoints_config_never_crashes(
    checkpoint: Path, capsys: Any, options: dict[str, Any], flags: list[str]
) -> None:
    write_config(checkpoint, options)
    status, out, err = cli_captured(capsys, "generate", "Hi", "-m", f"hf:{checkpoint}", "--json", *flags)
    assert status in (0, 1, 2) and "Traceback" not in err, f"{options!r} {flags}\nstatus {status}\n{err[-2000:]}"
    if status == 0:
        doc = json.loads(out)
        assert all(isinstance(s["tokens"], list) for s in doc["samples"])
    else:
        assert err.strip(), f"{options!r}: failed and said nothing"
