"""`decodekit generate --model hf:/path` stops at the model's end-of-sequence token, as transformers' `generate()`
does by default, on every path (one prompt, -n, the strategies, --input, explain); `--ignore-eos` goes on."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from cli_runner import cli_captured as cli
from decodekit_cli.batch_settings import FORMAT

EOS = 95  # the fixtures' <eos>: the character tokenizer's and the config's
MAX_NEW = 12
# Greedy with the checkpoint below: "Hi" ends with EOS as its 8th token, "ab" as its 6th; "Hello" runs to the length.
PROMPTS = ["Hi", "ab", "Hello"]


@pytest.fixture(scope="module")
def eos_model(gpt2: Any) -> Any:
    """The GPT-2 fixture with EOS's (tied) embedding 1.1 times token 14's: greedy picks EOS where it would pick 14."""
    model = copy.deepcopy(gpt2)
    assert model.config.eos_token_id == EOS
    with torch.no_grad():
        model.transformer.wte.weight[EOS] = 1.1 * model.transformer.wte.weight[14]
    return model


@pytest.fixture
def checkpoint(tmp_path: Path, eos_model: Any, char_tokenizer: Any) -> Path:
    eos_model.save_pretrained(tmp_path / "ckpt")
    char_tokenizer.save_pretrained(tmp_path / "ckpt")
    return tmp_path / "ckpt"


def reference(model: Any, prompt: str, **options: Any) -> list[int]:
    """transformers' own greedy `generate()`, with the checkpoint's generation config (EOS stops it by default)."""
    ids = torch.tensor([[ord(c) - 32 for c in prompt]])
    out = model.generate(ids, do_sample=False, max_new_tokens=MAX_NEW, pad_token_id=EOS, **options)
    return [int(t) for t in out[0, ids.shape[1] :]]


def generate_json(capsys: pytest.CaptureFixture[str], checkpoint: Path, prompt: str, *extra: str) -> dict[str, Any]:
    cmd = ["generate", prompt, "--model", f"hf:{checkpoint}", "--chain", "greedy", "--max-new-tokens", str(MAX_NEW)]
    status, out, err = cli(capsys, *cmd, "--json", *extra)
    assert status == 0, err
    report: dict[str, Any] = json.loads(out)
    return report


def test_the_prompts_end_where_the_module_says(eos_model: Any) -> None:
    """The premise of this file: transformers ends "Hi" and "ab" early at EOS, "Hello" at the length."""
    assert [len(reference(eos_model, p)) for p in PROMPTS] == [8, 6, MAX_NEW]
    assert [reference(eos_model, p)[-1] == EOS for p in PROMPTS] == [True, True, False]


@pytest.mark.parametrize("prompt", PROMPTS)
def test_generate_stops_at_eos_as_transformers_does(
    prompt: str, checkpoint: Path, eos_model: Any, char_tokenizer: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    expected = reference(eos_model, prompt)
    sample = generate_json(capsys, checkpoint, prompt)["samples"][0]
    assert sample["tokens"] == expected
    ended_at_eos = expected[-1] == EOS
    assert (sample["finish_reason"], sample["stopped_by"]) == (("stop", EOS) if ended_at_eos else ("length", None))
    # The text is what decode(skip_special_tokens=True) gives: no "<eos>".
    assert sample["text"] == char_tokenizer.decode(expected, skip_special_tokens=True)


def test_the_printed_text_holds_no_eos(
    checkpoint: Path, eos_model: Any, char_tokenizer: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, _ = cli(capsys, "generate", "Hi", "--model", f"hf:{checkpoint}", "--chain", "greedy")
    assert status == 0
    assert out == "Hi" + char_tokenizer.decode(reference(eos_model, "Hi"), skip_special_tokens=True) + "\n"


def test_ignore_eos_generates_max_new_tokens(
    checkpoint: Path, eos_model: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    sample = generate_json(capsys, checkpoint, "Hi", "--ignore-eos")["samples"][0]
    assert sample["tokens"] == reference(eos_model, "Hi", eos_token_id=None)
    assert len(sample["tokens"]) == MAX_NEW and EOS in sample["tokens"]
    assert (sample["finish_reason"], sample["stopped_by"]) == ("length", None)
    assert "<eos>" in sample["text"]  # an ordinary token now, shown as the tokenizer decodes it (docs/cli.md)


def test_a_stop_string_that_spells_a_special_token_ends_the_sample(
    checkpoint: Path, eos_model: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """Why `decode` keeps special tokens (transformers' default): a stop string is found in the text, so
    `--stop '<eos>'` (as `<|im_end|>` on a model whose EOS it is not) must see the token's text."""
    sample = generate_json(capsys, checkpoint, "Hi", "--ignore-eos", "--stop", "<eos>")["samples"][0]
    tokens = reference(eos_model, "Hi", eos_token_id=None)
    assert sample["tokens"] == tokens[: tokens.index(EOS) + 1]
    assert (sample["finish_reason"], sample["stopped_by"]) == ("stop", "<eos>")


@pytest.mark.parametrize("extra", [(), ("--ignore-eos",)])
def test_the_json_header_records_ignore_eos(
    extra: tuple[str, ...], checkpoint: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`generate --json` and `explain --json` say whether the samples went on past EOS, beside the other settings."""
    assert generate_json(capsys, checkpoint, "Hi", *extra)["ignore_eos"] is bool(extra)
    cmd = ["explain", "ab", "--model", f"hf:{checkpoint}", "--chain", "greedy", "--steps", "2", "--json", *extra]
    status, out, err = cli(capsys, *cmd)
    assert status == 0, err
    assert json.loads(out)["ignore_eos"] is bool(extra)


@pytest.mark.parametrize("strategy", ["sample", "speculative(draft=ngram, k=3)", "beam(num_beams=2)"])
def test_every_strategy_and_every_sample_stops_at_eos(
    strategy: str, checkpoint: Path, eos_model: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    report = generate_json(capsys, checkpoint, "Hi", "--strategy", strategy, "-n", "2")
    for sample in report["samples"]:
        if strategy != "beam(num_beams=2)":  # greedy's tokens; a beam may find another sequence
            assert sample["tokens"] == reference(eos_model, "Hi")
        assert sample["tokens"][-1] == EOS and EOS not in sample["tokens"][:-1]
        assert (sample["finish_reason"], sample["stopped_by"]) == ("stop", EOS)


def test_a_draft_with_parameters_needs_no_quotes(checkpoint: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--strategy 'speculative(draft=hf(dtype=float32):DIR)'`: the draft's call is one value, quoted or not."""
    draft = f"hf(dtype=float32, device=cpu):{checkpoint}"
    reports = [
        generate_json(capsys, checkpoint, "Hi", "--strategy", f"speculative(draft={text}, k=3)")
        for text in (draft, repr(draft))
    ]
    unquoted, quoted = ([(s["tokens"], s["text"]) for s in r["samples"]] for r in reports)
    assert unquoted == quoted and len(unquoted[0][0]) > 0


def test_explain_stops_at_eos(checkpoint: Path, eos_model: Any, capsys: pytest.CaptureFixture[str]) -> None:
    cmd = ["explain", "ab", "--model", f"hf:{checkpoint}", "--chain", "greedy", "--steps", str(MAX_NEW), "--json"]
    status, out, err = cli(capsys, *cmd)
    assert status == 0, err
    steps = json.loads(out)["steps"]
    assert [s["token"] for s in steps] == reference(eos_model, "ab")
    status, out, err = cli(capsys, *cmd, "--ignore-eos")
    assert status == 0, err
    assert len(json.loads(out)["steps"]) == MAX_NEW


def run_batch(capsys: pytest.CaptureFixture[str], checkpoint: Path, tmp_path: Path, *extra: str) -> list[Any]:
    source, output = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    source.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in PROMPTS))
    cmd = ["generate", "--model", f"hf:{checkpoint}", "--chain", "greedy", "--max-new-tokens", str(MAX_NEW)]
    status, _, err = cli(capsys, *cmd, "--input", str(source), "--output", str(output), "--batch-size", "3", *extra)
    assert status == 0, err
    return sorted((json.loads(line) for line in output.read_text().splitlines()), key=lambda r: r["line"])


