"""The step of the standard chains reads nothing back to the host and compiles as one graph."""

from __future__ import annotations

from typing import Any, Literal

import pytest
import torch
from torch._subclasses.fake_tensor import DataDependentOutputException, FakeTensorMode

import decodekit as dk
from decodekit.testing import ctx_for

BANNED = 3  # a module global that `ban` below reads, as the README's `ban_newlines` reads `newline_id`

STANDARD = [
    "greedy",
    "temperature(0.8) | sample",
    "top_k(50) | top_p(0.9) | sample",
    "repetition_penalty(1.1) | temperature(0.8) | top_k(50) | top_p(0.9) | sample",
]


def run_on_fake_tensors(chain: dk.Chain, batch: int = 3) -> None:
    """`chain.select` on fake logits: values do not exist, so any host read (`.item()`, `.tolist()`,
    `bool(t)`, a data-dependent shape) raises."""
    ctx = ctx_for(batch, history=40, step=5)
    with FakeTensorMode(allow_non_fake_inputs=True):
        chain._select(torch.randn(batch, 50_257), ctx)


@pytest.mark.parametrize("text", STANDARD)
def test_a_standard_chains_step_reads_nothing_back(text: str) -> None:
    run_on_fake_tensors(dk.Chain.parse(text))


def test_the_fake_run_catches_a_host_read() -> None:
    def reads_back(logits: torch.Tensor, ctx: dk.DecodeContext) -> torch.Tensor:
        return logits / float(logits.amax())  # a host read

    with pytest.raises(DataDependentOutputException):
        run_on_fake_tensors(dk.Chain([reads_back]))


@pytest.mark.slow
@pytest.mark.xdist_group("compile")  # the compiling tests in one worker: inductor starts once, reuses its kernels
def test_the_full_chains_processors_compile_as_one_graph() -> None:
    """fullgraph=True fails on any graph break, a host read included."""
    chain = dk.Chain.parse(STANDARD[-1])
    x = torch.randn(2, 50_257, generator=torch.Generator().manual_seed(0))
    ctx = ctx_for(2, history=40, step=5)
    torch._dynamo.mark_static(x, 1)  # as `Chain.compiled` does: another test's vocabulary made it a symbol
    compiled = torch.compile(chain._process_fast, fullgraph=True)
    got, expected = compiled(x, ctx), chain._process_fast(x, ctx)
    assert isinstance(got, dk.Candidates) and isinstance(expected, dk.Candidates)
    assert torch.equal(got.indices, expected.indices)
    torch.testing.assert_close(got.values, expected.values)


@pytest.mark.slow
@pytest.mark.xdist_group("compile")
@pytest.mark.parametrize("position", ["learned", "rope"])  # 4 layers, rope, dense: once failed to compile
@pytest.mark.parametrize("cache", ["dense", "gqa"])
def test_generate_with_compile_gives_the_eager_tokens(position: Literal["learned", "rope"], cache: str) -> None:
    from decodekit_gpt.gpt import GPT, GPTConfig

    torch._dynamo.reset()  # GPT's automatic dynamic shapes as in a fresh process, whatever its group compiled before
    torch.manual_seed(0)
    config = GPTConfig(vocab_size=101, block_size=64, n_layer=4, n_head=4, n_kv_head=2, n_embd=32, position=position)
    model = GPT(config).eval()
    chain = "repetition_penalty(1.1) | temperature(0.8) | top_k(5) | top_p(0.9) | sample"
    prompts = [[1, 2, 3], [4, 5]]
    eager = dk.generate(model, prompts, chain=chain, max_new_tokens=6, seed=3, cache=cache)
    compiled = dk.generate(model, prompts, chain=chain, max_new_tokens=6, seed=3, cache=cache, compile=True)
    assert compiled.tokens == eager.tokens


def ban(logits: torch.Tensor, ctx: dk.DecodeContext) -> torch.Tensor:
    return logits.index_fill(1, torch.tensor([BANNED]), float("-inf"))


@pytest.mark.xdist_group("compile")
def test_a_compiled_step_reads_the_global_a_processor_reads_anew(monkeypatch: Any) -> None:
    """A compiled step folds a global a processor reads into its graph: the guard on it must stay, or a new
    value runs the old graph (a filter that dropped every guard on globals banned token 3 here after 5)."""
    torch._dynamo.reset()  # the group's earlier chains may have spent `_select`'s recompiles: then nothing compiles
    x = torch.zeros(1, 11)
    x[0, 5], x[0, 7] = 2.0, 1.0  # greedy picks 5, or 7 once 5 is banned
    for banned, expected in ((3, 5), (5, 7), (7, 5)):
        monkeypatch.setitem(globals(), "BANNED", banned)
        chain = dk.Chain([ban], selector=dk.create("greedy"))
        assert chain.compiled().step(x, dk.DecodeContext(tokens=torch.tensor([[1]]))).ids == [expected]


@pytest.mark.xdist_group("compile")
@pytest.mark.parametrize("text", ["xtc(0.5, 0.05) | mirostat_v2(3.0, 0.5)", "xtc(0.5, 0.05) | adaptive_p(0.2, 0.5)"])
def test_a_compiled_step_with_two_draws_and_a_stateful_selector_picks_as_eager(text: str) -> None:
    """`compile=True` draws one uniform per row ahead of the step: xtc takes it, the selector's draw comes from the
    generators inside the step, and its state in the context (mirostat's mu, adaptive-p's average) is updated in
    place; a ragged batch."""
    torch._dynamo.reset()  # as above: a step run eagerly past the recompile limit would prove nothing
    chain = dk.Chain.parse(text)
    x = torch.randn(3, 101, generator=torch.Generator().manual_seed(0)) * 2
    ctx = ctx_for(3, history=8, step=2, seed=4)
    ctx.prompt_lengths = torch.tensor([6, 3, 5])
    eager, compiled = ctx.fork(), chain.compiled()
    for _ in range(6):
        ctx.draw_uniforms()
        assert compiled.step(x, ctx).ids == chain.step(x, eager).ids
    # the same state per row, to rounding: inductor's exp (in a softmax) differs from ATen's by 1 ulp (docs/samplers.md)
    torch.testing.assert_close(ctx.state_for(chain.selector), eager.state_for(chain.selector))
