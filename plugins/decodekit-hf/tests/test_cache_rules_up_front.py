"""A model's own rules about caches (`HFModel.validate_cache`: a sliding-window model's text past its window
through an evicting cache) run when the cache opens, before any forward, on each row's own text: `dk.validate`
and a batch job's up-front check refuse such a line before any model work, and a ragged batch whose slots pass
the window while no row's text does is served."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from cli_runner import batch_captured
from decodekit_hf import HFModel
from decodekit_speculative.strategy import SpeculativeGeneration

import decodekit as dk
from tinymodels import greedy_recomputed

WINDOW = 40
SHORT, LONG = [5, 17, 33, 2, 60, 8, 41, 12, 70, 3], [(7 * i + 3) % 90 for i in range(25)]


@pytest.fixture(scope="module")
def mistral(build_arch: Any) -> Any:
    return build_arch("mistral", num_key_value_heads=2, sliding_window=WINDOW)


def test_validate_refuses_a_text_past_the_window_before_any_forward(mistral: Any) -> None:
    """`dk.validate` passed what `dk.generate` then refused at its first forward."""
    model = HFModel(mistral)
    dk.validate(model, [SHORT], chain="greedy", max_new_tokens=WINDOW - 10, cache="window(size=48)")
    with pytest.raises(dk.ParameterError, match=rf"sliding_window={WINDOW}\) mask a text of {WINDOW + 1} tokens"):
        dk.validate(model, [SHORT], chain="greedy", max_new_tokens=WINDOW - 9, cache="window(size=48)")


@pytest.mark.parametrize("cache", ["h2o(budget=64)", "window(size=64, sinks=0)"])
def test_a_ragged_batch_whose_rows_fit_the_window_is_served(mistral: Any, cache: str) -> None:
    """Rows of 10 + 30 and 25 + 15 tokens, each within the window of 40, fill 25 + 30 = 55 slots: refused before
    ("mask a text of 55 tokens"), though each row is its prompt alone."""
    out = dk.generate(HFModel(mistral), [SHORT, LONG], chain="greedy", max_new_tokens=[30, 15], cache=cache)
    assert out.tokens == [greedy_recomputed(mistral, SHORT, 30), greedy_recomputed(mistral, LONG, 15)]
    with pytest.raises(dk.ParameterError, match=r"prompt \+ max_new_tokens"):  # one row past it: refused
        dk.generate(HFModel(mistral), [SHORT, LONG], chain="greedy", max_new_tokens=[31, 15], cache=cache)


@pytest.fixture
def checkpoint(tmp_path: Path, mistral: Any, char_tokenizer: Any) -> Path:
    mistral.save_pretrained(tmp_path / "ckpt")
    char_tokenizer.save_pretrained(tmp_path / "ckpt")
    return tmp_path / "ckpt"


def _job(capsys: pytest.CaptureFixture[str], checkpoint: Path, tmp_path: Path, *extra: str) -> tuple[int, str, Path]:
    """A batch job of three lines; the second's text (10 + 31 tokens) passes the window."""
    lines: list[dict[str, object]] = [
        {"prompt": "a" * 10},
        {"prompt": "b" * 10, "max_new_tokens": 31},
        {"prompt": "c" * 5},
    ]
    cmd = ["--model", f"hf:{checkpoint}", "--chain", "greedy", "--max-new-tokens", "30", "--ignore-eos"]
    return batch_captured(capsys, tmp_path, lines, *cmd, "--cache", "window(size=48)", *extra)


def test_a_batch_job_refuses_the_line_before_any_model_work(
    checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Under the default `--on-error fail`, line 1's record was written, then the job stopped at line 2's forward."""
    status, err, output = _job(capsys, checkpoint, tmp_path)
    assert status != 0
    assert "line 2" in err and f"sliding_window={WINDOW}) mask a text of 41 tokens" in err, err
    assert "Traceback" not in err
    assert not output.exists() or not [line for line in output.read_text().splitlines() if '"id"' in line]


def test_a_batch_job_skips_the_line_with_an_error_record(
    checkpoint: Path, tmp_path: Path, mistral: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    status, err, output = _job(capsys, checkpoint, tmp_path, "--on-error", "skip")
    assert status == 0, err
    records = [json.loads(line) for line in output.read_text().splitlines()]
    records = [r for r in records if "id" in r]
    assert [("error" in r) for r in records] == [False, True, False]
    assert f"sliding_window={WINDOW}) mask a text of 41 tokens" in records[1]["error"]["message"]
    for record, prompt in ((records[0], "a" * 10), (records[2], "c" * 5)):
        assert record["tokens"] == greedy_recomputed(mistral, [ord(c) - 32 for c in prompt], 30)


def test_a_draft_whose_rules_refuse_the_targets_cache_keeps_every_token(llama: Any) -> None:
    """A draft on eager attention cannot decode through an evicting cache: speculation failed at the draft's first
    forward, though what a draft keeps never changes the output. Its `validate_cache` now gives it a keep-all cache."""
    import copy

    twin = copy.deepcopy(llama)
    with torch.no_grad():
        for p in twin.parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(1)) * 0.03)
    twin.set_attn_implementation("eager")
    model, draft, cache = HFModel(llama), HFModel(twin), "window(size=8, sinks=2, slack=8)"
    with pytest.raises(dk.ParameterError, match="attn_implementation='eager'"):
        dk.generate(draft, [SHORT], chain="greedy", max_new_tokens=4, cache=cache)
    want = dk.generate(model, [SHORT], chain="greedy", max_new_tokens=20, cache=cache).tokens
    out = dk.decode(
        model, [SHORT], strategy="speculative", draft=draft, k=3, chain="greedy", max_new_tokens=20, cache=cache
    )
    assert isinstance(out, SpeculativeGeneration) and out.tokens == want and sum(out.accepted) > 0