def test_batch_job_stops_at_eos_as_transformers_does(
    checkpoint: Path, eos_model: Any, char_tokenizer: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    records = run_batch(capsys, checkpoint, tmp_path)
    for record, prompt in zip(records, PROMPTS):
        expected = reference(eos_model, prompt)
        assert record["tokens"] == expected
        assert record["text"] == char_tokenizer.decode(expected, skip_special_tokens=True)
        assert record["finish_reason"] == ("stop" if expected[-1] == EOS else "length")
        assert record["stopped_by"] == (EOS if expected[-1] == EOS else None)
    settings = json.loads((tmp_path / "out.jsonl.settings.json").read_text())
    assert settings["ignore_eos"] is False


def test_batch_job_ignore_eos_and_resume_with_another_value_is_refused(
    checkpoint: Path, eos_model: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    records = run_batch(capsys, checkpoint, tmp_path, "--ignore-eos")
    assert [r["tokens"] for r in records] == [reference(eos_model, p, eos_token_id=None) for p in PROMPTS]
    source, output = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    cmd = ["generate", "--model", f"hf:{checkpoint}", "--chain", "greedy", "--max-new-tokens", str(MAX_NEW)]
    status, _, err = cli(capsys, *cmd, "--input", str(source), "--output", str(output), "--resume")
    assert status != 0
    assert "ignore_eos=True (this run: False)" in err and "to continue it as it was written, pass --ignore-eos" in err


def as_format_1(output: Path) -> None:
    """Make `output` what a decodekit before settings format 2 left: its settings without `ignore_eos` (it went
    on past EOS), and only its first record, as if killed there."""
    settings = output.with_name(output.name + ".settings.json")
    recorded = json.loads(settings.read_text())
    assert recorded.pop("ignore_eos") is True and recorded["format"] == FORMAT
    settings.write_text(json.dumps({**recorded, "format": 1}))
    output.write_text(output.read_text().splitlines(keepends=True)[0])


def test_resume_continues_a_format_1_output_with_ignore_eos_and_refuses_without(
    checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Format 1 went on past EOS: `--resume --ignore-eos` gives the records an uninterrupted run gives; without it
    this model (whose EOS would end "Hi" and "ab" early) is refused, the error saying what to pass."""
    expected = run_batch(capsys, checkpoint, tmp_path, "--ignore-eos", "--seed", "7")  # a record holds its seed
    output = tmp_path / "out.jsonl"
    as_format_1(output)
    written = output.read_text()
    source = tmp_path / "in.jsonl"
    cmd = [
        "generate",
        "--model",
        f"hf:{checkpoint}",
        "--chain",
        "greedy",
        "--max-new-tokens",
        str(MAX_NEW),
        "--seed",
        "7",
    ]
    status, _, err = cli(capsys, *cmd, "--input", str(source), "--output", str(output), "--resume")
    assert status == 2 and "Traceback" not in err
    assert "settings format 1" in err and "pass --ignore-eos" in err, err
    assert output.read_text() == written  # nothing added
    status, _, err = cli(capsys, *cmd, "--input", str(source), "--output", str(output), "--resume", "--ignore-eos")
    assert status == 0, err
    assert [json.loads(line) for line in output.read_text().splitlines()] == expected


@pytest.mark.parametrize("ignore_eos", [False, True])
def test_a_ray_actor_decodes_with_the_same_stop_tokens(
    ignore_eos: bool, checkpoint: Path, eos_model: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--ray`: an actor's `LineDecoder`, called here as a plain object (no cluster), stops where the local job does."""
    decoder = pytest.importorskip("decodekit_ray.decoder", reason="decodekit-ray is not installed")
    import numpy as np
    from decodekit_cli.batch_settings import BatchSettings

    monkeypatch.setattr(decoder.ray, "get_gpu_ids", lambda: [])  # no Ray worker here: no GPU given
    settings = BatchSettings(
        model=f"hf:{checkpoint}", chain="greedy", max_new_tokens=MAX_NEW, seed=0, cache="dense", ignore_eos=ignore_eos
    )
    data = [json.dumps({"prompt": p}).encode() for p in PROMPTS]
    out = decoder.LineDecoder(settings)({"line": np.arange(1, 4), "data": np.array(data, dtype=object)})
    records = sorted((json.loads(r) for r in out["record"]), key=lambda r: r["line"])
    options = {"eos_token_id": None} if ignore_eos else {}
    assert [r["tokens"] for r in records] == [reference(eos_model, p, **options) for p in PROMPTS]


@pytest.mark.parametrize(("extra", "stopped_by"), [((), EOS), (("--ignore-eos",), "regex")])
def test_a_grammar_ends_at_the_eos_it_allows(
    extra: tuple[str, ...], stopped_by: object, checkpoint: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--regex`: the grammar lets EOS end a complete text; the model's stop token ends it, or with --ignore-eos the
    grammar's own end (docs/grammar.md, "The end"): the same tokens, EOS last and not in the text, either way."""
    sample = generate_json(capsys, checkpoint, "Hi", "--regex", "x[0-9]*", *extra)["samples"][0]
    assert sample["tokens"] == [88, 21, 21, 21, 21, EOS] and sample["text"] == "x5555"
    assert (sample["finish_reason"], sample["stopped_by"]) == ("stop", stopped_by)
