"""`prompt_logprobs=n` (vLLM's): each prompt token's log-probability under the model given the tokens before it, its
rank and the top n, pinned by a full forward of each prompt alone with `torch.log_softmax` by hand."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from decodekit_gpt.gpt import GPT, GPTConfig

import decodekit as dk
from decodekit.results import PromptLogprobs
from tinymodels import tiny_gpt

PROMPTS = [[5, 17, 3, 9, 44, 2, 8, 8, 9, 60], [7, 8], [83, 1, 33, 33, 12]]  # ragged: rows 1 and 2 left-padded
CACHES = [
    *("dense", "gqa", "int8", "window(size=16)", "none"),
    *("h2o(budget=6, recent=2)", "snapkv(budget=6, window=2, sinks=0, recent=2)"),  # prompts past the budget
]


@torch.no_grad()
def by_hand(model: GPT, prompt: list[int], n: int) -> list[PromptLogprobs | None]:
    """The prompt alone, one full forward, log_softmax in float32; the rank counts the tokens strictly more likely."""
    logits = model(torch.tensor([prompt]), torch.arange(len(prompt))[None], None)[0]
    lp = torch.log_softmax(logits.float(), -1)
    out: list[PromptLogprobs | None] = [None]
    for i in range(1, len(prompt)):
        row, token = lp[i - 1], prompt[i]
        top = row.topk(n)
        rank = 1 + sum(1 for v in row.tolist() if v > row[token].item())
        out.append(PromptLogprobs(row[token].item(), rank, list(zip(top.indices.tolist(), top.values.tolist()))))
    return out


def assert_same(got: list[PromptLogprobs | None], want: list[PromptLogprobs | None], tol: float = 1e-5) -> None:
    assert len(got) == len(want) and got[0] is None and want[0] is None
    for g, w in zip(got[1:], want[1:]):
        assert g is not None and w is not None
        assert g.logprob == pytest.approx(w.logprob, abs=tol) and g.rank == w.rank
        assert [i for i, _ in g.top] == [i for i, _ in w.top]
        assert [v for _, v in g.top] == pytest.approx([v for _, v in w.top], abs=tol)


@pytest.mark.parametrize("cache", CACHES)
def test_a_ragged_batch_equals_each_prompt_alone_by_hand(model: GPT, cache: str) -> None:
    """Every cache: the prefill's logits are the full forward's (a scored cache compresses after it; the prompts fit
    the window), and left padding never reaches a row's values."""
    out = dk.generate(model, PROMPTS, cache=cache, chain="greedy", max_new_tokens=2, prompt_logprobs=3)
    assert out.prompt_logprobs is not None and len(out.prompt_logprobs) == len(PROMPTS)
    tol = 2e-3 if cache == "int8" else 1e-5  # int8 keys and values, as generation attends them
    for prompt, got in zip(PROMPTS, out.prompt_logprobs):
        assert_same(got, by_hand(model, prompt, 3), tol)


@pytest.mark.xdist_group("compile")  # with the compiling tests (skipped where torch cannot compile)
def test_compiled_and_n_zero_and_the_vocabulary() -> None:
    model = tiny_gpt()
    V = model.spec.vocab_size
    out = dk.generate(model, PROMPTS, chain="greedy", max_new_tokens=2, prompt_logprobs=0, compile=True)
    assert out.prompt_logprobs is not None
    for prompt, got in zip(PROMPTS, out.prompt_logprobs):
        assert_same(got, by_hand(model, prompt, 0))
    whole = dk.generate(model, PROMPTS[:1], max_new_tokens=0, prompt_logprobs=V).prompt_logprobs
    assert whole is not None and whole[0][1] is not None
    assert math.fsum(math.exp(v) for _, v in whole[0][1].top) == pytest.approx(1.0, abs=1e-5)


