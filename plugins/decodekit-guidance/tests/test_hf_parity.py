"""`cfg` against transformers' own classifier-free guidance (`generate(guidance_scale=...)` and
`UnbatchedClassifierFreeGuidanceLogitsProcessor`, transformers 5.25) on tiny random models built from their configs
(the recipe of plugins/decodekit-hf/tests/conftest.py): greedy tokens equal token for token, one step's guided scores
equal to the processor's."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from decodekit_guidance.scores import guided_scores
from decodekit_guidance.strategy import cfg

import decodekit as dk
from tinymodels import greedy_generation_config, left_padded

transformers = pytest.importorskip("transformers")
decodekit_hf = pytest.importorskip("decodekit_hf")

pytestmark = pytest.mark.xdist_group("guidance-hf")

VOCAB = 96
PROMPTS = [[5, 17, 3, 9, 44, 2, 8, 8, 9, 60], [7, 8], [83, 1, 33, 33, 12]]
NEGATIVES = [[40, 41, 42], [50, 51, 52, 53, 54, 55, 56], [60]]  # ragged: padded unlike the prompts
NEW = 24
_TINY: dict[str, Any] = dict(
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    hidden_size=32,
    intermediate_size=64,
    vocab_size=VOCAB,
    max_position_embeddings=128,
    bos_token_id=VOCAB - 1,
    eos_token_id=VOCAB - 1,
    initializer_range=0.2,  # logits with a spread of a few units: no near ties
)


@pytest.fixture(scope="module")
def llama() -> Any:
    """Rotary positions: a left-padded negative prompt decodes as it would alone, in transformers too."""
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(**_TINY)).eval()


@pytest.fixture(scope="module")
def gpt2() -> Any:
    """Learned positions: transformers' unconditional forward takes no position ids (see the ragged test)."""
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_layer=2, n_head=4, n_embd=32, vocab_size=VOCAB, n_positions=128, initializer_range=0.2
    )
    return transformers.GPT2LMHeadModel(config).eval()


def hf_guided(hf: Any, prompts: list[list[int]], scale: float, negatives: list[list[int]] | None = None) -> list[Any]:
    """transformers' greedy tokens with `guidance_scale=scale` (and `negative_prompt_ids`, left-padded)."""
    ids, mask = left_padded(prompts)
    kwargs: dict[str, Any] = {}
    if negatives is not None:
        kwargs["negative_prompt_ids"], kwargs["negative_prompt_attention_mask"] = left_padded(negatives)
    config = greedy_generation_config(max_new_tokens=NEW, guidance_scale=scale)
    tokens: list[Any] = hf.generate(ids, attention_mask=mask, generation_config=config, **kwargs)[
        :, ids.shape[1] :
    ].tolist()
    return tokens


@pytest.mark.parametrize("scale", [1.5, 3.0, 0.5, 0.0, -1.0])
@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_greedy_tokens_equal_transformers_without_a_negative_prompt(
    arch: str, scale: float, request: pytest.FixtureRequest
) -> None:
    hf = request.getfixturevalue(arch)
    model = decodekit_hf.HFModel(hf)
    out = cfg(model, PROMPTS, scale=scale, chain="greedy", max_new_tokens=NEW)
    assert out.tokens == hf_guided(hf, PROMPTS, scale)
    alone = cfg(model, PROMPTS[1:2], scale=scale, chain="greedy", max_new_tokens=NEW)
    assert alone.tokens == out.tokens[1:2]


@pytest.mark.parametrize("scale", [1.5, 3.0, 0.0])
def test_greedy_tokens_equal_transformers_with_ragged_negative_prompts(llama: Any, scale: float) -> None:
    out = dk.decode(
        decodekit_hf.HFModel(llama),
        PROMPTS,
        strategy="cfg",
        scale=scale,
        negative=NEGATIVES,
        chain="greedy",
        max_new_tokens=NEW,
    )
    assert out.tokens == hf_guided(llama, PROMPTS, scale, NEGATIVES)
    assert len({tuple(t) for t in out.tokens}) == len(PROMPTS)


def test_one_negative_prompt_for_all_equals_transformers_with_it_repeated(gpt2: Any) -> None:
    negative = [40, 41, 42, 43]
    out = cfg(decodekit_hf.HFModel(gpt2), PROMPTS, scale=2.0, negative=negative, chain="greedy", max_new_tokens=NEW)
    assert out.tokens == hf_guided(gpt2, PROMPTS, 2.0, [negative] * len(PROMPTS))


def test_a_padded_negative_prompt_decodes_as_alone_where_transformers_shifts_its_positions(gpt2: Any) -> None:
    """transformers runs the unconditional rows with no position ids, so with learned positions a left-padded
    negative prompt starts at its padding's width: its tokens depend on its batch. Ours (negative positions on the
    padding, as for the prompts) are transformers' for each prompt alone, and its batched ones for the row with
    the longest negative prompt (no padding)."""
    model = decodekit_hf.HFModel(gpt2)
    out = cfg(model, PROMPTS, scale=3.0, negative=NEGATIVES, chain="greedy", max_new_tokens=NEW)
    alone = [hf_guided(gpt2, [p], 3.0, [n])[0] for p, n in zip(PROMPTS, NEGATIVES)]
    assert out.tokens == alone
    batched = hf_guided(gpt2, PROMPTS, 3.0, NEGATIVES)
    assert batched[1] == out.tokens[1] and batched != out.tokens  # the padded rows differ in transformers


def test_guided_scores_equal_transformers_processor(llama: Any) -> None:
    """One step's guided scores, bit for bit on the same logits, and the scores the chain sees in a decode
    (the strategy's own forwards through the cache) to float rounding."""
    ids, negative = torch.tensor([PROMPTS[0]]), torch.tensor([NEGATIVES[1]])
    with torch.no_grad():
        cond = llama(ids).logits[:, -1].float()
        uncond = llama(negative).logits[:, -1].float()
        processor = transformers.UnbatchedClassifierFreeGuidanceLogitsProcessor(2.5, llama, negative)
        expected = processor(ids, cond.clone())
    assert torch.equal(guided_scores(cond, uncond, 2.5), expected)

    seen: list[torch.Tensor] = []

    def record(logits: torch.Tensor, ctx: dk.DecodeContext) -> torch.Tensor:
        seen.append(logits.clone())
        return logits

    cfg(
        decodekit_hf.HFModel(llama),
        PROMPTS[:1],
        scale=2.5,
        negative=NEGATIVES[1],
        chain=dk.Chain([record], dk.create("greedy")),
        max_new_tokens=1,
    )
    torch.testing.assert_close(seen[0], expected, rtol=1e-5, atol=1e-5)
    assert not torch.equal(expected, torch.log_softmax(cond, -1))  # guidance changed the scores


def test_guided_scores_keep_a_token_either_stream_removes() -> None:
    """Where transformers' formula gives NaN or +-inf (a log-probability of -inf), the token stays removed."""
    inf = float("-inf")
    cond = torch.tensor([[0.0, 1.0, inf, 2.0]])
    uncond = torch.tensor([[1.0, inf, 0.5, 0.0]])
    for scale in (2.0, 0.0, -1.0):
        got = guided_scores(cond, uncond, scale)
        assert got[0, 1] == inf and got[0, 2] == inf
        c, u = torch.log_softmax(cond, -1), torch.log_softmax(uncond, -1)
        kept = [0, 3]
        assert torch.equal(got[0, kept], (scale * (c - u) + u)[0, kept])
