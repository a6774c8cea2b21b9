"""`generation_chain(source)`: a checkpoint's `GenerationConfig` as the decodekit chain string that does what
transformers' `generate()` does with it.

transformers 5 fills every option the config leaves unset from `GenerationConfig._get_default_generation_params()`
(`do_sample=False`, `top_k=50`, ...), then `_get_logits_processor` appends its processors in a fixed order: the
ones that run under every strategy (sequence bias, repetition penalty, no-repeat n-grams, bad words, minimum
lengths, length decay, suppressions), then, with `do_sample=True` only, the warpers (temperature, top-H, top-k,
top-p, min-p, typical, epsilon, eta), then the watermark. The chain here lists the same stages in that order and ends
in `sample` or `greedy`. Options that no chain can express (beam search, classifier-free guidance, SynthID, ...) are
a `ParameterError` naming the option, its value and what to do.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from decodekit.errors import ParameterError
from decodekit_hf.tokenizer import as_ids

__all__ = ["CHAIN_OPTIONS", "generation_chain", "sets_sampling"]

# The options that choose the chain: a config that sets none of them leaves a model's default chain to the caller.
CHAIN_OPTIONS = (
    *("do_sample", "temperature", "top_k", "top_p", "min_p", "typical_p", "epsilon_cutoff", "eta_cutoff", "top_h"),
    *("repetition_penalty", "no_repeat_ngram_size", "bad_words_ids", "sequence_bias", "suppress_tokens"),
    *("begin_suppress_tokens", "min_new_tokens", "min_length", "exponential_decay_length_penalty", "num_beams"),
    *("guidance_scale", "watermarking_config", "forced_bos_token_id", "forced_eos_token_id", "penalty_alpha"),
    *("encoder_repetition_penalty", "encoder_no_repeat_ngram_size", "dola_layers", "diversity_penalty"),
    *("num_beam_groups", "renormalize_logits", "remove_invalid_values", "force_words_ids", "constraints"),
    "token_healing",
)


def sets_sampling(config: Any) -> bool:
    """Whether `config` (a `GenerationConfig`) sets any option that chooses the chain (`CHAIN_OPTIONS`).
    A config derived from the model's config (no `generation_config.json`) usually sets none."""
    return any(getattr(config, name, None) is not None for name in CHAIN_OPTIONS)


def generation_chain(source: Any, *, prompt_length: int | None = None) -> str:
    """The chain string that applies what transformers' `generate()` applies for `source`'s generation config.

    source: a `transformers.GenerationConfig`, a transformers model or an `HFModel` (their `generation_config`), or a
    checkpoint directory (its `generation_config.json`; a directory without one gives `generate()`'s defaults:
    greedy). prompt_length: the prompt's width, needed only for a config with `min_length`, which counts the prompt.

    The stop tokens that end a row are the config's `eos_token_id`: pass them to `dk.generate(stop_tokens=...)`
    (an `HFModel`'s `stop_tokens`). Stages that name them here (`min_new_tokens`, `exponential_decay`) take the
    same ids. Raises `ParameterError` for an option no decodekit chain expresses."""
    return _chain(_filled(_config_of(source)), prompt_length, _vocab_size(source))


def _chain(config: Any, prompt_length: int | None, vocab_size: int | None = None) -> str:
    eos = token_ids(config, "eos_token_id", vocab_size)
    _refuse_unexpressible(config, prompt_length)
    stages = _processors(config, eos, prompt_length, vocab_size)
    if config.do_sample:
        stages += _warpers(config)
    stages += _watermark(config)
    stages.append("sample" if config.do_sample else "greedy")
    return " | ".join(stages)


def _config_of(source: Any) -> Any:
    from transformers import GenerationConfig

    if isinstance(source, GenerationConfig):
        return source
    if isinstance(source, (str, Path)):
        path = Path(source).expanduser()
        if not path.is_dir():
            raise ParameterError(f"generation_chain: {str(source)!r} is not a directory; allowed: a checkpoint folder")
        if not (path / "generation_config.json").is_file():
            return GenerationConfig()  # type: ignore[no-untyped-call]  # generate() runs on the defaults alone
        return GenerationConfig.from_pretrained(str(path), local_files_only=True)
    model = getattr(source, "hf", source)  # an HFModel holds the transformers model
    config = getattr(model, "generation_config", None)
    if isinstance(config, GenerationConfig):
        return config
    raise ParameterError(
        f"generation_chain: source={type(source).__name__} is invalid; allowed: a transformers GenerationConfig, a "
        "transformers model or HFModel (its generation_config), or a checkpoint directory"
    )


