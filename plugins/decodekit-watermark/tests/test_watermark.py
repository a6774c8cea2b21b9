"""The watermark against transformers' `WatermarkLogitsProcessor` (the same logits, bit for bit, for both seeding
schemes and several context widths), in the decode loop (ragged batches, speculative decoding, compile), and the
detector against transformers' `WatermarkDetector` and by its detection rates."""

from __future__ import annotations

import math
import re
import warnings
from typing import Any

import pytest
import torch
from decodekit_watermark import detect
from decodekit_watermark.params import WatermarkParams
from decodekit_watermark.stage import Watermark

import decodekit as dk

transformers = pytest.importorskip("transformers")
from transformers.generation.logits_process import WatermarkLogitsProcessor  # noqa: E402
from transformers.generation.watermarking import WatermarkDetector  # noqa: E402

SETTINGS = [
    {},
    {"bias": 1.5, "greenlist_ratio": 0.4, "hashing_key": 12345},
    {"context_width": 3},
    {"seeding_scheme": "selfhash"},
    {"seeding_scheme": "selfhash", "context_width": 2, "bias": 4.0, "greenlist_ratio": 0.1},
    {"seeding_scheme": "selfhash", "hashing_key": -3},  # transformers takes a negative key (it was refused here)
    {"hashing_key": -(2**63)},
]


def theirs(vocab: int, settings: dict[str, object]) -> WatermarkLogitsProcessor:
    return WatermarkLogitsProcessor(vocab, "cpu", **settings)  # type: ignore[arg-type]


@pytest.mark.parametrize("settings", SETTINGS, ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_logits_equal_transformers(settings: dict[str, object], dtype: torch.dtype) -> None:
    """Row by row: under selfhash a row where none of the 40 candidates is green makes transformers index with an
    empty float tensor (IndexError); nothing is added to it here."""
    g = torch.Generator().manual_seed(0)
    stage, unmarked = dk.create("watermark", **settings), 0
    for vocab, width in ((300, 7), (50, 3), (1000, 12)):
        tokens = torch.randint(0, vocab, (4, width), generator=g)
        logits = (torch.randn(4, vocab, generator=g) * 3).to(dtype)
        got = stage(logits, dk.DecodeContext(tokens=tokens))
        assert not torch.equal(got, logits)
        for b in range(4):
            try:
                want = theirs(vocab, settings)(tokens[b : b + 1], logits[b : b + 1])
            except IndexError:
                want, unmarked = logits[b : b + 1], unmarked + 1
            assert torch.equal(got[b : b + 1], want)
    assert unmarked == (1 if settings.get("greenlist_ratio") == 0.1 else 0)  # measured: the case arises once


def test_a_row_shorter_than_the_context_is_left_as_it_is() -> None:
    """A ragged batch: each row's list comes from its own tokens (as the row alone), and a row with fewer than
    `context_width` real tokens keeps its logits (transformers skips a whole batch narrower than that)."""
    stage = dk.create("watermark", context_width=3)
    tokens = torch.tensor([[0, 0, 7, 8], [1, 2, 3, 4]])
    logits = torch.randn(2, 40, generator=torch.Generator().manual_seed(1))
    ctx = dk.DecodeContext(tokens=tokens, prompt_lengths=torch.tensor([2, 4]))
    out = stage(logits, ctx)
    assert torch.equal(out[0], logits[0])
    alone = stage(logits[1:], dk.DecodeContext(tokens=tokens[1:]))
    assert torch.equal(out[1:], alone)


def tiny_llama() -> object:
    config = transformers.LlamaConfig(
        vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=256, pad_token_id=0,
    )  # fmt: skip
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).eval()


