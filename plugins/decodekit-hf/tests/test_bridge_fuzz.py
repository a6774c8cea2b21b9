"""A property-based fuzz of the transformers bridge against transformers alone: an architecture the docs/hf.md table
serves (conftest's tiny configs), 1-3 ragged prompts, per-prompt `max_new_tokens` (sometimes past the sliding window
or the context), a cache and a strategy (greedy sampling, beam search, speculation with prompt lookup, a noisy copy
of the model or another architecture), sometimes a stop token, `HFModel(context=...)` below the config's, bfloat16.

The call ends in a decodekit error that names a parameter and its value (never where docs/hf.md serves the case),
or, where the cache holds every token the model attends to, in the tokens an untouched copy of the transformers model
gives each prompt alone (`generate()`; greedy: each token's log-probability too, within 1e-4 of its forward; `int8`:
decodekit's own `int8` decode of the prompt alone); where it evicts (or rounds in bfloat16), in the lengths asked for.

DECODEKIT_HF_FUZZ_EXAMPLES=300 runs more cases (derandomized: the same cases on every run); DECODEKIT_HF_FUZZ_SEED=N
draws other cases, the same for the same N."""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from decodekit_hf import HFModel
from hypothesis import HealthCheck, event, given, seed, settings
from hypothesis import strategies as st

import decodekit as dk
from tinymodels import greedy_generation_config

V, CONTEXT, WINDOW, LAYERS = 128, 32, 6, 2
SHARED: dict[str, Any] = dict(
    vocab_size=V, max_position_embeddings=CONTEXT, bos_token_id=V - 1, eos_token_id=V - 1, pad_token_id=V - 1
)
_KV = dict(num_key_value_heads=2, head_dim=8)
_SLIDE_FIRST = dict(sliding_window=WINDOW, layer_types=["sliding_attention", "full_attention"])
_EXPERTS = dict(num_experts_per_tok=2, moe_intermediate_size=16)
_LATENT = dict(kv_lora_rank=8, q_lora_rank=16, qk_rope_head_dim=4, qk_nope_head_dim=8, v_head_dim=8)
_DEEPSEEK = _EXPERTS | dict(n_routed_experts=4, n_group=1, topk_group=1)
_YARN = dict(rope_type="yarn", factor=16.0, rope_theta=1e5, original_max_position_embeddings=2)


@dataclass(frozen=True)
class Arch:
    """Config fields besides conftest's (`make_arch`), and the layers whose mask hides keys past WINDOW tokens back."""

    fields: dict[str, Any]
    slides: tuple[int, ...] = ()
    model_type: str | None = None  # where the name is not the model type (a variant)