def _vocab_size(source: Any) -> int | None:
    """The vocabulary of a model or a checkpoint directory (its config.json); None for a bare GenerationConfig."""
    if isinstance(source, (str, Path)):
        path = Path(source).expanduser() / "config.json"
        vocab = json.loads(path.read_text()).get("vocab_size") if path.is_file() else None
    else:
        vocab = getattr(getattr(getattr(source, "hf", source), "config", None), "vocab_size", None)
    return vocab if isinstance(vocab, int) else None


def _filled(config: Any) -> Any:
    """A copy with every unset option at transformers' default, as `_prepare_generation_config` fills it."""
    out = copy.deepcopy(config)
    out.update(**type(config)._get_default_generation_params(), defaults_only=True)
    return out


# Options that change what generate() does in a way no chain of decodekit's stages can: (why, what to do).
_STRATEGIES = "a decoding strategy, not a chain stage"


def _advice(c: Any, strategy: str, prompt_length: int | None, **unset: Any) -> str:
    """What to decode with instead: `strategy` and the chain of `c` with `unset` (spelled when it has one), as
    arguments and as a command line that runs as written (--strategy alone would meet this refusal again)."""
    other = copy.deepcopy(c)
    other.update(**unset)
    try:
        chain = _chain(other, prompt_length)
    except ParameterError:  # the config has another option no chain expresses: that error says what to do
        return f"strategy={strategy!r} (on the command line --strategy '{strategy}') and --chain"
    return f"strategy={strategy!r}, chain={chain!r} (on the command line --strategy '{strategy}' --chain '{chain}')"


def _refuse_unexpressible(c: Any, prompt_length: int | None = None) -> None:
    if c.num_beams > 1:
        stopping = f"length_penalty={c.length_penalty}, early_stopping={c.early_stopping!r}"
        strategy = f"beam(num_beams={c.num_beams}, {stopping})"
        if c.do_sample:
            raise _refused("num_beams", c.num_beams, "beam sampling (do_sample=true with beams) has no decodekit form")
        raise _refused(
            "num_beams",
            c.num_beams,
            f"beam search is {_STRATEGIES}; decode with {_advice(c, strategy, prompt_length, num_beams=1)}",
        )
    if c.guidance_scale is not None and c.guidance_scale != 1:
        strategy = f"cfg(scale={c.guidance_scale!r})"
        raise _refused(
            "guidance_scale",
            c.guidance_scale,
            f"classifier-free guidance is {_STRATEGIES} (decodekit-guidance); decode with "
            f"{_advice(c, strategy, prompt_length, guidance_scale=None)}",
        )
    checks: list[tuple[str, Callable[[Any], bool], str]] = [
        ("penalty_alpha", lambda v: v is not None and v > 0, f"contrastive search is {_STRATEGIES}"),
        ("force_words_ids", lambda v: v is not None, f"constrained beam search is {_STRATEGIES}"),
        ("constraints", lambda v: v is not None, f"constrained beam search is {_STRATEGIES}"),
        ("token_healing", lambda v: bool(v), "generate() first rewrites the prompt's last tokens, which no stage does"),
        ("dola_layers", lambda v: v is not None, f"DoLa is {_STRATEGIES}"),
        ("num_beam_groups", lambda v: v is not None and v > 1, f"group beam search is {_STRATEGIES}"),
        ("diversity_penalty", lambda v: v is not None and v != 0, "group beam search's penalty has no decodekit stage"),
        ("forced_bos_token_id", lambda v: v is not None, "a forced first token has no decodekit stage"),
        ("forced_eos_token_id", lambda v: v is not None, "forcing EOS at max_length needs the length, not a stage"),
        (
            "encoder_repetition_penalty",
            lambda v: v is not None and v != 1,
            "the penalty on the prompt's tokens has no decodekit stage",
        ),
        ("encoder_no_repeat_ngram_size", lambda v: v is not None and v > 0, "it has no decodekit stage"),
    ]
    for name, is_set, why in checks:
        value = getattr(c, name, None)
        if is_set(value):
            raise _refused(name, value, why)


def _watermark(c: Any) -> list[str]:
    """transformers' watermark, after every other processor: decodekit-watermark's stage draws the same lists."""
    from transformers import WatermarkingConfig

    w = c.watermarking_config
    if w is None:
        return []
    if not isinstance(w, WatermarkingConfig):
        raise _refused("watermarking_config", w, "SynthID's tournament watermark has no decodekit stage")
    try:
        w.validate()
    except ValueError as exc:
        raise _refused("watermarking_config", w.to_dict(), f"transformers refuses it ({exc})") from None
    if not 0 < w.greenlist_ratio < 1:  # transformers takes 0 and 1: no token green, or every one: nothing marked
        why = (
            f"its greenlist_ratio={w.greenlist_ratio!r} marks nothing (decodekit's watermark: 0 < greenlist_ratio < 1)"
        )
        raise _refused("watermarking_config", w.to_dict(), why)
    return [
        f"watermark(bias={float(w.bias)!r}, greenlist_ratio={float(w.greenlist_ratio)!r}, hashing_key="
        f"{int(w.hashing_key)}, seeding_scheme={w.seeding_scheme!r}, context_width={int(w.context_width)})"
    ]