@pytest.mark.parametrize("settings", [{"bias": 3.0}, {"bias": 3.0, "seeding_scheme": "selfhash", "context_width": 2}])
def test_greedy_generate_with_a_watermark_equals_transformers(settings: dict[str, object]) -> None:
    from decodekit_hf import HFModel

    hf, prompt = tiny_llama(), [5, 17, 3, 9, 44]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = transformers.WatermarkingConfig(**settings)
        out = hf.generate(  # type: ignore[attr-defined]
            torch.tensor([prompt]), attention_mask=torch.ones(1, 5, dtype=torch.long), max_new_tokens=30,
            do_sample=False, watermarking_config=config, eos_token_id=None,
        )  # fmt: skip
    chain = f"watermark({', '.join(f'{k}={v!r}' for k, v in settings.items())}) | greedy"
    ours = dk.generate(HFModel(hf), [prompt], chain=chain, max_new_tokens=30, stop_tokens=[])
    assert ours.tokens[0] == out[0, 5:].tolist()
    plain = dk.generate(HFModel(hf), [prompt], chain="greedy", max_new_tokens=30, stop_tokens=[])
    assert plain.tokens != ours.tokens


def shakespeare(chain: str, seed: int, n: int = 150) -> list[int]:
    model = dk.load_model("tiny-shakespeare")
    return dk.generate(model, "ROMEO:", chain=chain, max_new_tokens=n, seed=seed).tokens[0]


@pytest.mark.parametrize("settings", SETTINGS[:4], ids=str)
def test_the_detector_equals_transformers(settings: dict[str, object]) -> None:
    params = WatermarkParams.model_validate(settings)
    text = shakespeare(f"temperature(0.9) | watermark({', '.join(f'{k}={v!r}' for k, v in settings.items())})", 1)
    vocab = dk.load_model("tiny-shakespeare").spec.vocab_size
    for ignore in (False, True):
        mine = detect(text, vocab_size=vocab, watermark=params, ignore_repeated_ngrams=ignore)
        config = transformers.PretrainedConfig(vocab_size=vocab, bos_token_id=-1)  # no BOS to strip
        marking = transformers.WatermarkingConfig(**settings)
        detector = WatermarkDetector(config, "cpu", marking, ignore_repeated_ngrams=ignore)
        them: Any = detector(torch.tensor([text]), return_dict=True)  # type: ignore[arg-type]  # a LongTensor
        assert (mine.scored, mine.green) == (int(them.num_tokens_scored[0]), int(them.num_green_tokens[0]))
        assert math.isclose(mine.z_score, float(them.z_score[0]), rel_tol=1e-12)
        assert math.isclose(mine.p_value, float(them.p_value[0]), rel_tol=1e-9, abs_tol=1e-300)
        assert mine.watermarked == bool(them.prediction[0])


def test_marked_texts_are_detected_and_others_are_not() -> None:
    """10 texts of 150 tokens each way (tiny-shakespeare, 84 tokens), seeds fixed: every marked one has z > 4
    (measured 5.1 to 8.1), no unmarked one exceeds 3, the detector's threshold (measured -1.6 to 2.6), nor does a
    marked one read with another key (-1.8 to 0.5)."""
    marked = [shakespeare("temperature(0.9) | watermark(2.0)", seed) for seed in range(10)]
    unmarked = [shakespeare("temperature(0.9)", seed) for seed in range(10)]
    vocab = dk.load_model("tiny-shakespeare").spec.vocab_size
    assert all(detect(t, vocab_size=vocab).z_score > 4 for t in marked)
    assert not any(detect(t, vocab_size=vocab).watermarked for t in unmarked)
    other_key = WatermarkParams(hashing_key=99991)
    assert not any(detect(t, vocab_size=vocab, watermark=other_key).watermarked for t in marked)


def test_speculative_decoding_keeps_the_watermark_exactly() -> None:
    model = dk.load_model("tiny-shakespeare")
    chain = "watermark(3.0, seeding_scheme='selfhash') | greedy"
    plain = dk.generate(model, ["ROMEO:", "JULIET:"], chain=chain, max_new_tokens=40)
    drafted = dk.decode(model, ["ROMEO:", "JULIET:"], strategy="speculative", draft="ngram", chain=chain,
                        max_new_tokens=40)  # fmt: skip
    assert drafted.tokens == plain.tokens