# The architectures docs/hf.md's tables serve, each as test_architectures.py / test_newer_architectures.py build it.
ARCHS: dict[str, Arch] = {
    "llama": Arch(_KV),
    "gpt2": Arch({}),
    "gpt_neox": Arch({}),
    "falcon": Arch({}),
    "stablelm": Arch({}),
    "nemotron": Arch({}),
    "gemma": Arch({}),
    "qwen2": Arch(dict(sliding_window=WINDOW, use_sliding_window=True, max_window_layers=1), (1,)),
    "qwen3": Arch({}),
    "olmo2": Arch({}),
    "gptj": Arch({}),
    "opt": Arch({}),
    "phi": Arch({}),
    "cohere": Arch(dict(logit_scale=1.0)),
    "starcoder2": Arch(dict(sliding_window=WINDOW), (0, 1)),
    "mixtral": Arch(dict(sliding_window=WINDOW), (0, 1)),
    "gemma2": Arch(dict(sliding_window=WINDOW), (0,)),
    "vaultgemma": Arch(_KV | dict(sliding_window=WINDOW, query_pre_attn_scalar=8), (0,)),
    "gemma3_text": Arch(_SLIDE_FIRST, (0,)),
    "gpt_oss": Arch(
        _KV | dict(sliding_window=WINDOW, num_local_experts=4, num_experts_per_tok=2, rope_parameters=_YARN), (0,)
    ),
    "granite_swa": Arch(_KV | _SLIDE_FIRST, (0,)),
    "flint": Arch(_KV | _SLIDE_FIRST | _EXPERTS | dict(num_experts=4, shared_expert_intermediate_size=16), (0,)),
    "gemma4_text": Arch(
        _KV | _SLIDE_FIRST | dict(global_head_dim=8, hidden_size_per_layer_input=8, vocab_size_per_layer_input=V),
        (0,),
    ),
    "smollm3": Arch(_KV | dict(no_rope_layer_interval=2)),
    "llama4_text": Arch(
        _KV | dict(attention_chunk_size=WINDOW, no_rope_layer_interval=2, num_local_experts=4, intermediate_size_mlp=64)
    ),
    "glm4": Arch(_KV),
    "granite": Arch(_KV | dict(embedding_multiplier=2.0, residual_multiplier=0.5, attention_multiplier=0.2)),
    "qwen3_moe": Arch(_KV | _EXPERTS | dict(num_experts=4)),
    "phi3": Arch({}),
    "granitemoe_swa": Arch(_KV | _SLIDE_FIRST | dict(num_local_experts=4, num_experts_per_tok=2), (0,)),
    "deepseek_v3": Arch(_LATENT | _DEEPSEEK),
    "deepseek_v2": Arch(_LATENT | _DEEPSEEK | dict(q_lora_rank=None)),
    "mimo_v2_flash": Arch(_KV | _EXPERTS | dict(v_head_dim=4, layer_types=["full_attention"] * 2, n_routed_experts=4)),
    # its last 2 of 4 layers attend over an earlier layer's keys (num_kv_shared_layers); a window as long as the context
    # eager attention (soft caps, sinks) with a window as long as the context: every cache is served on every text
    "gemma2_wide": Arch(dict(sliding_window=CONTEXT, attn_logit_softcapping=1.0), model_type="gemma2"),
    "gpt_oss_wide": Arch(
        _KV | dict(sliding_window=CONTEXT, num_local_experts=4, num_experts_per_tok=2, rope_parameters=_YARN),
        model_type="gpt_oss",
    ),
    "granite_swa_wide": Arch(_KV | _SLIDE_FIRST | dict(sliding_window=CONTEXT), model_type="granite_swa"),
    "gemma3n_text": Arch(
        _KV
        | dict(num_hidden_layers=4, num_kv_shared_layers=2, layer_types=["sliding_attention", "full_attention"] * 2)
        | dict(sliding_window=CONTEXT, hidden_size_per_layer_input=8, vocab_size_per_layer_input=V)
    ),
}
# Refuse a cache that evicts or observes: latent attention, a chunk (longer than the texts), shared keys.
MASKS_OF_ITS_OWN = ("deepseek_v2", "deepseek_v3", "llama4_text", "gemma3n_text")
KEEP_ALL = ("dense", "gqa", "none", "int8")
SCORED = ("h2o", "tova", "knorm", "streaming", "snapkv")


@dataclass(frozen=True)
class Cache:
    name: str
    size: int | tuple[int, ...] = 0  # window: its size (one, or one per layer); a scored cache: its budget
    sinks: int = 0
    recent: int = 0
    slack: int = 1
    observed: int = 4  # snapkv: the prompt's last queries that score the rest (its `window`)

    def __str__(self) -> str:
        if self.name in KEEP_ALL:
            return self.name
        if self.name == "window":
            size = list(self.size) if isinstance(self.size, tuple) else self.size
            return f"window(size={size}, sinks={self.sinks}, slack={self.slack})"
        extra = f", window={self.observed}" if self.name == "snapkv" else ""
        return f"{self.name}(budget={self.size}, sinks={self.sinks}, recent={self.recent}, slack={self.slack}{extra})"

    def sizes(self) -> tuple[int, ...]:
        return self.size if isinstance(self.size, tuple) else (self.size,) * LAYERS

    @property
    def budget(self) -> int:
        assert isinstance(self.size, int)
        return self.size