def _refused(name: str, value: Any, why: str) -> ParameterError:
    return ParameterError(
        f"generation_chain: the generation config's {name}={value!r} cannot be expressed as a decodekit chain: {why}; "
        "allowed: a config without it, or a chain of your own (dk.generate(chain=...), on the command line --chain)"
    )


def _processors(c: Any, eos: list[int], prompt_length: int | None, vocab_size: int | None) -> list[str]:
    """The stages transformers runs under every strategy, in `_get_logits_processor`'s order."""
    out: list[str] = []
    suppress, begin = token_ids(c, "suppress_tokens", vocab_size), token_ids(c, "begin_suppress_tokens", vocab_size)
    if c.sequence_bias is not None:
        out += _sequence_bias(_bias_list(c.sequence_bias))
    if c.repetition_penalty is not None and c.repetition_penalty != 1.0:
        _check(c, "repetition_penalty", lambda v: v > 0, "a float > 0 (1: no penalty)")
        out.append(f"repetition_penalty({c.repetition_penalty!r})")
    if c.no_repeat_ngram_size is not None and c.no_repeat_ngram_size > 0:
        out.append(f"no_repeat_ngram({c.no_repeat_ngram_size})")
    if c.bad_words_ids is not None:
        top = vocab_size or 2**63  # transformers refuses a negative id and one past the vocabulary
        in_range = f"a list of lists of ids in [0, {top})"
        _check(c, "bad_words_ids", lambda ws: _listed(ws) and all(_ids_below(w, top) for w in ws), in_range)
        # As transformers: EOS alone stays allowed, an empty word bans nothing.
        words = [list(w) for w in c.bad_words_ids if w and not (len(w) == 1 and w[0] in eos)]
        if words:
            out.append(f"bad_words({_literal(words)})")
    out += _lengths(c, eos, prompt_length)
    if suppress:  # transformers' SuppressTokensLogitsProcessor: -inf at every step
        out.append(f"bad_words({_literal([[t] for t in suppress])})")
    if begin:  # -inf at the first new token only (decoder-only: begin_index is the prompt width)
        out.append(f"min_new_tokens(1, {_literal(begin)})")
    return out


def _ids_below(ids: Any, top: int) -> bool:
    return _listed(ids) and all(isinstance(t, int) and 0 <= t < top for t in ids)


def _listed(value: Any) -> bool:
    return isinstance(value, (list, tuple))


def token_ids(c: Any, name: str, vocab_size: int | None) -> list[int]:
    """The config's ids under `name` (None, one id or a list) that are in the vocabulary: transformers' masks and
    stopping never meet the others. A value of another type ("3", 1.5: a file written by hand) is refused by name."""
    return _in_vocabulary(as_ids(getattr(c, name), f"generation_chain: the generation config's {name}"), vocab_size)


def _in_vocabulary(ids: Sequence[int] | None, vocab_size: int | None) -> list[int]:
    """transformers' suppressions mask `isin(vocabulary, ids)`: an id outside the vocabulary does nothing."""
    return [int(t) for t in ids or () if int(t) >= 0 and (vocab_size is None or int(t) < vocab_size)]


def _lengths(c: Any, eos: list[int], prompt_length: int | None) -> list[str]:
    """min_length / min_new_tokens, then the length decay: transformers applies them only with an EOS id."""
    out: list[str] = []
    minimum = _min_new_tokens(c, prompt_length) if eos else 0
    if minimum > 0:
        out.append(f"min_new_tokens({minimum}, {_literal(eos)})")
    if c.exponential_decay_length_penalty is not None:
        start, factor = c.exponential_decay_length_penalty
        if not eos:
            raise _refused(
                "exponential_decay_length_penalty",
                c.exponential_decay_length_penalty,
                "it raises the EOS token, and the config has no eos_token_id",
            )
        out.append(f"exponential_decay({int(start)}, {float(factor)!r}, {_literal(eos)})")
    return out


