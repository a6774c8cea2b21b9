"""What every line of a batch job is decoded with, and the record of it kept beside the output.

`--resume` compares the recorded settings with its own and refuses to mix: a different input
file, model, chain, cache, strategy, seed, length (a model's `max_length`, which counts each line's prompt, too),
stop string, `--include-stop`, `--ignore-eos`, prompt encoding, `--logprobs` or `--prompt-logprobs` would give
results that an uninterrupted run would not. Settings of format 1 (before `ignore_eos` was recorded) are read as
format 2 reads them: those jobs went on past the model's EOS, as `--ignore-eos` does now. Formats 1 and 2 wrote
logprobs without token texts: an output whose records hold such logprobs is refused (`batch_output`), else continued
as format 3 (its records are what format 3 writes). Settings without
`logprobs` and `prompt_logprobs` (recorded since) read as None: those jobs asked for none; without `max_length`, as
None too: those jobs' lines had `max_new_tokens`; without `n`, as None: one sequence a line; without `include_stop`,
as False: those jobs cut the stop string.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from decodekit.errors import DecodekitError
from decodekit_cli.canonical import canonical_model, canonical_stage
from decodekit_cli.errors import CliError

if TYPE_CHECKING:
    from decodekit.chain import Chain
    from decodekit.plugins import Registry
    from decodekit_cli.sampling_options import SamplingOptions

__all__ = [
    "FORMAT",
    "MIXED_SAMPLE_0",
    "UNTEXTED_LOGPROBS",
    "BatchSettings",
    "differences",
    "parsed_chain",
    "parsed_chain_cache",
    "upgraded",
]

# Of the recorded settings; a change that alters results must change it (2: stops at the model's EOS; 3: logprobs
# give each token's text, `text` and `top_texts`; 4: a line's sample 0 is drawn from the line's seed, as `generate -n`).
FORMAT = 4
UNTEXTED_LOGPROBS = 2  # the last format whose logprobs give token ids alone
MIXED_SAMPLE_0 = 3  # the last format whose n samples were all drawn from mix_seed(seed, k), sample 0 too
MAX_SEED = 2**64  # what dk.validate allows, checked here before a model loads


def parsed_chain(text: str) -> Chain:
    """A chain string, parsed once per registry (every line of a file usually shares one)."""
    from decodekit.plugins import get_registry

    return parsed_chain_cache(get_registry(), text)


@lru_cache(maxsize=64)
def parsed_chain_cache(registry: Registry, text: str) -> Chain:
    """Keyed by the registry too: a chain parsed where `top_k` was enabled is not one where it is disabled."""
    from decodekit.chain import Chain

    return Chain.parse(text)


@dataclass(frozen=True)
class BatchSettings:
    """The defaults of every line and the options that apply to all of them. Plain data, so a Ray
    actor gets it as is."""

    model: str
    chain: str  # the default chain as written; a line's record shows the chain text it used
    max_new_tokens: int
    seed: int | None
    cache: str
    stop: tuple[str, ...] = ()
    include_stop: bool = False  # the stop string that ended a line stays in its text
    strategy: str = "sample"
    replace_unknown: bool = False
    ignore_eos: bool = False  # go on past the model's stop tokens (those follow from `model`)
    threads: int | None = None  # not recorded: no result depends on it
    compile: bool = False  # not recorded: no result depends on it (--resume with or without it continues)
    logprobs: int | None = None  # every line's default: the generated tokens' logprobs in its record
    prompt_logprobs: int | None = None  # the prompt tokens'
    # A length that counts the prompt (a checkpoint's max_length): a line's default max_new_tokens is it less the
    # line's prompt tokens, as generate() gives each prompt; then max_new_tokens is no line's and recorded as None.
    max_length: int | None = None
    n: int | None = None  # every line's default sequences (-n, or the model's own); None: one, or beam's own count
    # `chain` is the model's own (an empty prompt's): a line without its own asks the model for its prompt's (a
    # checkpoint's min_length counts it), these options set over it as they set the job's. Not recorded: `chain` is.
    chain_over: SamplingOptions | None = None

    def __post_init__(self) -> None:
        if self.seed is not None and not 0 <= self.seed < MAX_SEED:
            raise CliError(f"--seed {self.seed} is invalid; allowed: an integer, 0 <= seed < 2**64")

    def recorded(self, input_sha256: str) -> dict[str, Any]:
        """What the output's settings file holds: everything a result depends on."""
        return {
            "format": FORMAT,
            "input_sha256": input_sha256,
            "model": self.model,
            "chain": str(parsed_chain(self.chain)),  # canonical: top_k(5) and top_k(k=5) are one chain
            "cache": canonical_stage("cache backend", self.cache),  # window(64) and window(size=64) are one cache
            "strategy": canonical_stage("strategy", self.strategy),
            "seed": self.seed,
            "max_new_tokens": self.max_new_tokens if self.max_length is None else None,
            "max_length": self.max_length,  # absent from settings recorded before it: None, as it was
            "stop": list(self.stop),
            "include_stop": self.include_stop,  # absent from settings recorded before it: False, as it was
            "replace_unknown": self.replace_unknown,
            "ignore_eos": self.ignore_eos,
            "logprobs": self.logprobs,
            "prompt_logprobs": self.prompt_logprobs,
            "n": self.n,  # absent from settings recorded before it: None, as it was
        }


def upgraded(recorded: dict[str, Any]) -> dict[str, Any]:
    """Recorded settings as this format writes them: format 1 had no `ignore_eos` and went on past EOS, and the
    model, cache and strategy were recorded as typed before they were recorded canonical."""
    if recorded.get("format") == 1 and "ignore_eos" not in recorded:
        recorded = {**recorded, "format": UNTEXTED_LOGPROBS, "ignore_eos": True}
    recorded = {"include_stop": False, **recorded}  # recorded since --include-stop: before, the stop string was cut
    try:
        return {
            **recorded,
            "model": canonical_model(recorded["model"]),
            "cache": canonical_stage("cache backend", recorded["cache"]),
            "strategy": canonical_stage("strategy", recorded["strategy"]),
        }
    except (DecodekitError, KeyError, TypeError):  # a plugin not installed now, or a setting missing: as written
        return recorded


def differences(recorded: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """Each setting that differs, as `name=recorded (this run: current)`."""
    found = []
    for key in current:
        old, new = recorded.get(key), current[key]
        if old == new:
            continue
        if key == "input_sha256":
            found.append(f"another input (sha256 {str(old)[:12]}…; this input: {str(new)[:12]}…)")
        else:
            found.append(f"{key}={_shown(old)} (this run: {_shown(new)})")
    return found


def _shown(value: Any) -> str:
    return "not set" if value is None else repr(value)  # not Python's None: a setting the run was not given