@dataclass(frozen=True)
class Case:
    arch: str
    seed: int
    prompts: list[list[int]]
    limits: list[int] | int
    cache: Cache
    strategy: str  # "greedy", "beam" or "speculative"
    num_beams: int = 1
    length_penalty: float = 1.0
    early_stopping: bool | str = False
    stop_at: int | None = None  # the stop token: this step's token of transformers' greedy text of the first prompt
    draft: str = "ngram"  # speculative: "ngram", "noisy" (a noisy copy) or "other" (another architecture)
    k: int = 1
    compile_off: bool = False
    bfloat16: bool = False  # the model (and its drafts) in bfloat16: its rounding is not generate()'s, lengths only
    context: int = CONTEXT  # `HFModel(model, context=...)`: the config's, or less

    @property
    def per_prompt(self) -> list[int]:
        return self.limits if isinstance(self.limits, list) else [self.limits] * len(self.prompts)

    @property
    def texts(self) -> list[int]:
        """Each prompt's own text: its length + its max_new_tokens."""
        return [len(p) + n for p, n in zip(self.prompts, self.per_prompt)]

    @property
    def slots(self) -> int:
        """The cache slots a batch fills: its rows left-padded to the longest prompt, then the longest limit."""
        return max(len(p) for p in self.prompts) + max(self.per_prompt)


_sizes = st.sampled_from(range(1, 41))
_caches = st.one_of(
    st.sampled_from([Cache(name) for name in KEEP_ALL]),
    st.builds(
        Cache,
        st.just("window"),
        st.one_of(_sizes, st.tuples(_sizes, _sizes)),
        st.integers(0, 3),
        st.just(0),
        st.integers(1, 8),
    ),
    # a sliding model's own window (as its refusals spell it): its mask, past the window too
    st.builds(Cache, st.just("window"), st.sampled_from([WINDOW, (WINDOW, CONTEXT)]), slack=st.integers(1, 8)),
    st.builds(
        Cache,
        st.sampled_from(SCORED),
        _sizes,
        st.integers(0, 4),
        st.integers(0, 8),
        st.integers(1, 8),
        st.integers(1, 8),
    ),
)


@st.composite
def cases(draw: st.DrawFn) -> Case:
    n = draw(st.integers(1, 3))
    # lengths drawn evenly (hypothesis favours small integers): texts pass the window of 6 and, sometimes, the context
    lengths = draw(st.lists(st.sampled_from(range(1, 15)) | st.sampled_from(range(25, 37)), min_size=n, max_size=n))
    prompts = [draw(st.lists(st.integers(0, V - 2), min_size=m, max_size=m)) for m in lengths]
    per_prompt = draw(st.lists(st.sampled_from(range(27)), min_size=n, max_size=n))
    limits: list[int] | int = per_prompt if draw(st.booleans()) else per_prompt[0]
    strategy = draw(st.permutations(["greedy", "beam", "speculative"]))[0]  # evenly: sampled_from favours the first
    options: dict[str, Any] = {}
    if strategy == "beam":
        options = dict(
            num_beams=draw(st.integers(1, 3)),
            length_penalty=draw(st.sampled_from([1.0, 0.0, -1.0, 0.6, 2.0])),
            early_stopping=draw(st.sampled_from([False, True, "never"])),
        )
    elif strategy == "speculative":
        options = dict(draft=draw(st.sampled_from(["ngram", "noisy", "other"])), k=draw(st.integers(1, 4)))
    arch = draw(st.permutations(sorted(ARCHS)))[0]
    seed, cache, compile_off = draw(st.integers(0, 3)), draw(_caches), draw(st.booleans())
    stop_at, bfloat16 = draw(st.one_of(st.none(), st.integers(0, 5))), draw(st.booleans())
    context = draw(st.just(CONTEXT) | st.sampled_from(range(8, CONTEXT)))  # the config's, or less
    flags: dict[str, Any] = dict(stop_at=stop_at, compile_off=compile_off, bfloat16=bfloat16, context=context)
    return Case(arch, seed, prompts, limits, cache, strategy, **flags, **options)


_MODELS: dict[tuple[str, int, bool], tuple[Any, HFModel, HFModel]] = {}


def models(build_arch: Callable[..., Any], arch: str, seed: int, bf16: bool) -> tuple[Any, HFModel, HFModel]:
    """(the transformers model, its attention untouched: the reference; an `HFModel` of a copy, which runs
    decodekit's attention function; a noisy copy's `HFModel`: a draft that agrees often, not always)."""
    if (arch, seed, bf16) not in _MODELS:
        hf = build_arch(ARCHS[arch].model_type or arch, seed=seed, **(SHARED | ARCHS[arch].fields))
        noisy = copy.deepcopy(hf)
        torch.manual_seed(seed + 100)
        with torch.no_grad():
            for weight in noisy.parameters():
                weight.add_(0.03 * torch.randn_like(weight))
        if bf16:
            hf, noisy = hf.to(torch.bfloat16), noisy.to(torch.bfloat16)
        _MODELS[arch, seed, bf16] = hf, HFModel(copy.deepcopy(hf)), HFModel(noisy)
    return _MODELS[arch, seed, bf16]