def _min_new_tokens(c: Any, prompt_length: int | None) -> int:
    """New tokens before EOS may come: `min_new_tokens` wins over `min_length` (which counts the prompt), as in
    transformers' `_prepare_generated_length`."""
    if c.min_new_tokens is not None:
        _check(c, "min_new_tokens", lambda n: isinstance(n, int), "an integer >= 0")
        return int(c.min_new_tokens)
    if not c.min_length:
        return 0
    if prompt_length is None:
        raise ParameterError(
            f"generation_chain: the generation config's min_length={c.min_length} counts the prompt, so the chain "
            "depends on its length; allowed: generation_chain(source, prompt_length=N), min_new_tokens in the config "
            f"instead, or a chain of your own: {_without_the_prompt(c)}"
        )
    return max(int(c.min_length) - int(prompt_length), 0)


def _without_the_prompt(c: Any) -> str:
    """The chain with the prompt counted as none, spelled as a command line, which has no prompt length to give."""
    try:
        chain = _chain(c, 0)
    except ParameterError:  # another option no chain expresses: that error comes with its own advice
        return "--chain with min_new_tokens(n, [eos])"
    return (
        f"on the command line --chain '{chain}' (it runs as written; to count the prompt as min_length does, lower its "
        f"{c.min_length} by the prompt's tokens)"
    )


def _warpers(c: Any) -> list[str]:
    """The stages transformers runs with `do_sample=True`, in its order."""
    out: list[str] = []
    if c.temperature is not None and c.temperature != 1.0:
        if not c.temperature > 0:
            raise _refused(
                "temperature",
                c.temperature,
                "with do_sample=true transformers refuses a temperature <= 0 (do_sample=false is its greedy)",
            )
        out.append(f"temperature({float(c.temperature)!r})")
    if c.top_h is not None:
        _check(c, "top_h", lambda h: 0 < h <= 1, "a float in (0, 1]")
        out.append(f"top_h({float(c.top_h)!r})")
    if c.top_k is not None and c.top_k != 0:
        _check(c, "top_k", lambda k: isinstance(k, int) and k > 0, "an integer >= 1, or 0 for no top-k")
        out.append(f"top_k({int(c.top_k)})")
    if c.top_p is not None and c.top_p < 1.0:
        _check(c, "top_p", lambda p: p >= 0, "a float in [0, 1] (1: no top-p)")
        if c.top_p == 0:  # top_k(1) in its place would take the --top-p and --top-k flags wrongly
            raise _refused(
                "top_p", c.top_p, "transformers keeps only the likeliest token with it, decodekit's top_p takes p > 0"
            )
        out.append(f"top_p({float(c.top_p)!r})")
    if c.min_p is not None:
        _check(c, "min_p", lambda p: 0 <= p <= 1, "a float in [0, 1]")
        out.append(f"min_p({float(c.min_p)!r})")
    if c.typical_p is not None and c.typical_p < 1.0:
        _check(c, "typical_p", lambda p: p > 0, "a float in (0, 1] (1: no typical sampling)")
        out.append(f"typical({float(c.typical_p)!r})")
    if c.epsilon_cutoff is not None and 0.0 < c.epsilon_cutoff < 1.0:
        out.append(f"epsilon({float(c.epsilon_cutoff)!r})")
    if c.eta_cutoff is not None and 0.0 < c.eta_cutoff < 1.0:
        out.append(f"eta({float(c.eta_cutoff)!r})")
    return out


def _check(c: Any, name: str, valid: Callable[[Any], bool], allowed: str) -> None:
    """Refuse, naming the option, a value that transformers' processor for it refuses when `generate()` builds it
    (the chain stage would refuse it too, but under the stage's name)."""
    value = getattr(c, name)
    if not valid(value):
        raise ParameterError(
            f"generation_chain: the generation config's {name}={value!r} is invalid, as transformers' generate() "
            f"finds it too; allowed: {allowed}"
        )


def _sequence_bias(biases: list[list[Any]]) -> list[str]:
    """A bias of -inf bans its sequence's last token after the rest: `bad_words` (transformers' bad words are this
    processor with -inf); a finite bias stays. Both only add to scores, so their order does not matter."""
    banned = [ids for ids, bias in biases if bias == float("-inf")]
    kept = [[ids, bias] for ids, bias in biases if bias != float("-inf")]
    for ids, bias in kept:
        if not math.isfinite(bias):
            raise _refused("sequence_bias", [ids, bias], "a bias of NaN or +inf makes every score invalid")
    return [f"sequence_bias({_literal(kept)})"] * bool(kept) + [f"bad_words({_literal(banned)})"] * bool(banned)


def _bias_list(bias: Any) -> list[list[Any]]:
    """transformers' `sequence_bias`, a list of `[[ids], bias]` or (older) a dict of `{(ids): bias}`."""
    items = bias.items() if isinstance(bias, dict) else bias
    return [[[int(t) for t in seq], float(b)] for seq, b in items]


def _literal(value: Sequence[Any]) -> str:
    """A list as the chain string writes it (JSON's form is a Python literal for ints, floats and lists)."""
    return json.dumps(value)
