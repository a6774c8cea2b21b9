"""Bad options fail with decodekit's errors, naming parameter, value and what is allowed; the plugin is light."""

from __future__ import annotations

import re
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any, Literal

import pytest
import torch
from decodekit_gpt.gpt import GPT, GPTConfig
from decodekit_speculative.strategy import speculative

import decodekit as dk
from decodekit.strategies import strategy_params
from decodekit.testing.registry import check_hook_imports_no_torch

PROMPT = [5, 17, 3]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"k": 0}, r"speculative: k=0 is invalid.*allowed: an integer 1 <= k <= 64"),
        ({"ngram_size": 0}, r"ngram_size=0 is invalid.*allowed: an integer 1 <= ngram_size"),
        (
            {"k": 20, "cache": "window(size=8)"},
            r"k=20 is invalid with cache window.*at most 16.*allowed: k <= 15, or .*slack >= 21\)$",
        ),
        (  # no k fits: the message once suggested k <= 0
            {"k": 1, "cache": "streaming(budget=12, slack=1)"},
            r"k=1 is invalid with cache streaming.*at most 1 \(its rollback\); allowed: a cache that can take back "
            r"2 \(window and the scored caches: slack >= 2\)$",
        ),
        (  # "allowed: fewer tokens" said no number
            {"cache": "none", "max_new_tokens": 62},
            r"cache='none' cannot go past the model's context of 64 .*allowed: max_new_tokens <= 61 \(the context "
            r"less the prompt's 3 tokens\)",
        ),
        ({"max_new_tokens": -1}, r"max_new_tokens=-1 is invalid; allowed: an integer >= 0"),
        ({"draft": 3}, r"draft=3 is invalid; allowed: a string or a Model"),
        ({"draft": None}, r"draft=None is invalid; allowed: a string or a Model"),  # once ran prompt lookup silently
        ({"schedule": "fast"}, r"schedule='fast' is invalid.*allowed: 'constant' or 'heuristic'$"),
        ({"colour": 1}, r"unknown parameter colour=1; allowed parameters: draft, k, schedule, ngram_size, chain"),
    ],
)
def test_bad_options(target: GPT, options: dict[str, object], message: str) -> None:
    kwargs: dict[str, object] = {"draft": "ngram", "max_new_tokens": 8, **options}
    with pytest.raises((dk.ParameterError, TypeError), match=message) as decoded:
        dk.decode(target, [PROMPT], strategy="speculative", **kwargs)
    # dk.validate refuses it too, in the same words (it accepted k beyond the cache's rollback)
    with pytest.raises(type(decoded.value)) as validated:
        dk.validate(target, [PROMPT], strategy="speculative", **kwargs)
    assert str(validated.value) == str(decoded.value)


@pytest.mark.parametrize(
    ("draft", "error", "says"),
    [
        ("tiny-shakespeare-draft(x=1)", dk.ParameterError, "model tiny-shakespeare-draft: unknown parameter x=1"),
        ("tiny-shakespeare-draft:/nonexistent", dk.ParameterError, "tiny-shakespeare-draft: "),
        ("tiny-shakespeare-draft(", dk.ChainSpecError, "model 'tiny-shakespeare-draft(': at position 23"),
    ],
)
def test_a_draft_that_cannot_load_is_named_as_the_draft(
    target: GPT, draft: str, error: type[Exception], says: str
) -> None:
    """A draft's bad path or parameters said only what the loader says, in the words a bad --model gets."""
    with pytest.raises(error, match="^" + re.escape(f"speculative: draft={draft!r}: {says}")):
        speculative(target, [PROMPT], draft=draft, max_new_tokens=8)


def test_unknown_draft_name_lists_models(target: GPT) -> None:
    """It said only "unknown model 'no-such-draft'", not that the draft was meant."""
    with pytest.raises(
        dk.UnknownNameError,
        match=r"^speculative: draft='no-such-draft': unknown model 'no-such-draft'; installed: .*tiny-shakespeare.*; "
        r"or 'ngram' \(drafts from the prompt\)$",
    ):
        speculative(target, [PROMPT], draft="no-such-draft", max_new_tokens=8)


def test_vocabulary_mismatch(target: GPT) -> None:
    """A draft object is named by its class: the message once held its whole module repr, a line per layer."""
    small = GPT(GPTConfig(vocab_size=50, block_size=64, n_layer=1, n_head=2, n_embd=8))
    with pytest.raises(dk.ParameterError) as refused:
        speculative(target, [PROMPT], draft=small, max_new_tokens=8)
    assert str(refused.value) == (
        "speculative: draft=<GPT> has a vocabulary of 50 tokens, the target 101; allowed: a draft sharing the "
        "target's vocabulary"
    )