def transformers_alone(hf: Any, prompt: list[int], new: int, **options: Any) -> list[int]:
    """`generate()`'s new tokens for `prompt` alone, cut after the first stop token (beams pad after it)."""
    if new == 0:
        return []
    ids = torch.tensor([prompt])
    config = greedy_generation_config(max_new_tokens=new, **options)
    row: list[int] = hf.generate(ids, attention_mask=torch.ones_like(ids), generation_config=config)[0].tolist()
    row = row[len(prompt) :]
    stop = options.get("eos_token_id")
    return row[: row.index(stop) + 1] if stop is not None and stop in row else row


@torch.no_grad()
def forward_logprobs(hf: Any, prompt: list[int], tokens: list[int]) -> list[float]:
    """Each new token's log-probability in transformers' forward over the whole text: closer than equal tokens
    (a key masked wrongly moves every later one, whether or not it changes a greedy pick)."""
    if not tokens:
        return []
    logits = hf(torch.tensor([prompt + tokens[:-1]])).logits[0, len(prompt) - 1 :].float()
    picked = torch.log_softmax(logits, -1).gather(-1, torch.tensor(tokens)[:, None])[:, 0]
    return [float(x) for x in picked]


def holds_every_key(case: Case) -> bool:
    """Whether the cache keeps every key the model attends to, for every row and step (so its tokens are
    `generate()`'s): one that keeps all (`none` within the context: past it, it crops the oldest tokens); a `window`
    as wide as each row's text on each layer, or the model's own window on a sliding layer; a scored cache whose
    budget holds every slot of the batch (and a speculative round's drafts) within the context (past it, it moves
    the keys it keeps within the context, caches.md: a query's distances are no longer generate()'s)."""
    cache, text = case.cache, max(case.texts)
    if cache.name in KEEP_ALL:
        return cache.name != "none" or text <= case.context
    if cache.name == "window":
        slides = ARCHS[case.arch].slides
        own = [cache.sinks == 0 and size == WINDOW and layer in slides for layer, size in enumerate(cache.sizes())]
        return all(mine or text <= size for mine, size in zip(own, cache.sizes()))
    look_ahead = case.k + 1 if case.strategy == "speculative" else 0
    return case.slots + look_ahead <= cache.budget and text <= case.context


def comparable(case: Case) -> bool:
    """Whether transformers' `generate()` searches as decodekit's strategy does. Not: a bfloat16 model (decodekit's
    attention rounds apart from transformers' kernels: a near tie may go another way); beams through `int8` (no
    transformers cache rounds as it does: their lengths are checked). One beam is greedy search on both sides
    (decodekit's went on past a stop token with `length_penalty > 0` and `early_stopping` False or "never" until
    this fuzz found it)."""
    if case.bfloat16:
        return False
    return case.strategy != "beam" or case.cache.name != "int8"


def served(case: Case) -> bool:
    """Whether docs/hf.md promises to serve the case: a text within the context (beams: one `max_new_tokens` for
    all) through a cache that keeps every token, or through a valid evicting one that evicts nothing, on a model
    whose mask decodekit's attention follows for this text (within a sliding window; not latent attention, chunks,
    shared keys)."""
    cache, text = case.cache, max(case.texts)
    if text > case.context or (case.strategy == "beam" and len(set(case.per_prompt)) > 1):
        return False
    if cache.name in KEEP_ALL:
        return True
    follows = case.arch not in MASKS_OF_ITS_OWN and (not ARCHS[case.arch].slides or text <= WINDOW)
    if cache.name == "window":
        valid = all(size + cache.sinks <= case.context for size in cache.sizes())
    else:
        valid = cache.budget >= cache.sinks + cache.recent
    if case.strategy == "speculative":  # a round takes back up to k + 1 tokens: the slack must allow it
        valid = valid and cache.slack >= case.k + 1
    return follows and valid and holds_every_key(case)


