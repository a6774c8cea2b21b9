"""decodekit's greedy decoding of the shipped model gives transformers' own greedy tokens; a ragged
batch gives each row what it gives alone."""

from __future__ import annotations

from typing import Any

import torch
from decodekit_hf import HFModel

import decodekit as dk

NEW = 40


def test_greedy_equals_transformers_generate(dk_model: HFModel, hf_tokenizer: Any) -> None:
    out = dk.generate(dk_model, "ROMEO:", chain="greedy", max_new_tokens=NEW)
    ids = torch.tensor([hf_tokenizer.encode("ROMEO:")])
    ref = dk_model.hf.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=NEW)
    expected = ref[0, ids.shape[1] :].tolist()
    assert out.tokens == [expected] and len(expected) == NEW
    assert out.text == [hf_tokenizer.decode(expected)]


def test_ragged_batch_rows_equal_their_single_runs(dk_model: HFModel) -> None:
    prompts = ["ROMEO:", "HAMLET:\nTo be, or not to be"]
    batch = dk.generate(dk_model, prompts, chain="greedy", max_new_tokens=NEW)
    alone = [dk.generate(dk_model, [p], chain="greedy", max_new_tokens=NEW).tokens[0] for p in prompts]
    assert batch.tokens == alone
    assert batch.tokens[0] != batch.tokens[1]