class LookAlikeSpec(GPT):
    """A draft whose spec has a ModelSpec's required fields but is no ModelSpec."""

    @property
    def spec(self) -> Any:
        real, fields = super().spec, ("n_layers", "n_heads", "n_kv_heads", "head_dim", "vocab_size", "max_positions")
        return SimpleNamespace(**{name: getattr(real, name) for name in fields})


def test_a_draft_whose_spec_is_no_model_spec_is_named_as_the_draft(target: GPT) -> None:
    """Before: AttributeError: 'types.SimpleNamespace' object has no attribute 'value_dim', from the draft's cache."""
    draft = LookAlikeSpec(GPTConfig(vocab_size=101, block_size=64, n_layer=1, n_head=2, n_embd=8))
    for call in (dk.decode, dk.validate):
        with pytest.raises(dk.ParameterError) as refused:
            call(target, [PROMPT], strategy="speculative", draft=draft, max_new_tokens=8)
        assert str(refused.value) == (
            "speculative: draft=<LookAlikeSpec> is invalid; allowed: a registered model name, a model object with a "
            "decodekit.ModelSpec `spec`, or 'ngram'"
        )


def test_a_draft_whose_forward_takes_only_input_ids_is_named_as_the_draft(
    target: GPT, ids_only: Callable[[int], torch.nn.Module]
) -> None:
    """Before: Python's "OnlyIds.forward() takes 2 positional arguments but 4 were given" from the first draft
    forward; the target got this check (`check_call`) before any work, the draft did not."""
    for call in (dk.decode, dk.validate):
        with pytest.raises(dk.ParameterError) as refused:
            call(target, [PROMPT], strategy="speculative", draft=ids_only(101), max_new_tokens=8)
        assert str(refused.value) == (
            "speculative: draft=<OnlyIds>: its forward takes (input_ids), but decodekit calls it as "
            "forward(input_ids, positions, cache); allowed: forward(input_ids [B, T], positions [B, T], cache) -> "
            "logits [B, T, V], cache None or a KVCache (docs/concepts.md, Models)"
        )


def test_prompt_lookup_is_the_default_draft(target: GPT) -> None:
    options = {"chain": "greedy", "max_new_tokens": 8}
    default = dk.decode(target, [PROMPT], strategy="speculative", **options)
    assert default.tokens == speculative(target, [PROMPT], draft="ngram", **options).tokens
    assert strategy_params("speculative").draft == "ngram"  # type: ignore[attr-defined]
    with pytest.raises(dk.ParameterError, match=r"draft=None is invalid; allowed: a string or a Model"):
        dk.decode(target, [PROMPT], strategy="speculative(draft=None)", **options)  # the CLI's string form


def test_zero_new_tokens(target: GPT) -> None:
    out = speculative(target, [PROMPT, [1]], draft="ngram", max_new_tokens=0)
    assert out.tokens == [[], []] and out.acceptance_rate is None and out.mean_acceptance_length is None
    assert out.accepted_by_position == [[0] * 4, [0] * 4]


@pytest.mark.parametrize("which", ["ngram", "model"])
@pytest.mark.parametrize("stage", ["logit_bias({101: 1.0})", "allowed_tokens([3, 150])"])
def test_zero_new_tokens_refuses_a_chain_past_the_vocabulary_as_sample_does(
    target: GPT, draft: GPT, stage: str, which: str
) -> None:
    """With no new tokens no round ran the chain, so a stage `sample` refuses (ids past the 101 tokens) was accepted."""
    chain = f"{stage} | top_k(5)"
    with pytest.raises(dk.ParameterError) as refused:
        dk.generate(target, [PROMPT, [1]], chain=chain, max_new_tokens=0)
    assert "outside the vocabulary of 101 tokens" in str(refused.value)
    with pytest.raises(dk.ParameterError) as info:
        speculative(target, [PROMPT, [1]], draft=draft if which == "model" else "ngram", chain=chain, max_new_tokens=0)
    assert str(info.value) == str(refused.value)


def test_plugin_registers_by_import_path_without_torch() -> None:
    registered = check_hook_imports_no_torch("decodekit_speculative.plugin", "register_strategies")
    assert ("speculative", "decodekit_speculative.strategy:speculative_policy") in registered
    assert "speculative" in dk.get_registry().strategies


def test_context_too_long(target: GPT) -> None:
    with pytest.raises(
        dk.ContextLengthError, match="prompt of 3 tokens \\+ max_new_tokens=62 = 65 tokens exceeds .* 64 positions"
    ):
        speculative(target, [PROMPT], draft="ngram", max_new_tokens=62)


