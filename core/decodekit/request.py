"""`DecodeRequest`: the arguments every decode strategy shares, validated once per call by `decode_request`, which
every entry point calls, so a bad argument fails the same way everywhere (docs/concepts.md, "The decode engine")."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict, TypeGuard

import torch
from typing_extensions import Unpack

from decodekit import compiling
from decodekit.errors import ParameterError, UnknownNameError
from decodekit.model import check_call
from decodekit.param_types import shown, words
from decodekit.prompts import as_index, prompt_rows, token_ids
from decodekit.spec import ModelSpec
from decodekit.standard_plugins import STANDARD_PLUGINS, checkout, failed_to_load, install_hint, switched_off

if TYPE_CHECKING:
    from decodekit.chain import Chain
    from decodekit.plugins import CacheFactory
    from decodekit.prompts import Prompts, TokenIds, Tokenizer

__all__ = ["MAX_SEED", "DecodeOptions", "DecodeRequest", "decode_request"]

MAX_SEED = 2**64
"""Seeds are integers in [0, 2**64), what `torch.Generator.manual_seed` takes."""


class DecodeOptions(TypedDict, total=False):
    """The options every decode entry point takes (`dk.generate`, `dk.stream`, `dk.decode`,
    a strategy's own function), all keyword-only and optional; `decode_request` checks them.

    chain: a `Chain`, a chain string, or a spec list; None (the default) samples from softmax(logits).
    max_new_tokens: new tokens per row at most (default 64): one int for every prompt, or one per prompt (vLLM's
        per-request max_tokens; a prompt's copies share its limit), each >= 0.
    cache: a registered cache backend name or its string form ("window(size=128)"), a factory
        `(CacheSpec) -> KVCache`, or "none" to recompute the context every step (default "dense").
    stop_tokens: ids that end a row (one list for every prompt, or one per prompt); the stop token is
        the row's last token. stop_strings: end a row when its decoded text contains one (needs a tokenizer): a
        string or a list for every prompt, or one list per prompt (vLLM's per-request `stop`).
        include_stop_str_in_output: keep the stop string, or the stop token's text, that ended a row at the end of
        its text (vLLM's; default False: the text ends before it); a special token (the tokenizer's
        `eos_token_ids`, `special_token_ids`) has no text, as vLLM's default skip_special_tokens=True renders it.
    seed: one int in [0, 2**64) (prompt b gets its own stream derived from it and b), one seed per
        prompt, or None (the default: fresh seeds).
    logprobs: also report the chosen token's log-probability and the top-n alternatives, raw
        and after the chain (default None: not reported).
    prompt_logprobs: also report, for each prompt token after the first, its log-probability under the model
        given the tokens before it, its rank and the model's top-n (vLLM's `prompt_logprobs`; default None).
    compile: run the model's decode step and the chain's step under `torch.compile` (default False; torch >= 2.13).
    """

    chain: Chain | str | Sequence[Any] | None
    max_new_tokens: int | Sequence[int]
    cache: str | CacheFactory
    stop_tokens: TokenIds | Sequence[TokenIds]
    stop_strings: str | Sequence[str] | Sequence[Sequence[str]]
    include_stop_str_in_output: bool
    seed: int | Sequence[int] | None
    logprobs: int | None
    prompt_logprobs: int | None
    compile: bool


@dataclass(frozen=True)
class DecodeRequest:
    """The checked arguments of one decode, as a strategy's policy reads them (`decoding.request`): `prompts` ids
    per prompt (ints in [0, vocab_size), none empty), `cache` a factory `(CacheSpec) -> KVCache` or None (recompute
    the context every step), `stop_tokens` the ids and `stop_strings` the strings that end each prompt's rows, `seed`
    one int, one per prompt, or None; `max_new_tokens` the largest limit (what a policy sizes by), `limits` each
    prompt's when given per prompt."""

    model: Any
    prompts: list[list[int]]
    chain: Chain
    max_new_tokens: int
    cache: CacheFactory | None
    stop_tokens: list[frozenset[int]]
    stop_strings: list[tuple[str, ...]]
    seed: int | tuple[int, ...] | None
    logprobs: int | None
    compile: bool = False  # the model's decode step and the chain's step under torch.compile
    prompt_logprobs: int | None = None  # report the prompt tokens' logprobs, with the top n
    limits: tuple[int, ...] | None = None  # max_new_tokens per prompt; None: max_new_tokens for every prompt
    include_stop_str_in_output: bool = False  # the text keeps the stop string (or stop token) that ended its row

    def limit(self, prompt: int) -> int:
        """Prompt `prompt`'s max_new_tokens."""
        return self.max_new_tokens if self.limits is None else self.limits[prompt]

    @property
    def batch_size(self) -> int:
        return len(self.prompts)

    @property
    def tokenizer(self) -> Tokenizer | None:
        return getattr(self.model, "tokenizer", None)


def _flag(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise ParameterError(f"{name}={shown(value)} is invalid; allowed: {words('True or False', 'true or false')}")
    return value


def _compile(value: object) -> bool:
    """`compile`, refused up front where this torch's `torch.compile` lacks what decodekit compiles with."""
    if _flag("compile", value) and (why := compiling.unsupported()) is not None:
        raise ParameterError(f"compile=True {why}; allowed: compile=False (the same tokens, eagerly)")
    return bool(value)


def _integer(name: str, value: object, ok: Callable[[int], bool], allowed: str) -> int:
    n = as_index(value)
    if n is None or not ok(n):
        raise ParameterError(f"{name}={shown(value)} is invalid; allowed: {allowed}")
    return n


def _vocab_size(model: object) -> int:
    spec = getattr(model, "spec", None)
    if isinstance(spec, ModelSpec):
        return spec.vocab_size
    if as_index(getattr(spec, "vocab_size", None)) is not None:  # a look-alike: its fields were never checked
        raise ParameterError(
            f"model {type(model).__name__}: its spec is a {type(spec).__name__}, not a decodekit.ModelSpec; "
            "allowed: a decodekit.ModelSpec (it checks its fields and gives the optional ones their defaults)"
        )
    raise ParameterError(_not_a_model(model))


def _not_a_model(model: object) -> str:
    """Why `model` is none, said for what a newcomer passes: a registered name, a bare transformers model."""
    if isinstance(model, str):
        return f"model={model!r} is a name, not a model; allowed: a model object: dk.load_model({model!r})"
    allowed = "allowed: a model with a decodekit.ModelSpec `spec`"
    if type(model).__module__.startswith("transformers."):  # checked by name: the core never imports transformers
        return (
            f"model {type(model).__name__}: a transformers model, with no decodekit spec; {allowed}: "
            "decodekit_hf.model.HFModel(model, tokenizer) wraps it (docs/hf.md)"
        )
    return f"model {type(model).__name__}: no spec.vocab_size; {allowed}"


def _check_tokenizer(model: object) -> None:
    """A model's tokenizer has what every result's text needs, checked before the model runs."""
    tokenizer = getattr(model, "tokenizer", None)
    lacking = [name for name in ("encode", "decode") if not callable(getattr(tokenizer, name, None))]
    if tokenizer is not None and lacking:
        raise ParameterError(
            f"model {type(model).__name__}: its tokenizer {type(tokenizer).__name__} has no {' and no '.join(lacking)}"
            "; allowed: a tokenizer with encode(text) -> ids and decode(ids) -> text (decodekit.prompts.Tokenizer), "
            "or tokenizer = None (token ids in and out)"
        )


def _chain(chain: object) -> Chain:
    from decodekit.chain import Chain

    if chain is None:
        return Chain()
    if isinstance(chain, Chain):
        return chain
    if isinstance(chain, str):
        return Chain.parse(chain)
    if isinstance(chain, Sequence):
        return Chain.from_spec(chain)
    raise ParameterError(
        f"chain={chain!r} is invalid; allowed: a Chain (stage objects: dk.Chain([...])), a chain string, a spec list, "
        "or None"
    )


def _cache(cache: object) -> CacheFactory | None:
    from decodekit.chain_string import parse_stage
    from decodekit.plugins import cache_factory, get_registry

    if isinstance(cache, str):
        if cache == "none":
            return None
        if (name := parse_stage(cache, what="cache").name) == "none":
            raise ParameterError(f"cache={cache!r} is invalid: 'none' takes no parameters; allowed: cache='none'")
        get_registry().lookup("cache backend", name, also=("none",))  # a misspelt name: 'none' is listed too
        return cache_factory(cache)
    if callable(cache):
        return cache  # type: ignore[return-value]
    raise ParameterError(
        f"cache={cache!r} is invalid; allowed: a cache backend name, 'name(args)', 'none', "
        "or a factory (spec) -> KVCache"
    )


def _default_cache() -> CacheFactory:
    """The dense cache; when no plugin registers it, an error saying what to install, or to ask for no cache."""
    from decodekit.plugins import cache_factory, get_registry

    try:
        return cache_factory("dense")
    except UnknownNameError:
        registry = get_registry()
        installed = ", ".join(sorted(registry.caches)) or "none installed"
        dense = STANDARD_PLUGINS["dense"]
        if enable := switched_off([dense]):  # installed, but a variable left it out: a pip install would change nothing
            state, fixes = "disabled", [enable]
        elif failed := failed_to_load([dense], registry.failures):  # nor would it here
            state, fixes = f"installed, but {failed}", []
        else:
            state, fixes = "not installed", [install_hint([dense], checkout())]
        fixes += [f"another backend ({installed})", "cache='none' to recompute the whole context every step (slower)"]
        raise UnknownNameError(
            f"no cache given, and the default cache backend 'dense' is {state}; "
            f"allowed: {', '.join(fixes[:-1])}, or {fixes[-1]}"
        ) from None


def _listed(value: object) -> TypeGuard[Sequence[Any]]:
    """Whether `value` is a sequence other than a string: a list of values (one per prompt, or a row's)."""
    return isinstance(value, Sequence) and not isinstance(value, str)


def _check_lists(name: str, lists: int, batch: int) -> None:
    """`name` given as one list per prompt has one for each of the `batch` prompts."""
    if lists != batch:
        raise ParameterError(
            f"{name}: {lists} lists given for {batch} prompts; allowed: one list for every prompt, or one per prompt"
        )


def _stop_tokens(stop_tokens: object, batch: int, vocab_size: int) -> list[frozenset[int]]:
    items = stop_tokens.tolist() if hasattr(stop_tokens, "tolist") else stop_tokens
    if isinstance(items, (str, bytes)) or not isinstance(items, Sequence):
        raise ParameterError(
            f"stop_tokens={stop_tokens!r} is invalid; allowed: a list of token ids, or one list per prompt"
        )
    first = items[0] if items else None
    if _listed(first) or (isinstance(first, torch.Tensor) and first.dim()):
        _check_lists("stop_tokens", len(items), batch)
        return [frozenset(token_ids(f"stop_tokens[{b}]", row, vocab_size)) for b, row in enumerate(items)]
    return [frozenset(token_ids("stop_tokens", items, vocab_size))] * batch


def _stop_strings(stop_strings: object, batch: int, tokenizer: object) -> list[tuple[str, ...]]:
    allowed = "a string, a list of strings, or one list per prompt"
    items = (stop_strings,) if isinstance(stop_strings, str) else stop_strings
    if not isinstance(items, Sequence):
        raise ParameterError(f"stop_strings={stop_strings!r} is invalid; allowed: {allowed}")
    if items and all(_listed(s) for s in items):
        _check_lists("stop_strings", len(items), batch)
        rows = [_strings(f"stop_strings[{b}]", row, row, allowed) for b, row in enumerate(items)]
    else:
        rows = [_strings("stop_strings", stop_strings, items, allowed)] * batch
    if any(rows) and tokenizer is None:
        raise ParameterError(
            f"stop_strings={stop_strings!r} is invalid: the model has no tokenizer to decode text with; allowed: "
            "stop_tokens (token ids), or a model with a tokenizer (docs/concepts.md, Models)"
        )
    return rows


def _strings(name: str, given: object, items: Sequence[Any], allowed: str) -> tuple[str, ...]:
    """`items` (`given`, as the caller wrote it) as stop strings."""
    if not all(isinstance(s, str) for s in items):
        raise ParameterError(f"{name}={given!r} is invalid; allowed: {allowed}")
    if "" in items:  # every text contains it (the command line's `--stop ''` is refused alike)
        raise ParameterError(
            f"{name}={given!r}: an empty string would end every row at once; allowed: non-empty strings"
        )
    return tuple(items)


def _seed(seed: object, batch: int) -> int | tuple[int, ...] | None:
    allowed = "an integer, 0 <= seed < 2**64"
    if seed is None:
        return None
    if getattr(seed, "ndim", 0) and hasattr(seed, "tolist"):  # a NumPy array or a tensor of seeds, one per prompt
        seed = seed.tolist()
    if _listed(seed):
        if len(seed) != batch:
            raise ParameterError(
                f"seed: {len(seed)} seeds given for {batch} prompts; allowed: one int, or one per prompt ({batch})"
            )
        return tuple(_integer(f"seed[{b}]", s, lambda n: 0 <= n < MAX_SEED, allowed) for b, s in enumerate(seed))
    if as_index(seed) == -1:  # llama.cpp's "a fresh seed", which is None here
        allowed += ", or None (a fresh seed each call: llama.cpp's -1)"
    return _integer("seed", seed, lambda n: 0 <= n < MAX_SEED, allowed)


def _max_new_tokens(value: object, batch: int) -> tuple[int, tuple[int, ...] | None]:
    """(the largest limit, one per prompt or None) from one int for all prompts or one per prompt."""
    if _listed(value):
        if len(value) != batch:
            raise ParameterError(
                f"max_new_tokens: {len(value)} limits given for {batch} prompts; allowed: one int, or one per prompt"
            )
        limits = tuple(
            _integer(f"max_new_tokens[{b}]", n, lambda n: n >= 0, "an integer >= 0") for b, n in enumerate(value)
        )
        return max(limits, default=0), limits
    return _integer("max_new_tokens", value, lambda n: n >= 0, "an integer >= 0"), None


def _logprobs(logprobs: object, vocab_size: int, name: str = "logprobs") -> int | None:
    allowed = f"an integer 0 <= {name} <= {vocab_size}, or {words('None', 'null')}"
    return None if logprobs is None else _integer(name, logprobs, lambda n: 0 <= n <= vocab_size, allowed)


def _prompt_logprobs(
    n: object, vocab: int, spec: ModelSpec, rows: list[list[int]], cache: CacheFactory | None
) -> int | None:
    """Without a cache the prefill is one forward over the whole prompt, which must fit the model's context (past
    it, generation crops the context, and the prompt's first tokens would have no logits); through a cache that
    evicts it goes in blocks, where the model's keys can move."""
    checked = _logprobs(n, vocab, "prompt_logprobs")
    longest, context = max(map(len, rows)), spec.max_positions
    if checked is not None and cache is None and longest > context:
        further = (
            ", or a cache that evicts (cache='window(size=N)'), which scores it in blocks"
            if spec.movable_keys
            else " (the model's positions are absolute: no cache scores past its context)"
        )
        raise ParameterError(
            f"prompt_logprobs={checked} is invalid with cache='none' and a prompt of {longest} tokens, past the "
            f"model's context of {context} positions; allowed: prompts of at most {context} tokens{further}"
        )
    return checked


def decode_request(model: Any, prompts: Prompts, /, **options: Unpack[DecodeOptions]) -> DecodeRequest:
    """Check every shared option (`DecodeOptions`) and build the request; an unknown option is refused
    before it, where the strategy's own are told apart (`decodekit.strategies.resolve_strategy`)."""
    V = _vocab_size(model)
    check_call(model)
    _check_tokenizer(model)
    rows = prompt_rows(model, prompts)
    max_new, limits = _max_new_tokens(options.get("max_new_tokens", 64), len(rows))
    chain = _chain(options.get("chain"))
    # A stage taking one value per prompt (a grammar each) checks it has as many here, where every strategy passes.
    for check in (getattr(stage, "check_prompts", None) for stage in (*chain.processors, chain.selector)):
        if callable(check):
            check(len(rows))
    cache = _cache(options["cache"]) if "cache" in options else _default_cache()
    return DecodeRequest(
        model=model,
        prompts=rows,
        chain=chain,
        max_new_tokens=max_new,
        limits=limits,
        cache=cache,
        stop_tokens=_stop_tokens(options.get("stop_tokens", ()), len(rows), V),
        stop_strings=_stop_strings(options.get("stop_strings", ()), len(rows), getattr(model, "tokenizer", None)),
        include_stop_str_in_output=_flag(
            "include_stop_str_in_output", options.get("include_stop_str_in_output", False)
        ),
        seed=_seed(options.get("seed"), len(rows)),
        logprobs=_logprobs(options.get("logprobs"), V),
        compile=_compile(options.get("compile", False)),
        prompt_logprobs=_prompt_logprobs(options.get("prompt_logprobs"), V, model.spec, rows, cache),
    )