def decode(case: Case, model: HFModel, draft: HFModel, other: HFModel, stop: int | None) -> dk.Generation:
    options: dict[str, Any] = dict(max_new_tokens=case.limits, cache=str(case.cache), chain="greedy")
    options["stop_tokens"] = [] if stop is None else [stop]
    if case.compile_off:
        options["compile"] = False
    if case.strategy == "beam":
        beam = dict(num_beams=case.num_beams, length_penalty=case.length_penalty, early_stopping=case.early_stopping)
        return dk.decode(model, case.prompts, strategy="beam", **beam, **options)
    if case.strategy == "speculative":
        chosen = {"noisy": draft, "other": other}.get(case.draft, "ngram")
        return dk.decode(model, case.prompts, strategy="speculative", draft=chosen, k=case.k, **options)
    return dk.generate(model, case.prompts, logprobs=1, **options)


def reference(case: Case, hf: Any, model: HFModel, stop: int | None) -> list[list[int]]:
    """Each prompt alone: transformers' greedy or beam tokens; through `int8`, decodekit's own greedy decode through
    `int8` alone (it rounds what it keeps: test_composition.py's reference)."""
    alone, stops = list(zip(case.prompts, case.per_prompt)), [] if stop is None else [stop]
    if case.cache.name == "int8":
        int8 = [
            dk.generate(model, [p], max_new_tokens=n, chain="greedy", cache="int8", stop_tokens=stops) for p, n in alone
        ]
        return [out.tokens[0] for out in int8]
    if case.strategy != "beam":
        return [transformers_alone(hf, p, n, eos_token_id=stop) for p, n in alone]
    beam = dict(num_beams=case.num_beams, length_penalty=case.length_penalty, early_stopping=case.early_stopping)
    return [transformers_alone(hf, p, n, eos_token_id=stop, **beam) for p, n in alone]


def check(case: Case, build_arch: Callable[..., Any]) -> str:
    """Runs the case; returns what it ended in ("error", "equal" or "lengths"), failing on anything else."""
    hf, model, draft = models(build_arch, case.arch, case.seed, case.bfloat16)
    if case.context != CONTEXT:
        model = HFModel(model.hf, context=case.context)
    stop = None
    if case.stop_at is not None:
        room = min(max(case.per_prompt), CONTEXT - len(case.prompts[0]))  # learned positions end at the context
        greedy = transformers_alone(hf, case.prompts[0], room) if room > 0 else case.prompts[0]
        stop = greedy[min(case.stop_at, len(greedy) - 1)]
    try:
        other_arch = "llama" if case.arch == "gpt2" else "gpt2"  # the same vocabulary
        other = models(build_arch, other_arch, case.seed, case.bfloat16)[1]
        out = decode(case, model, draft, other, stop)
    except dk.DecodekitError as error:
        message = str(error)
        assert re.search(r"\w+(\[\d+\])?=\S", message), (case, message)  # it names a parameter and its value
        assert not served(case), (case, message)
        return "error"
    if comparable(case) and holds_every_key(case):
        assert out.tokens == reference(case, hf, model, stop), case
        if out.logprobs is not None and case.cache.name != "int8":
            for prompt, tokens, logprobs in zip(case.prompts, out.tokens, out.logprobs):
                want = forward_logprobs(hf, prompt, tokens)
                assert [lp.raw for lp in logprobs] == pytest.approx(want, abs=1e-4), case
        return "equal"
    for tokens, n in zip(out.tokens, case.per_prompt):  # evicted (or int8's beams): its own tokens, as many as asked
        assert len(tokens) == n or (stop is not None and len(tokens) <= n and tokens[-1] == stop), case
    return "lengths"


EXAMPLES = int(os.environ.get("DECODEKIT_HF_FUZZ_EXAMPLES", "25"))
SEED = os.environ.get("DECODEKIT_HF_FUZZ_SEED")  # other cases than the derandomized ones, reproducibly


@settings(
    max_examples=EXAMPLES,
    deadline=None,  # two shared cores: a slow case is not a failure
    derandomize=SEED is None,  # the same cases on every run: a failure here is a regression, never luck
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@seed(int(SEED or 0))
@given(case=cases())
def test_the_bridge_ends_in_an_error_or_transformers_tokens(case: Case, build_arch: Callable[..., Any]) -> None:
    event(check(case, build_arch))


@pytest.fixture(scope="module", autouse=True)
def _no_models_kept() -> Any:
    yield
    _MODELS.clear()
