"""The shipped folder: a stock `LlamaForCausalLM` (GQA, rope), safetensors only, loaded offline by
transformers and by decodekit (`tiny-shakespeare-llama` and `hf:<folder>`) to the same weights."""

from __future__ import annotations

import json
from typing import Any

import torch
from decodekit_hf import HFModel
from decodekit_shakespeare_llama import model_dir

import decodekit as dk

FILES = ["config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]


def test_folder_is_safetensors_and_json_under_10_mb() -> None:
    paths = sorted(model_dir().iterdir())
    assert [p.name for p in paths] == FILES  # no pickle (.bin, .pt, .pkl) anywhere
    assert sum(p.stat().st_size for p in paths) <= 10_000_000
    assert json.loads((model_dir() / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]


def test_config_is_a_grouped_query_rope_llama(hf_model: Any) -> None:
    c = hf_model.config
    assert not hf_model.training  # from_pretrained returns eval mode
    assert type(hf_model).__name__ == "LlamaForCausalLM" and c.model_type == "llama"
    assert (c.num_hidden_layers, c.hidden_size, c.intermediate_size, c.hidden_act) == (4, 192, 512, "silu")
    assert (c.num_attention_heads, c.num_key_value_heads, c.head_dim) == (8, 2, 24)
    assert c.rope_parameters == {"rope_type": "default", "rope_theta": 10000.0}
    assert (c.vocab_size, c.max_position_embeddings) == (84, 256)
    attn = hf_model.model.layers[0].self_attn
    assert (attn.q_proj.out_features, attn.k_proj.out_features, attn.v_proj.out_features) == (192, 48, 48)
    assert hf_model.lm_head.weight is hf_model.model.embed_tokens.weight  # tied
    assert not any("position" in name for name, _ in hf_model.named_parameters())  # rotary: no table
    assert sum(p.numel() for p in hf_model.parameters()) == 1_566_144
    assert all(p.dtype == torch.float32 for p in hf_model.parameters())


def test_decodekit_loads_it_by_name_and_by_hf_path(dk_model: HFModel, hf_model: Any, hf_tokenizer: Any) -> None:
    by_path = dk.load_model(f"hf:{model_dir()}")
    ids = torch.tensor([hf_tokenizer.encode("ROMEO:\nWhat light")])
    positions = torch.arange(ids.shape[1])[None]
    with torch.no_grad():
        expected = hf_model(input_ids=ids).logits
    for model in (dk_model, by_path):
        assert isinstance(model, HFModel) and not model.hf.training
        spec = model.spec
        assert (spec.n_layers, spec.n_heads, spec.n_kv_heads, spec.head_dim) == (4, 8, 2, 24)
        assert (spec.vocab_size, spec.max_positions) == (84, 256)
        assert model.stop_tokens == ()  # no end-of-text token: generation runs to max_new_tokens
        assert torch.equal(model(ids, positions), expected)
