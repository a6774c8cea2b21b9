"""`LSTMModel` through a KV cache: the same logits as the uncached sequence, after crops and with left padding,
and as a draft the speculative strategy gives `dk.generate`'s tokens."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from compile_counting import count_graphs
from decodekit_gpt.gpt import GPT, GPTConfig
from decodekit_shakespeare.lstm import LSTMConfig, LSTMModel

import decodekit as dk


@pytest.fixture(scope="module")
def lstm() -> LSTMModel:
    torch.manual_seed(0)
    return LSTMModel(LSTMConfig(vocab_size=30, block_size=64, n_layer=2, n_embd=16, n_input=8)).eval()


def cache_for(model: LSTMModel, batch: int, backend: str = "dense") -> dk.KVCache:
    return dk.create_cache(backend, dk.CacheSpec.for_model(model.spec, batch_size=batch, capacity=40))


@pytest.mark.parametrize("backend", ["dense", "gqa"])
def test_cached_steps_and_crops_equal_the_whole_sequence(lstm: LSTMModel, backend: str) -> None:
    ids = torch.randint(0, 30, (2, 24), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        whole = lstm(ids)
        cache = cache_for(lstm, 2, backend)
        parts = [lstm(ids[:, :10], torch.arange(10).expand(2, -1), cache)]
        parts += [lstm(ids[:, t : t + 1], torch.full((2, 1), t), cache) for t in range(10, 20)]
        torch.testing.assert_close(torch.cat(parts, 1), whole[:, :20])
        cache.crop(13)  # type: ignore[attr-defined]  # dense and gqa crop; roll back seven, then feed the rest
        torch.testing.assert_close(lstm(ids[:, 13:], torch.arange(13, 24).expand(2, -1), cache), whole[:, 13:])


def test_a_lossy_store_holds_the_same_states_however_the_tokens_are_fed(lstm: LSTMModel) -> None:
    """Each state goes on as the cache gives it back: with int8 a block of tokens kept its states in float
    until its end while token-by-token feeding rounded each one, so the stored states (and in a batch, where a
    row's block length depends on the other rows, its tokens) depended on how the tokens came."""
    ids = torch.randint(0, 30, (2, 12), generator=torch.Generator().manual_seed(2))
    with torch.inference_mode():
        whole, steps = cache_for(lstm, 2, "int8"), cache_for(lstm, 2, "int8")
        lstm(ids, torch.arange(12).expand(2, -1), whole)
        for t in range(12):
            lstm(ids[:, t : t + 1], torch.full((2, 1), t), steps)
        for layer in range(2):
            empty = torch.empty(2, 1, 0, 16)
            for a, b in zip(whole.update(layer, empty, empty), steps.update(layer, empty, empty)):
                assert torch.equal(a, b), f"layer {layer}: the stored states differ by {(a - b).abs().max():.2e}"


def test_left_padding_starts_each_row_afresh(lstm: LSTMModel) -> None:
    rows = [[3, 4, 5, 6, 7], [9, 2]]
    ids = torch.tensor([rows[0], [0, 0, 0, *rows[1]]])
    positions = torch.tensor([[0, 1, 2, 3, 4], [-3, -2, -1, 0, 1]])
    with torch.inference_mode():
        batched = lstm(ids, positions, cache_for(lstm, 2))
        for b, row in enumerate(rows):
            torch.testing.assert_close(batched[b, -len(row) :], lstm(torch.tensor([row]))[0])


def test_speculative_with_an_lstm_draft_equals_generate(lstm: LSTMModel) -> None:
    torch.manual_seed(2)
    target = GPT(GPTConfig(vocab_size=30, block_size=64, n_layer=2, n_head=2, n_embd=16)).eval()
    prompts = [[5, 17, 3, 9], [7], [1, 2, 1, 2, 1, 2]]
    for chain in ("greedy", "repetition_penalty(1.3) | greedy"):
        ref = dk.generate(target, prompts, chain=chain, max_new_tokens=16)
        for k in (1, 4):
            out = dk.decode(target, prompts, strategy="speculative", draft=lstm, k=k, chain=chain, max_new_tokens=16)
            assert out.tokens == ref.tokens


def test_an_evicting_cache_is_refused(lstm: LSTMModel) -> None:
    cache = dk.create_cache("window(size=8)", dk.CacheSpec.for_model(lstm.spec, batch_size=1, capacity=40))
    with pytest.raises(dk.ParameterError, match="keeps every token"):
        lstm(torch.tensor([[1, 2]]), torch.tensor([[0, 1]]), cache)


def test_an_evicting_cache_is_refused_by_name_before_any_forward(lstm: LSTMModel) -> None:
    """Before: a prompt given twice reached the forward through the prefill's view of the cache, and the refusal named
    the view ('LSTMModel: cache CopiesView is invalid'), then the class ('cache WindowCache'): the cache is named as
    the user did, as the core's and HFModel's refusals name it (`decodekit.cache.cache_name`)."""
    forwards: list[int] = []
    hook = lstm.register_forward_pre_hook(lambda module, args: forwards.append(args[0].shape[0]))
    try:
        with pytest.raises(dk.ParameterError, match=r"LSTMModel: cache window is invalid; allowed: .*every token"):
            dk.generate(lstm, [[1, 2], [1, 2]], cache="window(size=8)", max_new_tokens=2)
    finally:
        hook.remove()
    assert forwards == []


def test_the_steps_read_the_weights_the_lstm_holds_after_a_load_or_a_move() -> None:
    """The cached steps read `cell_weights`, not the `nn.LSTM`: they follow a load that replaces the tensors
    (`assign=True`) and a move to another dtype."""
    torch.manual_seed(3)
    model = LSTMModel(LSTMConfig(vocab_size=30, block_size=64, n_layer=2, n_embd=16, n_input=8)).eval()
    other = LSTMModel(model.config).eval()
    model.load_state_dict(other.state_dict(), assign=True)
    ids = torch.randint(0, 30, (2, 6), generator=torch.Generator().manual_seed(4))
    with torch.inference_mode():
        for m in (model, model.double()):
            cached = m(ids, torch.arange(6).expand(2, -1), cache_for(m, 2))
            torch.testing.assert_close(cached, m(ids))
            torch.testing.assert_close(cached.float(), other.double()(ids).float())


@pytest.mark.xdist_group("compile")
def test_a_cached_forward_compiles_without_a_break(lstm: LSTMModel, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under compile=True the LSTM's steps trace: before, `int(positions.min())` broke the graph and dynamo
    refused the `nn.LSTM` the steps read their weights from, so each forward ran eagerly after 2 breaks."""
    graphs = count_graphs(monkeypatch)
    options: dict[str, Any] = {"chain": "temperature(0.9) | top_k(20)", "max_new_tokens": 8, "cache": "dense"}
    options["seed"] = 1
    prompts = [[3, 4, 5, 6], [9, 2]]  # left padding: a row starts afresh inside the prompt
    eager = dk.generate(lstm, prompts, **options).tokens
    torch._dynamo.utils.counters.clear()
    assert dk.generate(lstm, prompts, compile=True, **options).tokens == eager
    assert sum(torch._dynamo.utils.counters["graph_break"].values()) == 0
    assert len(graphs) == 3  # the chain's step; the forward's prompt, then every later step
    torch._dynamo.reset()