class Uniform(torch.nn.Module):
    """Equal logits everywhere: every token has log-probability -log V and rank 1 (all tie)."""

    spec = dk.ModelSpec(n_layers=1, n_heads=1, n_kv_heads=1, head_dim=4, vocab_size=8, max_positions=32)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, cache: Any) -> torch.Tensor:
        return torch.zeros(*input_ids.shape, 8)


def test_hand_worked_ties() -> None:
    out = dk.generate(Uniform(), [[1, 2, 3]], cache="none", max_new_tokens=0, prompt_logprobs=2)
    assert out.tokens == [[]] and out.prompt_logprobs is not None
    assert len(out.prompt_logprobs[0]) == 3 and out.prompt_logprobs[0][0] is None
    for entry in out.prompt_logprobs[0][1:]:
        assert entry is not None and entry.logprob == pytest.approx(-math.log(8)) and entry.rank == 1
        assert [v for _, v in entry.top] == pytest.approx([-math.log(8)] * 2)


@pytest.mark.parametrize("cache", ["dense", "window(size=16)", "none"])
def test_scoring_a_continuation_gives_generation_s_raw_logprobs(model: GPT, cache: str) -> None:
    """The prompt followed by what the model generated scores each generated token as generation reported it (not
    under a scored cache: generation attends its compressed prompt, scoring the whole text)."""
    gen = dk.generate(model, PROMPTS, cache=cache, max_new_tokens=4, seed=0, logprobs=0)
    assert gen.logprobs is not None
    full = [p + t for p, t in zip(PROMPTS, gen.tokens)]
    scored = dk.generate(model, full, cache=cache, max_new_tokens=0, prompt_logprobs=0).prompt_logprobs
    assert scored is not None
    for prompt, lps, entries in zip(PROMPTS, gen.logprobs, scored):
        got = [e.logprob for e in entries[len(prompt) :] if e is not None]
        assert got == pytest.approx([lp.raw for lp in lps], abs=1e-5)


def test_off_the_prefill_projects_the_last_column_only() -> None:
    """No cost when off: the prefill asks for `last_only`; on, for every column."""
    model, asked = tiny_gpt(), []
    forward = model.forward

    def spy(*args: Any, **kwargs: Any) -> torch.Tensor:
        asked.append(kwargs.get("last_only", False))
        return forward(*args, **kwargs)

    model.forward = spy  # type: ignore[method-assign]
    assert dk.generate(model, PROMPTS, max_new_tokens=1).prompt_logprobs is None
    dk.generate(model, PROMPTS, max_new_tokens=1, prompt_logprobs=1)
    assert asked == [True, False]


def test_streamed_beam_and_cfg_give_them(model: GPT) -> None:
    want = [by_hand(model, p, 2) for p in PROMPTS]
    events = dk.stream(model, PROMPTS, max_new_tokens=2, prompt_logprobs=2)
    list(events)
    assert events.result is not None and events.result.prompt_logprobs is not None
    for strategy in ["beam(num_beams=3)", "cfg(scale=1.5)", "cfg(scale=1)"]:
        for max_new in (0, 3):
            out = dk.decode(model, PROMPTS, strategy=strategy, max_new_tokens=max_new, prompt_logprobs=2)
            assert out.prompt_logprobs is not None, strategy
            for got, w in zip(out.prompt_logprobs, want):
                assert_same(got, w)


@pytest.mark.parametrize("cache", CACHES)
@pytest.mark.parametrize("draft", ["ngram", "model"])
def test_speculative_gives_them_from_its_first_round(model: GPT, cache: str, draft: str) -> None:
    """Speculation feeds each prompt with its first drafts, not by `prefill`: that forward scores the prompts, for a
    batch in one forward or each row alone (window), in blocks past the context, and for a row that emits nothing;
    the tokens are those without prompt_logprobs."""
    options: dict[str, Any] = {"strategy": "speculative", "k": 3, "cache": cache, "seed": 4}
    options["draft"] = tiny_gpt(model.spec.n_kv_heads, seed=1) if draft == "model" else "ngram"
    tol = 2e-3 if cache == "int8" else 1e-5
    for limits in ([4, 6, 3], [4, 0, 3], [0, 5, 0]):
        out = dk.decode(model, PROMPTS, max_new_tokens=limits, prompt_logprobs=3, **options)
        assert out.prompt_logprobs is not None and len(out.prompt_logprobs) == len(PROMPTS)
        for prompt, got in zip(PROMPTS, out.prompt_logprobs):
            assert_same(got, by_hand(model, prompt, 3), tol)
        assert out.tokens == dk.decode(model, PROMPTS, max_new_tokens=limits, **options).tokens


