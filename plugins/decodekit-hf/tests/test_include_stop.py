"""`include_stop_str_in_output` / `--include-stop` on a transformers checkpoint: the stop token that ended a sample is
in its text as vLLM renders it (vllm/v1/engine/detokenizer.py `BaseIncrementalDetokenizer.update`: detokenized with
skip_special_tokens=True), so an ordinary token's text is kept and a special one's (EOS, `<|im_end|>`) is not,
though `HFTokenizer.decode` keeps special tokens elsewhere in the text."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from cli_runner import cli_captured as cli
from decodekit_hf.tokenizer import HFTokenizer

EOS = 95  # the fixtures' <eos>: the character tokenizer's and the config's
MAX_NEW = 12


def greedy(model: Any, prompt: str) -> list[int]:
    """transformers' greedy tokens for `prompt`, MAX_NEW of them (no EOS stop)."""
    ids = torch.tensor([[ord(c) - 32 for c in prompt]])
    out = model.generate(ids, do_sample=False, max_new_tokens=MAX_NEW, eos_token_id=None, pad_token_id=EOS)
    return [int(t) for t in out[0, ids.shape[1] :]]


def first_new(tokens: list[int]) -> int:
    """The first position past the first two whose token did not occur before it."""
    return next(i for i in range(2, len(tokens)) if tokens[i] not in tokens[:i])


@pytest.fixture
def checkpoint(tmp_path: Path, gpt2: Any, char_tokenizer: Any) -> tuple[Path, list[int], int]:
    """GPT-2 whose generation config ends a sample at <eos> or at an ordinary character (as a checkpoint that
    ends on a newline): the one greedy first picks at `at` from "Hi". Returns (directory, greedy tokens, at)."""
    model = copy.deepcopy(gpt2)  # the fixture is shared
    tokens = greedy(model, "Hi")
    at = first_new(tokens)
    model.generation_config.eos_token_id = [EOS, tokens[at]]
    model.save_pretrained(tmp_path / "ckpt")
    char_tokenizer.save_pretrained(tmp_path / "ckpt")
    return tmp_path / "ckpt", tokens, at


def test_the_special_token_ids_are_those_decode_skips_special_tokens_drops() -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"a": 0, "b": 1, "<|im_end|>": 2, "<eos>": 3}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<eos>"))
    tk.pre_tokenizer, tk.decoder = pre_tokenizers.Split("", "isolated"), decoders.Fuse()
    hf = PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<eos>", additional_special_tokens=["<|im_end|>"])  # type: ignore[no-untyped-call]
    tokenizer = HFTokenizer(hf)
    assert tokenizer.special_token_ids == (2, 3) and tokenizer.eos_token_ids == (3,)
    assert (
        tokenizer.decode([0, 2, 1, 3]) == "a<|im_end|>b<eos>"
        and hf.decode([0, 2, 1, 3], skip_special_tokens=True) == "ab"
    )


def test_generate_keeps_an_ordinary_stop_tokens_text(
    checkpoint: tuple[Path, list[int], int], char_tokenizer: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    path, tokens, at = checkpoint
    cmd = ["generate", "Hi", "--model", f"hf:{path}", "--chain", "greedy", "--max-new-tokens", str(MAX_NEW)]
    for extra, shown in (("--include-stop",), tokens[: at + 1]), ((), tokens[:at]):
        status, out, err = cli(capsys, *cmd, "--json", *extra)
        assert status == 0, err
        sample = json.loads(out)["samples"][0]
        assert sample["tokens"] == tokens[: at + 1] and sample["text"] == char_tokenizer.decode(shown)
        assert (sample["finish_reason"], sample["stopped_by"]) == ("stop", tokens[at])
        status, out, err = cli(capsys, *cmd, *extra)
        assert status == 0 and out == "Hi" + char_tokenizer.decode(shown) + "\n", err


def test_a_batch_jobs_records_keep_it_too(
    checkpoint: tuple[Path, list[int], int], char_tokenizer: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, tokens, at = checkpoint
    prompts, output = tmp_path / "p.jsonl", tmp_path / "o.jsonl"
    prompts.write_text(json.dumps({"prompt": "Hi"}) + "\n")
    cmd = ["generate", "--input", str(prompts), "--output", str(output), "--model", f"hf:{path}"]
    status, _, err = cli(capsys, *cmd, "--chain", "greedy", "--max-new-tokens", str(MAX_NEW), "--include-stop")
    assert status == 0, err
    record = json.loads(output.read_text())
    assert record["text"] == char_tokenizer.decode(tokens[: at + 1]) and record["stopped_by"] == tokens[at]


def test_the_eos_that_ends_a_sample_has_no_text_even_kept(
    tmp_path: Path, gpt2: Any, char_tokenizer: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """vLLM skips special tokens: a sample that ends at <eos> shows no "<eos>" under --include-stop either."""
    model = copy.deepcopy(gpt2)
    with torch.no_grad():  # EOS's (tied) embedding 1.1 times token 14's: greedy picks EOS where it would pick 14
        model.transformer.wte.weight[EOS] = 1.1 * model.transformer.wte.weight[14]
    tokens = greedy(model, "Hi")
    assert EOS in tokens
    model.save_pretrained(tmp_path / "ckpt")
    char_tokenizer.save_pretrained(tmp_path / "ckpt")
    cmd = ["generate", "Hi", "--model", f"hf:{tmp_path / 'ckpt'}", "--chain", "greedy", "--max-new-tokens", "12"]
    status, out, err = cli(capsys, *cmd, "--include-stop", "--json")
    assert status == 0, err
    sample = json.loads(out)["samples"][0]
    assert sample["tokens"] == tokens[: tokens.index(EOS) + 1] and sample["stopped_by"] == EOS
    assert sample["text"] == char_tokenizer.decode(sample["tokens"], skip_special_tokens=True)
