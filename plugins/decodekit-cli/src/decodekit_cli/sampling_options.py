"""The sampling options `decodekit generate`, its `--input` batch mode and `decodekit explain` share,
and what they do with them.

`app.py` builds one `SamplingOptions` from the command line; a prompt, a file of prompts and an
explained prompt are then checked, loaded and encoded the same way. Nothing here imports torch until a model loads.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from decodekit_cli.defaults import DEFAULT_MODEL
from decodekit_cli.errors import CliError, report_note, report_warning
from decodekit_cli.options import (
    FLAT_STAGES,
    chain_text,
    check_installed,
    check_replace_unknown,
    encode_prompt,
    load_named_model,
    resolve_cache,
    resolve_strategy,
)

__all__ = ["ModelSettings", "SamplingOptions", "eos_tokens", "set_threads"]


def set_threads(model: object, threads: int | None) -> None:
    """`--threads N`: torch on N threads. Without it the library decides, as for any caller: one
    thread for a small model (`decodekit.threads`).

    N is checked here, on the machine that runs the model (a Ray actor's may not be this one):
    more threads than CPUs only slow torch down, and a count far above them crashes the process
    in its OpenMP runtime (a segfault, or libgomp's abort) instead of failing cleanly."""
    import torch

    from decodekit.threads import usable_cpus

    if threads is None:
        return
    cpus = usable_cpus()
    if threads > cpus:
        raise CliError(
            f"--threads {threads}: more than the {cpus} CPUs this process can use; allowed: 1 <= N <= {cpus}"
        )
    torch.set_num_threads(threads)


def eos_tokens(model: object, ignore_eos: bool) -> tuple[int, ...]:
    """The ids that end a sample: the model's own `stop_tokens` (an HF model's EOS), none with `--ignore-eos`.

    The library stops only on the stop tokens it is given; the command line stops where transformers'
    `generate()` stops by default. A model without `stop_tokens` (tiny-shakespeare) has none."""
    return () if ignore_eos else tuple(getattr(model, "stop_tokens", None) or ())


@dataclass(frozen=True)
class SamplingOptions:
    """The options `decodekit generate`, its batch mode and `decodekit explain` share, as given."""

    model: str | None
    chain: str | None
    flags: dict[str, float | int | None]
    max_new_tokens: int
    seed: int | None
    cache: str | None
    stop: tuple[str, ...]
    include_stop: bool = False  # the stop string that ended a sample stays in its text (vLLM's name is longer)
    threads: int | None = None
    replace_unknown: bool = False
    compile: bool = False  # the model's forward and the chain's step under torch.compile: the same tokens, faster
    ignore_eos: bool = False  # go on past the model's stop tokens (vLLM's name)
    grammar: str | None = None  # a grammar stage (--json-schema, --regex, --grammar), first in the chain
    length_given: bool = True  # False: no --max-new-tokens, so a model's own length may replace max_new_tokens

    def seeded(self) -> SamplingOptions:
        """These options with a seed: the one given, else one drawn now, so that `--json` records what reproduces
        the run (a batch job draws one per line instead: its settings record the `--seed` as given)."""
        return self if self.seed is not None else replace(self, seed=secrets.randbits(63))

    def check(self) -> tuple[str, str]:
        """Check what is installed and the cache before any model loads; return the model's name and the cache."""
        if self.grammar is None:
            check_installed(self.model, self.chain, self.flags)
        else:
            check_installed(self.model, self.chain_text(), {})
        cache = resolve_cache(self.cache)
        return DEFAULT_MODEL if self.model is None else self.model, cache  # check_installed found it

    def chain_text(self, default: str | None = None) -> str:
        """The chain string of the options (`options.chain_text`; `default`: the model's own chain), with the
        grammar stage first."""
        text = chain_text(self.chain, self.flags, default)
        return text if self.grammar is None else f"{self.grammar} | {text}"

    def model_settings(
        self, model: object, strategy: str | None, prompt_length: int | None = None, samples_given: bool = True
    ) -> ModelSettings:
        """What the model offers for the options not given (`--chain`, `--strategy`, `--max-new-tokens`, `--stop`,
        `-n` where `samples_given` is False: its `num_return_sequences`, samples or beams),
        said in one line on stderr: its optional `generation_defaults(prompt_length, keys)` (an hf: checkpoint's
        generation config), asked for those options alone, the sampling flags set over its chain. `strategy`:
        `--strategy` as given (None: not given). `prompt_length`: None for a batch job, whose lines each have their
        own (a length that counts the prompt is then `ModelSettings.max_length`)."""
        defaults = self._model_defaults(model, strategy, prompt_length, samples_given)
        chain, what = self._model_chain(defaults.get("chain"), defaults.get(_ONE_TOKEN))
        own, length, total, stops = (
            defaults.get(key) for key in ("strategy", "max_new_tokens", "max_length", "stop_strings")
        )
        said = [(what, "--chain")] if chain is not None else []
        said += [(f"strategy {str(own)!r}", "--strategy")] if own is not None else []
        said += [(f"max_new_tokens {length}", "--max-new-tokens")] if length is not None else []
        said += [(f"max_length {total} less each prompt's tokens", "--max-new-tokens")] if total is not None else []
        said += [(f"stop strings {list(stops)!r}", "--stop")] if stops else []
        said += [(f"num_return_sequences {count}", "-n")] if (count := defaults.get("num_return_sequences")) else []
        if said:
            verb = "sampling" if (own if own is not None else strategy) in (None, "sample") else "decoding"
            flags = ", ".join(flag for _, flag in said)
            verbs = "replaces it" if len(said) == 1 else "replace them"
            report_note(f"{verb} with the model's own {', '.join(part for part, _ in said)}; {flags} {verbs}")
        if chain is not None:
            given = {flag: self.flags[flag] for flag, _, _ in FLAT_STAGES if self.flags.get(flag) is not None}
            _warn_unpicked(chain, given, str(own) if own is not None else strategy)
        options = self if length is None else replace(self, max_new_tokens=int(length))
        options = replace(options, stop=tuple(str(stop) for stop in stops)) if stops else options
        strategy = None if own is None else resolve_strategy(str(own))
        return ModelSettings(chain, strategy, options, total, None if count is None else int(count))

    def _model_defaults(
        self, model: object, strategy: str | None, prompt_length: int | None, samples_given: bool
    ) -> Mapping[str, Any]:
        """The model's optional `generation_defaults`, asked only for the options not given: a checkpoint's own
        setting that it refuses (beam sampling, a prompt past `max_length`) is then no error beside its flag."""
        wanted = {
            "chain": self.chain is None,
            "strategy": strategy is None,
            "max_new_tokens": not self.length_given,
            "stop_strings": not self.stop,
            "num_return_sequences": not samples_given,
        }
        keys = [key for key, want in wanted.items() if want]
        defaults = getattr(model, "generation_defaults", None)  # optional: a plugin's model may offer its own
        if not keys or not callable(defaults):
            return {}
        if prompt_length is not None or "chain" not in keys:
            return defaults(prompt_length, keys) or {}
        # A batch job: the chain an empty prompt gets (a checkpoint's min_length counts the prompt), which it records;
        # each line's is asked for its own prompt (`BatchSettings.chain_over`).
        # A one-token prompt's chain too, which says what of it each line's prompt changes (for the note).
        rest = [key for key in keys if key != "chain"]
        one = _chain_of_one_token(defaults)
        return {**((defaults(None, rest) if rest else None) or {}), **(defaults(0, ["chain"]) or {}), _ONE_TOKEN: one}

    def _model_chain(self, default: object, one_token: object = None) -> tuple[str | None, str]:
        """The model's own chain (None: it has none) with the sampling flags set over it, and what says so
        (`one_token`: a batch job's model's chain for a one-token prompt, where `default` is an empty prompt's)."""
        if default is None:
            return None, ""
        text = self.chain_text(str(default))
        check_installed(self.model, text, {})
        given = [flag for flag, _, _ in FLAT_STAGES if self.flags.get(flag) is not None]
        over = f", with {', '.join(given)} set over it" if given else ""
        if one_token is not None and one_token != default:
            return text, f"chain {_per_line(str(default), str(one_token))!r} for each line{over}"
        return text, f"chain {str(default)!r}{over}"

    def load_model(self, name: str) -> Any:
        """Load the model `check` named, on `--threads` CPU threads."""
        model = load_named_model(name)
        if self.replace_unknown:
            check_replace_unknown(model)
        set_threads(model, self.threads)
        return model

    def encode(self, model: Any, prompt: str) -> list[int]:
        """The prompt as the model's tokenizer encodes it (see `--replace-unknown`); at least one token."""
        encoded = encode_prompt(model, prompt, self.replace_unknown)
        if not encoded:  # the library would say "prompts: row 0 is empty", which names no option
            raise CliError(f"PROMPT {prompt!r} is empty (no tokens); allowed: text of at least one token")
        return encoded

    def seen_prompt(self, model: Any, prompt: str, encoded: list[int]) -> str:
        """The prompt as the model saw it, to echo and report: with `--replace-unknown`, its tokens' text."""
        tokenizer = getattr(model, "tokenizer", None)
        if not self.replace_unknown or tokenizer is None:
            return prompt
        return str(tokenizer.decode(encoded))  # the replaced characters shown as what replaced them


_ONE_TOKEN = "chain of a one-token prompt"  # a batch job's key beside the model's defaults, for the note


def _per_line(empty: str, one: str) -> str:
    """The chain a model gives an empty prompt (`empty`), written as each line's: a number that a one-token
    prompt's chain (`one`) lowers counts the prompt (a checkpoint's min_length): "n=11 less the line's prompt
    tokens"."""
    import decodekit as dk

    ones = {stage["name"]: stage["params"] for stage in dk.Chain.parse(one).to_spec()}
    stages = []
    for stage in dk.Chain.parse(empty).to_spec():
        name, theirs = stage["name"], ones.get(stage["name"], {})
        params = [
            f"{k}={v!r}" + (" less the line's prompt tokens" if _lowered(v, theirs.get(k)) else "")
            for k, v in stage["params"].items()
        ]
        stages.append(f"{name}({', '.join(params)})" if params else name)
    return " | ".join(stages)


def _chain_of_one_token(defaults: Any) -> object:
    """The model's chain for a one-token prompt; None where it refuses one (a checkpoint's max_length of 1)."""
    from decodekit.errors import DecodekitError

    try:
        return (defaults(1, ["chain"]) or {}).get("chain")
    except DecodekitError:
        return None


def _lowered(value: object, by_one_token: object) -> bool:
    """Whether a number is lower under a one-token prompt (absent there: the prompt took it to nothing)."""
    return type(value) is int and (by_one_token is None or (type(by_one_token) is int and by_one_token < value))


@dataclass(frozen=True)
class ModelSettings:
    """What a model's own settings replace: its chain string and strategy (None: the options' stand), the options
    with its length and, for a batch job, a length that counts each prompt (a checkpoint's `max_length`); the
    sequences it returns per prompt (None: one, or the options' `-n`)."""

    chain: str | None
    strategy: str | None
    sampling: SamplingOptions
    max_length: int | None = None
    num_samples: int | None = None  # the model's num_return_sequences: samples, or beams returned (`-n`)


def _warn_unpicked(text: str, given: dict[str, Any], strategy: str | None) -> None:
    """A flag that reshapes the distribution does nothing to a greedy pick (transformers, too, ignores temperature
    when its config does not sample): say so rather than leave the user wondering. Beam search picks by no selector
    and ranks beams by their summed processed log-probabilities: a temperature last among the stages scales every
    score alike, so it can change nothing (refused); a truncation (top-k, top-p, ...) drops candidates, which
    transformers' beams (without do_sample) would keep."""
    from decodekit.chain_string import parse_stage
    from decodekit_cli.batch_settings import parsed_chain

    shaping = [flag for flag in given if flag != "--repetition-penalty"]
    if not shaping:
        return
    flags = ", ".join(shaping)
    if strategy is not None and parse_stage(strategy, what="--strategy").name == "beam":
        last = [getattr(stage, "name", None) for stage in parsed_chain(text).processors][-1:]
        if shaping == ["--temperature"] and last == ["temperature"]:  # no stage after it that its scale could move
            raise CliError(
                f"--temperature {given['--temperature']}: beam search ranks its beams by their summed "
                "log-probabilities, which a last temperature scales alike, so it cannot change them (transformers' "
                "generate() ignores it too without do_sample); allowed: no --temperature, or --strategy sample"
            )
        report_warning(
            f"beam search ranks its candidates by the log-probabilities after the chain's stages, so {flags} changes "
            "which it keeps, where transformers' generate() (without do_sample) ignores it; to sample instead, give "
            "--strategy sample and the whole chain: --chain '... | sample'"
        )
    elif getattr(parsed_chain(text).selector, "name", None) == "greedy":
        report_warning(
            f"the model's own chain ends in greedy, whose pick {flags} cannot change; to sample, give "
            "the whole chain: --chain '... | sample'"
        )