@pytest.mark.parametrize("cache", ["window(size=12)", "streaming(budget=12)", "h2o(budget=12)"])
def test_speculative_scores_a_prompt_past_the_context_as_generate_does(cache: str) -> None:
    """Through a cache that evicts, a prompt longer than the context goes in blocks of the context, as the engine's
    prefill cuts them (`block_starts`): the same scores (a cache that attends a block whole, streaming or h2o, gave
    others when speculation cut its blocks otherwise)."""
    torch.manual_seed(0)
    config = GPTConfig(vocab_size=101, block_size=16, n_layer=2, n_head=4, n_kv_head=2, n_embd=32, position="rope")
    model = GPT(config).eval()
    prompt = [(7 * i) % 101 for i in range(40)]
    options: dict[str, Any] = {"cache": cache, "max_new_tokens": 3, "prompt_logprobs": 2}
    want = dk.generate(model, [prompt], **options).prompt_logprobs
    got = dk.decode(model, [prompt], strategy="speculative", draft="ngram", **options).prompt_logprobs
    assert want is not None and got is not None and len(got[0]) == 40
    assert_same(got[0], want[0])


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (-1, r"prompt_logprobs=-1 is invalid; allowed: an integer 0 <= prompt_logprobs <= 101, or None"),
        (102, r"prompt_logprobs=102 is invalid"),
        (1.5, r"prompt_logprobs=1.5 is invalid"),
        ("2", r"prompt_logprobs='2' is invalid"),
    ],
)
def test_bad_values(value: object, message: str) -> None:
    with pytest.raises(dk.ParameterError, match=message):
        dk.generate(tiny_gpt(), PROMPTS, prompt_logprobs=value)  # type: ignore[arg-type]


def test_no_cache_refuses_a_prompt_past_the_context() -> None:
    """Without a cache, generation crops the context; the prompt's first tokens would have no logits."""
    model = tiny_gpt(block_size=16)
    with pytest.raises(dk.ParameterError, match=r"prompt_logprobs=1 is invalid with cache='none' and a prompt of 20"):
        dk.generate(model, [list(range(20))], cache="none", prompt_logprobs=1)
    # before: "allowed: prompts of at most 16 tokens, or a cache", which learned positions (tiny_gpt's) refuse past
    # the context whatever it is; a rotary model's is one that evicts
    learned = r"allowed: prompts of at most 16 tokens \(the model's positions are absolute: no cache scores past its"
    with pytest.raises(dk.ParameterError, match=learned):
        dk.generate(model, [list(range(20))], cache="none", prompt_logprobs=1)
    torch.manual_seed(0)
    rotary = GPT(GPTConfig(vocab_size=101, block_size=16, n_layer=2, n_head=4, n_embd=32, position="rope")).eval()
    with pytest.raises(dk.ParameterError, match=r"16 tokens, or a cache that evicts \(cache='window\(size=N\)'\)"):
        dk.generate(rotary, [list(range(20))], cache="none", prompt_logprobs=1)
    assert dk.generate(rotary, [list(range(20))], cache="window(size=8)", prompt_logprobs=1, max_new_tokens=0)
    assert dk.generate(model, [list(range(20))], cache="none", max_new_tokens=1).tokens  # without it: cropped