@pytest.mark.xdist_group("compile")
def test_a_compiled_decode_marks_as_an_eager_one() -> None:
    model = dk.load_model("tiny-shakespeare")
    chain = "temperature(0.9) | watermark(2.0)"
    eager = dk.generate(model, ["ROMEO:", "JULIET:"], chain=chain, max_new_tokens=24, seed=3)
    compiled = dk.generate(model, ["ROMEO:", "JULIET:"], chain=chain, max_new_tokens=24, seed=3, compile=True)
    assert compiled.tokens == eager.tokens


def test_numpy_token_ids_are_detected_as_a_list_of_them() -> None:
    """A row of a tokenizer's numpy array, or numpy integers in a list, are token ids (they were refused: 'tokens
    hold np.int64(7); allowed: ... integers')."""
    import numpy as np

    ids = shakespeare("watermark | sample", seed=3, n=60)
    expected = detect(ids, vocab_size=84)
    assert expected.watermarked
    assert detect(np.array(ids), vocab_size=84) == expected
    assert detect([np.int64(t) for t in ids], vocab_size=84) == expected
    assert detect(ids, vocab_size=84, device=torch.device("cpu")) == expected  # the device marked on: the CPU here


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_text_marked_on_a_gpu_is_detected_with_that_devices_lists() -> None:
    """A CUDA `randperm` differs from a CPU one: text marked on a GPU scores as unmarked with the CPU's lists."""
    stage = Watermark(WatermarkParams(bias=8.0))
    logits = torch.zeros(1, 84, device="cuda")
    ids = [1]
    for step in range(120):
        ctx = dk.DecodeContext(tokens=torch.tensor([ids], device="cuda"), step=step)
        ids.append(int(stage(logits.clone(), ctx).argmax()))
    assert detect(ids, vocab_size=84, watermark=stage, device="cuda").watermarked
    assert detect(ids, vocab_size=84, watermark=stage).z_score < 3.0


@pytest.mark.parametrize(
    ("call", "said"),
    [
        (lambda: detect([1, 2, 3], vocab_size=0), "detect: vocab_size=0 is invalid"),
        (lambda: detect([1, 2, 300], vocab_size=100), "detect: tokens hold 300; allowed: a sequence of token ids"),
        (lambda: detect([1, "2", 3], vocab_size=100), "detect: tokens hold '2'"),  # type: ignore[list-item]
        (
            lambda: detect(torch.tensor([[1, 2, 3]]), vocab_size=9),
            "detect: tokens hold [1, 2, 3]; allowed: a sequence of token ids, integers in [0, 9) (one text: a batch's "
            "row, tokens[0])",
        ),
        (lambda: detect([1], vocab_size=100), "detect: tokens of length 1 is invalid; allowed: more than context_w"),
        (lambda: detect(7, vocab_size=100), "detect: tokens=7 is invalid; allowed: a sequence of token ids"),  # type: ignore[arg-type]
        (lambda: detect([1, 2], vocab_size=9, watermark="watermark"), "detect: watermark='watermark' is invalid"),  # type: ignore[arg-type]
        (lambda: detect([1, 2], vocab_size=9, z_threshold=math.nan), "detect: z_threshold=nan is invalid"),
        (lambda: detect([1, 2], vocab_size=9, device="gpu"), "detect: device='gpu' is invalid (Expected one of cpu"),
        (lambda: detect([1, 2], vocab_size=9, device="meta"), "detect: device='meta' is invalid (META device type"),
    ],
)
def test_bad_detector_input_is_named(call: object, said: str) -> None:
    with pytest.raises(dk.ParameterError, match="^" + re.escape(said)):
        call()  # type: ignore[operator]
