"""Every strategy × every cache × every option: each cell works, or is refused before any token.

Strategies: sample, beam, speculative with a model draft and with prompt lookup, the
new-plugin template's best-of-n, and classifier-free guidance. Caches: none, dense, gqa, int8, window(size=8),
window(size="auto") and window over int8 storage. Options: streaming, stop strings, logprobs, a
ragged batch, and a run to four times the model's context. Where greedy speculative decoding
runs, it gives `dk.generate`'s tokens exactly.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from decodekit_cli.plugin_template import files_for
from decodekit_gpt.gpt import GPT, GPTConfig

import decodekit as dk
from tinymodels import CharTokenizer

CONTEXT = 32
STRATEGIES = {
    "sample": "sample",
    "beam": "beam(num_beams=3)",
    "speculative-model": "speculative(k=3)",  # draft: the fixture's model, given by keyword
    "speculative-ngram": "speculative(draft=ngram, k=3)",
    "best-of-n": "best_of_n(n=2)",
    "cfg": "cfg(scale=1.5)",  # two rows per prompt: the prompt and its last token
}
CACHES = ["none", "dense", "gqa", "int8", "window(size=8)", 'window(size="auto")', "window(size=8, store='int8')"]
OPTIONS = ["stream", "stop_strings", "logprobs", "ragged", "past_context"]
PROMPTS = {"plain": ["To be, or", "not to be"], "ragged": ["To be, or not", "O"]}


def _model(seed: int) -> GPT:
    torch.manual_seed(seed)
    config = GPTConfig(vocab_size=95, block_size=CONTEXT, n_layer=2, n_head=4, n_kv_head=2, n_embd=32, position="rope")
    model = GPT(config).eval()
    with torch.no_grad():
        model.wte.weight.mul_(3.0)  # peaked distributions, so greedy decoding is not a coin toss
    model.tokenizer = CharTokenizer()  # type: ignore[assignment]
    model.attention_windows = (8, 6)  # a calibration, for window(size="auto")
    return model


@pytest.fixture(scope="module")
def models() -> tuple[GPT, GPT]:
    return _model(0), _model(1)


# Runs that cells share, made once per module (keyed by the models' ids: the fixture's, alive all module long).
_REFUSED: dict[tuple[Any, ...], bool] = {}  # _refused_up_front's answers
_RUNS: dict[tuple[Any, ...], tuple[Any, list[Any]]] = {}  # greedy "sample" runs: the speculative cells' reference


@pytest.fixture(scope="module", autouse=True)
def best_of_n(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The template's strategy, written by `new-plugin` and registered as its entry point would be."""
    src = tmp_path_factory.mktemp("best_of_n")
    for path, text in files_for("strategy", "best_of_n").items():
        if path.startswith("src/"):
            (src / path).parent.mkdir(parents=True, exist_ok=True)
            (src / path).write_text(text)
    sys.path.insert(0, str(src / "src"))
    plugin = importlib.import_module("decodekit_best_of_n.plugin")
    dk.register_plugin(plugin, name="decodekit-best-of-n")
    yield
    dk.unregister_plugin(plugin)
    sys.path.remove(str(src / "src"))


def _run(model: GPT, draft: GPT, strategy: str, cache: str, option: str, chain: str) -> tuple[Any, list[Any]]:
    """(the Generation, the stream's events) of one cell; events only for the "stream" option."""
    key = (id(model), id(draft), strategy, cache, option, chain)
    if strategy == "sample" and chain == "greedy" and key in _RUNS:  # both speculative cells' reference
        return _RUNS[key]
    prompts = PROMPTS["ragged" if option == "ragged" else "plain"]
    options: dict[str, Any] = {"cache": cache, "chain": chain, "seed": [3, 4], "max_new_tokens": 12}
    if strategy == "speculative-model":
        options["draft"] = draft
    if option == "stop_strings":
        options["stop_strings"] = ["e", "o "]
    if option == "logprobs":
        options["logprobs"] = 2
    if option == "past_context":
        options["max_new_tokens"] = 4 * CONTEXT
    name = STRATEGIES[strategy]
    out = dk.decode(model, prompts, strategy=name, **options)
    events = list(dk.stream(model, prompts, strategy=name, **options)) if option == "stream" else []
    if strategy == "sample" and chain == "greedy":
        _RUNS[key] = out, events
    return out, events


def _refused_up_front(model: GPT, draft: GPT, strategy: str, cache: str, option: str) -> bool:
    """Start the cell as a stream: True if it is refused (a decodekit error) before the first event.
    A cell that starts is run to its end by `_run`, where a refusal after the first token fails.
    The start depends on the option only through `past_context`: each start is made once per module."""
    key = (id(model), id(draft), strategy, cache, option == "past_context")
    if key not in _REFUSED:
        _REFUSED[key] = _start(model, draft, strategy, cache, option)
    return _REFUSED[key]


def _start(model: GPT, draft: GPT, strategy: str, cache: str, option: str) -> bool:
    prompts = PROMPTS["plain"]
    options: dict[str, Any] = {"cache": cache, "max_new_tokens": 4 * CONTEXT if option == "past_context" else 12}
    if strategy == "speculative-model":
        options["draft"] = draft
    try:
        next(iter(dk.stream(model, prompts, strategy=STRATEGIES[strategy], **options)))
    except dk.DecodekitError as exc:
        assert str(exc), "a refusal says why"
        return True
    return False


@pytest.mark.parametrize("option", OPTIONS)
@pytest.mark.parametrize("cache", CACHES)
@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_cell(models: tuple[GPT, GPT], strategy: str, cache: str, option: str) -> None:
    model, draft = models
    if _refused_up_front(model, draft, strategy, cache, option):
        # Only two reasons are expected: a cache that keeps every token cannot pass the context, and
        # speculation without a cache cannot (one forward verifies every draft).
        keeps_all = cache in ("dense", "gqa", "int8")
        assert option == "past_context" and (keeps_all or (cache == "none" and "speculative" in strategy))
        return
    out, events = _run(model, draft, strategy, cache, option, chain="temperature(0.8) | top_k(20)")
    assert len(out.tokens) == 2 and all(out.finish_reasons)
    if option == "stream":
        streamed: list[list[int]] = [[], []]
        for event in events:
            streamed[event.row].append(event.token)
        assert streamed == out.tokens
    if option == "stop_strings":
        assert all("e" not in t and "o " not in t for t in out.text)
    if option == "logprobs":
        assert [len(lp) for lp in out.logprobs] == [len(t) for t in out.tokens]
    if option == "past_context":
        assert all(len(t) == 4 * CONTEXT for t in out.tokens if t)
    if strategy.startswith("speculative"):
        greedy, _ = _run(model, draft, strategy, cache, option, chain="greedy")
        reference, _ = _run(model, draft, "sample", cache, option, chain="greedy")
        assert greedy.tokens == reference.tokens


def test_the_matrix_is_mostly_working_cells(models: tuple[GPT, GPT]) -> None:
    """Refusals are the exception: only cells past the context with a cache that cannot get there."""
    model, draft = models
    refused = [(s, c) for s in STRATEGIES for c in CACHES if _refused_up_front(model, draft, s, c, "past_context")]
    assert len(refused) == 3 * len(STRATEGIES) + 2  # three keep-all caches; speculation without a cache