@pytest.mark.parametrize("cache", ["dense", "window(size=8, sinks=2)"])
def test_past_the_context_the_advice_leaves_out_the_no_cache_it_refuses(cache: str) -> None:
    """Scoring a text past the context through a cache: the error advised cache='none', which then refuses
    prompt_logprobs for that prompt (above); a prompt within the context may still take it."""
    model = tiny_gpt(block_size=16)
    with pytest.raises(dk.ContextLengthError) as refused:
        dk.generate(model, [list(range(20))], cache=cache, max_new_tokens=0, prompt_logprobs=1)
    assert "cache='none'" not in str(refused.value) and "fewer" in str(refused.value)
    with pytest.raises(dk.ContextLengthError, match=r"cache='none'"):  # the prompt fits: cropping serves it
        dk.generate(model, [list(range(12))], cache=cache, max_new_tokens=6, prompt_logprobs=1)
    assert dk.generate(model, [list(range(12))], cache="none", max_new_tokens=6, prompt_logprobs=1).prompt_logprobs


def test_a_strategy_that_never_prefills_is_told() -> None:
    """A plugin's strategy that feeds its prompts itself, and neither computes them nor refuses: a PluginError."""
    from decodekit.engine import Decoding

    def policy(d: Decoding, params: Any) -> None:
        d.open()
        for row in range(len(d.rows)):
            d.emit(row, 0)

    d = Decoding(dk.validate(tiny_gpt(), [[1, 2]], max_new_tokens=1, prompt_logprobs=1), "own", events=False)
    for _ in d.run(policy, None, per_round=False):  # type: ignore[arg-type]
        pass
    with pytest.raises(dk.PluginError, match=r"strategy own: was asked for prompt_logprobs and never prefilled"):
        d.generation()


def test_the_cli_puts_them_in_the_json_document() -> None:
    """`decodekit generate --prompt-logprobs N --json`: the model's own (tiny-shakespeare), by hand; without --json,
    past the vocabulary or with another strategy, one line of error (batch jobs: test_cli_logprobs.py)."""
    import json

    from cli_runner import run_cli

    model = dk.load_model("tiny-shakespeare")
    ids = model.tokenizer.encode("ROMEO:")
    run = run_cli(["generate", "ROMEO:", "--max-new-tokens", "0", "--prompt-logprobs", "2", "--json"])
    assert run.returncode == 0, run.stderr
    records = json.loads(run.stdout)["prompt_logprobs"]
    with torch.no_grad():
        lp = torch.log_softmax(model(torch.tensor([ids]), torch.arange(len(ids))[None], None)[0].float(), -1)
    assert records[0] is None and [r["token"] for r in records[1:]] == ids[1:]
    # A log-probability is logit - logsumexp, both ~5-10 here (a float32 ulp of 4.8e-7 to 9.5e-7), each a sum
    # through the model's layers in another order than the full forward's: an absolute bound of ~10 such ulps, as
    # assert_same's (torch 2.6 differs by 3.6e-6 on -1.83: pytest's default, relative 1e-6, was under 2 ulps).
    want = [lp[i - 1, ids[i]].item() for i in range(1, len(ids))]
    assert [r["logprob"] for r in records[1:]] == pytest.approx(want, abs=1e-5)
    assert [[t for t, _ in r["top"]] for r in records[1:]] == [
        lp[i].topk(2).indices.tolist() for i in range(len(ids) - 1)
    ]
    for argv, message in [
        (["--prompt-logprobs", "2"], "--prompt-logprobs 2: reported in the JSON document; add --json"),
        (
            ["--prompt-logprobs", "900", "--json"],
            "prompt_logprobs=900 is invalid; allowed: an integer 0 <= prompt_logprobs",
        ),
        (["--prompt-logprobs", "2", "--json", "--input", "x.jsonl", "--output", "y"], "--input cannot be combined"),
    ]:
        run = run_cli(["generate", "ROMEO:", "--max-new-tokens", "1", *argv])
        assert run.returncode == 2 and message in run.stderr and "Traceback" not in run.stderr, run.stderr
