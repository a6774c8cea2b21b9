from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest
import torch
from decodekit_shakespeare.model import WEIGHTS_NAME, ShakespeareGPT, load_tiny_shakespeare, loss_per_char
from decodekit_shakespeare.tokenizer import CharTokenizer
from safetensors.torch import load_file, save_file

from decodekit.testing.registry import check_hook_imports_no_torch

# Measured loss of the shipped weights on tests/data/hamlet_slice.txt (see README), plus margin.
MEASURED_SLICE_LOSS = 1.4489  # evaluate.py --val tests/data/hamlet_slice.txt
SLICE_LOSS_BOUND = min(1.80, MEASURED_SLICE_LOSS + 0.03)

WEIGHTS = Path(str(resources.files("decodekit_shakespeare"))) / WEIGHTS_NAME


@pytest.fixture(scope="module")
def model() -> ShakespeareGPT:
    return load_tiny_shakespeare()


def test_loader_spec(model: ShakespeareGPT) -> None:
    spec = model.spec
    assert spec.n_heads == 8 and spec.n_kv_heads == 2
    assert spec.vocab_size == 84
    assert spec.max_positions == model.config.block_size == 256
    assert isinstance(model.tokenizer, CharTokenizer)
    assert model.tokenizer.vocab_size == spec.vocab_size
    assert not model.training
    assert model.lm_head.weight is model.wte.weight
    assert next(model.parameters()).dtype == torch.float32


def test_weights_file_small() -> None:
    assert WEIGHTS.stat().st_size <= 10 * 1024 * 1024


def test_slice_loss_below_bound(model: ShakespeareGPT, hamlet_slice: str) -> None:
    loss = loss_per_char(model, model.tokenizer.encode(hamlet_slice))
    assert loss <= SLICE_LOSS_BOUND, f"loss {loss:.4f} on the Hamlet slice exceeds {SLICE_LOSS_BOUND:.4f}"


def test_swapped_weights_fail_the_bound(tmp_path: Path, hamlet_slice: str) -> None:
    state = load_file(str(WEIGHTS))
    # Swap two layers' attention projections and shuffle the embedding rows.
    a, b = "h.0.attn.c_attn.weight", "h.1.attn.c_attn.weight"
    state[a], state[b] = state[b].clone(), state[a].clone()
    state["wte.weight"] = state["wte.weight"].flip(0).contiguous()
    broken = tmp_path / WEIGHTS_NAME
    save_file(state, str(broken))
    model = load_tiny_shakespeare(str(broken))
    assert loss_per_char(model, model.tokenizer.encode(hamlet_slice[:8000])) > SLICE_LOSS_BOUND


def test_loader_rejects_bad_argument(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="allowed"):
        load_tiny_shakespeare(str(tmp_path / "nope.bin"))


def test_greedy_continuation_is_text(model: ShakespeareGPT) -> None:
    tok = model.tokenizer
    ids = torch.tensor([tok.encode("HAMLET:\nTo be, or not to be")])
    with torch.no_grad():
        for _ in range(20):
            nxt = model(ids)[:, -1].argmax(-1, keepdim=True)
            ids = torch.cat([ids, nxt], dim=1)
    text = tok.decode(ids[0].tolist())
    assert text.startswith("HAMLET:\nTo be, or not to be") and len(text) == 47


def test_plugin_registers_by_import_path_without_torch() -> None:
    registered = check_hook_imports_no_torch("decodekit_shakespeare.plugin", "register_models")
    assert ("tiny-shakespeare", "decodekit_shakespeare.model:load_tiny_shakespeare") in registered


@pytest.mark.parametrize("name", ["tiny-shakespeare", "tiny-shakespeare-draft"])
def test_loading_leaves_torchs_global_generator_as_it_was_and_the_weights_as_the_constructor_gives(name: str) -> None:
    """Building the model ran its random init (then overwritten by the weights), so a user's draws after
    `dk.load_model` differed from the same seed's without it. The model now equals, logit for logit, one built by its
    constructor with the weights loaded over it (the tied head included)."""
    from decodekit_shakespeare.model import DRAFT_CONFIG_NAME, DRAFT_WEIGHTS_NAME, ShakespeareLSTM, load_config

    import decodekit as dk

    torch.manual_seed(0)
    expected = torch.rand(4)
    torch.manual_seed(0)
    model = dk.load_model(name)
    assert torch.equal(torch.rand(4), expected)

    draft = name.endswith("draft")
    config, _ = load_config(None, DRAFT_CONFIG_NAME if draft else "config.json")
    built = ShakespeareLSTM(config) if draft else ShakespeareGPT(config)  # type: ignore[arg-type]
    state = load_file(str(WEIGHTS.parent / (DRAFT_WEIGHTS_NAME if draft else WEIGHTS_NAME)))
    built.load_state_dict(state, strict=not isinstance(built, ShakespeareGPT))
    ids = torch.tensor([[5, 9, 1, 40, 2, 7]])
    with torch.no_grad():
        assert torch.equal(model(ids, torch.arange(6)[None], None), built.eval()(ids, torch.arange(6)[None], None))
    if not draft:
        assert model.lm_head.weight is model.wte.weight
