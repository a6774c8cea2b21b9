"""`--resume` compares the model, cache and strategy a batch job was written with as their plugins read them, not
as typed: `hf(dtype = float32):ckpt` is `hf(dtype=float32):ckpt`, `hf(dtype=auto):ckpt` is `hf:ckpt` (auto is the
default), `window(64)` is `window(size=64)`; each was refused before."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from decodekit_cli.batch_output import OutputLock, settings_path
from decodekit_cli.batch_settings import BatchSettings
from decodekit_cli.canonical import canonical_model, canonical_stage
from decodekit_cli.errors import CliError

pytest.importorskip("decodekit_hf")  # the one standard loader with parameters; only its registration is read


@pytest.mark.parametrize(
    ("typed", "canonical"),
    [
        ("hf(dtype=float32):{ckpt}", "hf(dtype='float32'):{ckpt}"),
        ("hf(dtype = float32):{ckpt}", "hf(dtype='float32'):{ckpt}"),
        ("hf( dtype='float32' ):{ckpt}", "hf(dtype='float32'):{ckpt}"),
        ("hf(dtype=auto):{ckpt}", "hf:{ckpt}"),
        ("hf(device=cpu, context=None):{ckpt}", "hf:{ckpt}"),
        ("hf(context=64, device=cuda:1):{ckpt}", "hf(device='cuda:1', context=64):{ckpt}"),
        ("hf:{ckpt}", "hf:{ckpt}"),
    ],
)
def test_a_model_is_recorded_in_one_spelling(tmp_path: Path, typed: str, canonical: str) -> None:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    assert canonical_model(typed.format(ckpt=ckpt)) == canonical.format(ckpt=ckpt)


def test_the_recorded_spelling_reads_back_as_the_same_model(tmp_path: Path) -> None:
    text = canonical_model(f"hf(device = cuda:1, dtype=float16):{tmp_path}")
    assert canonical_model(text) == text


def test_a_relative_checkpoint_is_recorded_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "ckpt").mkdir()
    monkeypatch.chdir(tmp_path)
    assert canonical_model("hf(dtype=auto):ckpt") == f"hf:{tmp_path.resolve() / 'ckpt'}"


def _settings(model: str, cache: str = "dense", strategy: str = "sample") -> dict[str, object]:
    settings = BatchSettings(model=model, chain="top_k(5)", max_new_tokens=4, seed=0, cache=cache, strategy=strategy)
    return settings.recorded("0" * 64)


def _resume(output: Path, recorded: dict[str, object], current: dict[str, object]) -> None:
    settings_path(output).write_text(json.dumps(recorded))
    output.write_text('{"id": "a", "line": 1}\n')
    with OutputLock.acquire(output) as lock:
        lock.check_resume(current)


@pytest.mark.parametrize(
    ("first", "then"),
    [
        ("hf(dtype=float32):{ckpt}", "hf(dtype = float32):{ckpt}"),
        ("hf(dtype=auto):{ckpt}", "hf:{ckpt}"),
        ("hf:{ckpt}", "hf(device=cpu):{ckpt}"),
    ],
)
def test_resume_continues_the_same_model_typed_another_way(tmp_path: Path, first: str, then: str) -> None:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    current = _settings(canonical_model(then.format(ckpt=ckpt)))
    # Recorded as this version records it, and as typed (an output written before the model was recorded canonical).
    for recorded_model in (canonical_model(first.format(ckpt=ckpt)), first.format(ckpt=ckpt)):
        _resume(tmp_path / "out.jsonl", _settings(recorded_model), current)


def test_resume_still_refuses_another_dtype(tmp_path: Path) -> None:
    for recorded_model in (f"hf(dtype=float32):{tmp_path}", canonical_model(f"hf(dtype=float32):{tmp_path}")):
        with pytest.raises(CliError, match=r"model=\"hf\(dtype='float32'\):.*\" \(this run: 'hf:.*'\)"):
            _resume(tmp_path / "out.jsonl", _settings(recorded_model), _settings(canonical_model(f"hf:{tmp_path}")))


@pytest.mark.parametrize(
    ("category", "first", "then", "recorded"),
    [
        ("cache backend", "window(size=64)", "window(64)", "window(size=64)"),
        ("cache backend", "window(size=auto, sinks=4)", "window", "window"),  # both defaults
        ("strategy", "beam(num_beams=2)", "beam(num_beams = 2)", "beam(num_beams=2)"),
        ("strategy", "beam(2)", "beam(num_beams=2)", "beam(num_beams=2)"),
    ],
)
def test_resume_continues_the_same_cache_or_strategy_typed_another_way(
    tmp_path: Path, category: str, first: str, then: str, recorded: str
) -> None:
    pytest.importorskip("decodekit_beam" if category == "strategy" else "decodekit_cache_window")
    key = "cache" if category == "cache backend" else "strategy"
    written, current = _settings("gpt2", **{key: first}), _settings("gpt2", **{key: then})
    assert written[key] == current[key] == recorded
    for as_recorded in (written, {**written, key: first}):  # as this version records it, and as typed before
        _resume(tmp_path / "out.jsonl", as_recorded, current)
    with pytest.raises(CliError, match=f"{key}="):
        _resume(
            tmp_path / "out.jsonl",
            _settings("gpt2", **{key: "window(size=32)" if key == "cache" else "beam(3)"}),
            current,
        )


def test_a_strategys_draft_model_is_recorded_as_the_model_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: `speculative(draft=hf:ckpt)` was recorded as typed, so a resume elsewhere loaded another `ckpt`, and
    `draft=hf(dtype=auto):ckpt` was refused as another draft than `draft=hf:ckpt`."""
    pytest.importorskip("decodekit_speculative")
    (tmp_path / "ckpt").mkdir()
    monkeypatch.chdir(tmp_path)
    absolute = canonical_model("hf:ckpt")
    assert absolute == f"hf:{tmp_path.resolve() / 'ckpt'}"
    typed = ["speculative(draft=hf:ckpt)", "speculative(draft=hf(dtype=auto):ckpt, k=4)"]  # k=4: the default
    typed.append(f"speculative(draft='{absolute}')")
    assert [canonical_stage("strategy", t) for t in typed] == [f"speculative(draft={absolute!r})"] * 3
    assert canonical_stage("strategy", "speculative(draft=hf(dtype = float16):ckpt, k=3)") == (
        f"speculative(draft={canonical_model('hf(dtype=float16):ckpt')!r}, k=3)"
    )
    assert canonical_stage("strategy", "speculative(draft=ngram, k=8)") == "speculative(k=8)"  # no model: as is
    assert canonical_stage("strategy", "speculative(draft=no-such-model)") == "speculative(draft='no-such-model')"