class NaNRow:
    """The target with NaN logits in row 1 from its second new token on."""

    def __init__(self, model: GPT, prompt_length: int) -> None:
        self.model, self.spec, self.prompt_length = model, model.spec, prompt_length

    def __call__(self, ids: torch.Tensor, positions: torch.Tensor, cache: object, **kw: object) -> torch.Tensor:
        logits: torch.Tensor = self.model(ids, positions, cache, **kw).clone()
        logits[1, positions[1] >= self.prompt_length] = float("nan")
        return logits


@pytest.mark.parametrize("chain", ["greedy", "temperature(0.8)", "repetition_penalty(1.2) | greedy"])
def test_nan_logits_name_step_and_row(target: GPT, chain: str) -> None:
    with pytest.raises(dk.NumericsError, match=r"speculative \(target model\): step 1, row 1: .*NaN"):
        speculative(NaNRow(target, 3), [PROMPT, PROMPT], draft="ngram", chain=chain, max_new_tokens=8)


@pytest.mark.parametrize("chain", ["greedy", "repetition_penalty(1.2) | greedy"])
def test_nan_draft_logits_name_the_draft(target: GPT, draft: GPT, chain: str) -> None:
    """Before: a chain without processors named the target in the draft's error ("speculative (target model): ...
    the draft model's logits cannot be sampled")."""
    with pytest.raises(dk.NumericsError, match=r"speculative \(draft model\): step 1, row 1: .*NaN"):
        speculative(target, [PROMPT, PROMPT], draft=NaNRow(draft, 3), chain=chain, max_new_tokens=8)


def test_a_named_draft_is_loaded_once_for_every_check_and_decode(monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch job checks every line (`dk.validate` runs the policy's set-up) and then decodes: a draft named in the
    strategy once loaded its weights again for each line and each batch."""
    import decodekit_speculative.strategy as strategy

    loads: list[str] = []
    from decodekit.plugins import load_model as load  # what the strategy imported

    def counted(name: str) -> Any:
        loads.append(name)
        return load(name)

    monkeypatch.setattr(strategy, "load_model", counted)
    strategy._loaded_draft.cache_clear()
    target = dk.load_model("tiny-shakespeare")
    options: dict[str, Any] = {"strategy": "speculative(draft=tiny-shakespeare-draft, k=2)", "chain": "greedy"}
    options["max_new_tokens"] = 3
    for prompt in ("ROMEO:", "JULIET:", "HAMLET:"):
        dk.validate(target, [prompt], **options)
    first = dk.decode(target, ["ROMEO:"], **options).tokens
    assert dk.decode(target, ["ROMEO:"], **options).tokens == first
    assert loads == ["tiny-shakespeare-draft"]


def test_a_named_draft_is_looked_up_again_in_another_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """The loaded drafts were kept by name for the rest of the process: a draft whose plugin was then disabled
    still decoded."""
    import decodekit.plugins

    target = dk.load_model("tiny-shakespeare")
    options: dict[str, Any] = {"strategy": "speculative(draft=tiny-shakespeare-draft, k=2)", "chain": "greedy"}
    options["max_new_tokens"] = 3
    dk.decode(target, ["ROMEO:"], **options)
    monkeypatch.setenv("DECODEKIT_DISABLE_PLUGINS", "decodekit-shakespeare")
    monkeypatch.setattr(decodekit.plugins, "_registry", None)  # rebuilt from the variable on first use
    with pytest.raises(dk.DecodekitError, match="'tiny-shakespeare-draft' is installed but disabled"):
        dk.decode(target, ["ROMEO:"], **options)


@pytest.mark.parametrize(
    ("position", "allowed"),
    [
        ("learned", "a prompt of fewer than 64 tokens (the model's positions are absolute: no cache takes it past its"),
        ("rope", "a prompt of fewer than 64 tokens, or a cache (one that evicts, such as window, goes past the"),
    ],
)
def test_no_cache_past_the_context_advises_what_decodes(
    make_tiny: Callable[..., GPT], position: Literal["learned", "rope"], allowed: str
) -> None:
    """Before, for a prompt of 70 tokens: 'allowed: max_new_tokens <= -6 (the context less the prompt's 70 tokens),
    or a cache (one that evicts, such as window, goes past the context)', which learned positions refuse."""
    with pytest.raises(dk.ParameterError) as refused:
        dk.decode(
            make_tiny(position=position), [list(range(70))], strategy="speculative", cache="none", max_new_tokens=4
        )
    assert str(refused.value).endswith(f"allowed: {allowed} context)")
