"""`as_logits_processor`: a decodekit chain inside transformers' `generate()` agrees with `dk.generate`.

Greedy: the same tokens. Sampling: the same distribution of the first two tokens, by a
chi-square test of homogeneity over many rows drawn with fixed seeds; the same test tells
a different chain apart, so it has the power to fail.
"""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any

import pytest
import torch
from decodekit_hf import HFModel, as_logits_processor
from scipy.stats import chi2_contingency
from torch import Tensor

import decodekit as dk
from decodekit.params import NoParams
from decodekit.stage import ProcessorBase

PROMPTS = [[5, 17, 3, 9, 44, 2, 8, 8, 9, 60], [7, 8], [83, 1, 33, 33, 12]]


@pytest.mark.parametrize("batch", ["single", "ragged"])
def test_greedy_chain_in_generate_equals_dk_generate(hf_model: Any, gen_config: Any, left_pad: Any, batch: str) -> None:
    """`repetition_penalty(1.3) | greedy`; the ragged batch passes prompt_lengths so the pads are not penalised."""
    prompts = PROMPTS[:1] if batch == "single" else PROMPTS
    chain = dk.Chain.parse("repetition_penalty(1.3) | greedy")
    ids, mask = left_pad(prompts)
    processor = as_logits_processor(chain, prompt_lengths=mask.sum(-1) if batch == "ragged" else None)
    theirs = hf_model.generate(
        ids, attention_mask=mask, generation_config=gen_config(max_new_tokens=40), logits_processor=[processor]
    )[:, ids.shape[1] :].tolist()
    ours = dk.generate(HFModel(hf_model), prompts, chain=chain, max_new_tokens=40).tokens
    assert ours == theirs
    plain = dk.generate(HFModel(hf_model), prompts, chain="greedy", max_new_tokens=40).tokens
    assert plain != ours  # the penalty changed the output: the processor really ran


class _Recorder(ProcessorBase[NoParams]):
    """A stateful stage that records what it saw: (step, width of tokens, calls so far in this generation)."""

    name = "recorder"
    last: list[tuple[int, int, int]]

    def init_state(self, ctx: dk.DecodeContext) -> list[tuple[int, int, int]]:
        return []

    def __call__(self, logits: Tensor, ctx: dk.DecodeContext) -> Tensor:
        seen: list[tuple[int, int, int]] = ctx.state_for(self)
        seen.append((ctx.step, ctx.tokens.shape[1], len(seen)))
        self.last = seen
        return logits


def test_step_and_state_follow_one_generation_and_restart_with_the_next(gpt2: Any, gen_config: Any) -> None:
    recorder = _Recorder()
    processor = as_logits_processor(dk.Chain([recorder], selector=dk.create("greedy")))
    ids = torch.tensor([[3, 4, 5, 6]])
    for width in (4, 2):  # a second generate() with the same processor starts over
        gpt2.generate(ids[:, :width], generation_config=gen_config(max_new_tokens=5), logits_processor=[processor])
        assert recorder.last == [(step, width + step, step) for step in range(5)]


def test_a_next_generate_one_token_wider_than_the_last_still_starts_over(gpt2: Any, gen_config: Any) -> None:
    """A processor told a new generate() from the next step by the width alone: prompts of 9 tokens after a
    generation that ended at 8 took up its state and step (5: the last 5 prompt tokens counted as generated, so a
    frequency penalty, min_new_tokens or a length decay read them wrong), an eval loop's chance coincidence."""
    recorder = _Recorder()
    processor = as_logits_processor(dk.Chain([recorder], selector=dk.create("greedy")))
    for prompt in ([3, 4, 5, 6], [7, 8, 9, 10, 11, 12, 13, 14, 15]):  # 9 = 4 + 5 new tokens: the width a step has
        gpt2.generate(
            torch.tensor([prompt]), generation_config=gen_config(max_new_tokens=5), logits_processor=[processor]
        )
        assert recorder.last == [(step, len(prompt) + step, step) for step in range(5)]


def test_a_generate_continuing_the_last_output_is_its_next_step_until_reset(gpt2: Any, gen_config: Any) -> None:
    """hf.md: generate(out), a conversation's next turn from the last output, cannot be told from that generation's
    next step by its input_ids (its prompts, one column wider): it goes on at step 5 with the last one's state, and
    starts over after processor.reset()."""
    recorder = _Recorder()
    processor = as_logits_processor(dk.Chain([recorder], selector=dk.create("greedy")))
    config = gen_config(max_new_tokens=5)
    out = gpt2.generate(torch.tensor([[3, 4, 5, 6]]), generation_config=config, logits_processor=[processor])
    assert out.shape[1] == 9
    gpt2.generate(out, generation_config=config, logits_processor=[processor])
    assert recorder.last == [(step, 4 + step, step) for step in range(10)]  # one generation of 10 steps
    processor.reset()
    gpt2.generate(out, generation_config=config, logits_processor=[processor])
    assert recorder.last == [(step, 9 + step, step) for step in range(5)]


def test_prompt_lengths_mark_the_pads(gpt2: Any, gen_config: Any, left_pad: Any) -> None:
    seen = []

    def spy(logits: Tensor, ctx: dk.DecodeContext) -> Tensor:
        mask = ctx.valid_mask()
        seen.append(None if mask is None else mask.sum(-1).tolist())
        return logits

    ids, mask = left_pad(PROMPTS)
    processor = as_logits_processor(dk.Chain([spy]), prompt_lengths=mask.sum(-1))
    gpt2.generate(
        ids, attention_mask=mask, generation_config=gen_config(max_new_tokens=3), logits_processor=[processor]
    )
    assert seen == [[len(p) + step for p in PROMPTS] for step in range(3)]


def test_a_row_with_every_token_removed_is_an_error(gpt2: Any, gen_config: Any) -> None:
    def remove_all(logits: Tensor, ctx: dk.DecodeContext) -> Tensor:
        return torch.full_like(logits, float("-inf"))

    processor = as_logits_processor(dk.Chain([remove_all]))
    with pytest.raises(dk.NumericsError, match="step 0, row 0"):
        gpt2.generate(
            torch.tensor([[1, 2]]), generation_config=gen_config(max_new_tokens=2), logits_processor=[processor]
        )


N = 3000  # rows per side in the sampling test
CHAIN = "temperature(1.5) | top_k(5)"


def _first_two_tokens_hf(model: Any, gen_config: Any, chain: str, seed: int) -> Counter[tuple[int, int]]:
    torch.manual_seed(seed)
    ids = torch.tensor([[20, 21, 22]]).expand(N, -1)
    out = model.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        generation_config=gen_config(do_sample=True, max_new_tokens=2),
        logits_processor=[as_logits_processor(chain)],
    )
    return Counter((a, b) for a, b in out[:, 3:].tolist())


def _first_two_tokens_dk(model: Any, chain: str, seed: int) -> Counter[tuple[int, int]]:
    out = dk.generate(HFModel(model), [[20, 21, 22]] * N, chain=chain, max_new_tokens=2, seed=seed)
    return Counter((a, b) for a, b in out.tokens)


def _homogeneity_p(a: Counter[tuple[int, int]], b: Counter[tuple[int, int]]) -> float:
    """Chi-square test that two samples come from one distribution; rare pairs pooled into one cell."""
    keys = sorted(set(a) | set(b), key=lambda k: -(a[k] + b[k]))
    common = [k for k in keys if a[k] + b[k] >= 20]
    table = [[a[k] for k in common], [b[k] for k in common]]
    table[0].append(sum(a.values()) - sum(table[0]))
    table[1].append(sum(b.values()) - sum(table[1]))
    if table[0][-1] + table[1][-1] == 0:
        table = [row[:-1] for row in table]
    assert len(table[0]) >= 5  # a real distribution, not a single outcome
    return float(chi2_contingency(table).pvalue)


def test_sampled_tokens_have_the_same_distribution(gpt2: Any, gen_config: Any) -> None:
    """Fixed seeds; under the null hypothesis p is uniform (eight other seed pairs gave 0.18 ... 0.82)."""
    hf = _first_two_tokens_hf(gpt2, gen_config, CHAIN, seed=10)
    ours = _first_two_tokens_dk(gpt2, CHAIN + " | sample", seed=110)
    assert _homogeneity_p(hf, ours) > 1e-3
    # The test can fail: a colder chain gives a distinguishable sample.
    colder = _first_two_tokens_dk(gpt2, "temperature(0.8) | top_k(5) | sample", seed=111)
    assert _homogeneity_p(hf, colder) < 1e-3


@pytest.mark.parametrize(
    ("chain", "message"),
    [
        (None, r"chain=None is invalid; allowed: a Chain, a chain string or a spec list"),
        (123, r"chain=123 is invalid"),
        ({"name": "top_k", "params": {"k": 3}}, r"chain=\{'name': 'top_k'.* is invalid"),  # was read as names
    ],
)
def test_a_chain_that_is_none_of_the_three_forms_is_refused(chain: Any, message: str) -> None:
    with pytest.raises(dk.ParameterError, match=message):
        as_logits_processor(chain)


@pytest.mark.parametrize(
    "lengths",
    [[5], torch.tensor([[5, 5, 5]]), torch.tensor([5.0, 1.0, 3.0]), torch.tensor([-3, 1, 1])],
)
def test_prompt_lengths_that_are_not_counts_are_refused(lengths: Any) -> None:
    with pytest.raises(dk.ParameterError, match=r"prompt_lengths=.* is invalid; allowed: None, or a 1-D integer"):
        as_logits_processor("top_k(5)", prompt_lengths=lengths)


@pytest.mark.parametrize("lengths", [torch.tensor([5]), torch.tensor([5, 5]), torch.tensor([500, 1, 1])])
def test_prompt_lengths_that_do_not_fit_the_batch_are_refused_at_the_first_step(
    gpt2: Any, gen_config: Any, left_pad: Any, lengths: Tensor
) -> None:
    """They were broadcast, failed inside transformers, or were taken as given."""
    ids, mask = left_pad(PROMPTS)
    processor = as_logits_processor("repetition_penalty(1.3) | top_k(5)", prompt_lengths=lengths)
    with pytest.raises(dk.ParameterError, match=r"for input_ids of 3 rows and 10 columns; allowed: one length per row"):
        gpt2.generate(
            ids, attention_mask=mask, generation_config=gen_config(max_new_tokens=2), logits_processor=[processor]
        )


def test_a_grammar_stage_needs_the_tokenizer_and_runs_with_it(gpt2: Any, gen_config: Any, char_tokenizer: Any) -> None:
    """A grammar reads text: the processor gave its stages no tokenizer, so generate() failed at its first token
    saying "the model has no tokenizer" (the model has one; as_logits_processor had no way to take it)."""
    pytest.importorskip("decodekit_grammar")
    chain = "regex(pattern='[a-c]{3}!')"
    with pytest.raises(dk.ParameterError) as err:
        as_logits_processor(chain)
    assert str(err.value) == (
        "as_logits_processor: stage 0 (regex) reads text, so it needs the model's tokenizer; allowed: "
        "tokenizer= the transformers tokenizer (or a decodekit tokenizer with token_bytes())"
    )
    prompt = [char_tokenizer.encode("Hi ")]
    processor = as_logits_processor(chain, tokenizer=char_tokenizer)
    config = gen_config(max_new_tokens=8, eos_token_id=95, pad_token_id=95)
    theirs = gpt2.generate(torch.tensor(prompt), generation_config=config, logits_processor=[processor])
    generated = theirs[0, len(prompt[0]) :].tolist()
    ours = dk.generate(HFModel(gpt2, char_tokenizer), prompt, chain=f"{chain} | greedy", max_new_tokens=8)
    assert generated == [*ours.tokens[0], 95]  # the grammar complete, only <eos> is left: transformers stops on it
    assert ours.text is not None and char_tokenizer.decode(generated[:-1]) == ours.text[0] and len(ours.text[0]) == 4


def test_prompt_lengths_of_a_beam_search_say_to_repeat_them_and_then_decode_as_dk_beam(
    hf_model: Any, gen_config: Any, left_pad: Any
) -> None:
    """generate() runs num_beams rows per prompt: `attention_mask.sum(-1)`, one per prompt, was refused with no word
    of what to pass; repeated per beam it gives decodekit's own beam search over the ragged prompts."""
    ids, mask = left_pad(PROMPTS)
    config = gen_config(max_new_tokens=6, num_beams=2)
    processor = as_logits_processor("repetition_penalty(1.3)", prompt_lengths=mask.sum(-1))
    with pytest.raises(dk.ParameterError) as refused:
        hf_model.generate(ids, attention_mask=mask, generation_config=config, logits_processor=[processor])
    assert str(refused.value).endswith(
        "for input_ids of 6 rows and 10 columns; allowed: one length per row, each at most 10 (generate() made 2 rows "
        "of each prompt, for num_beams or num_return_sequences: pass "
        "prompt_lengths=attention_mask.sum(-1).repeat_interleave(2))"
    )
    processor = as_logits_processor("repetition_penalty(1.3)", prompt_lengths=mask.sum(-1).repeat_interleave(2))
    theirs = hf_model.generate(ids, attention_mask=mask, generation_config=config, logits_processor=[processor])
    ours = dk.decode(
        HFModel(hf_model), PROMPTS, strategy="beam", num_beams=2, chain="repetition_penalty(1.3)", max_new_tokens=6
    )
    assert theirs[:, ids.shape[1] :].tolist() == ours.tokens


@pytest.mark.parametrize("selector", ["mirostat_v2(tau=3.0)", "mirostat(tau=5.0)"])
def test_a_selector_transformers_cannot_stand_in_for_is_refused(selector: str) -> None:
    """transformers picks the token, by softmax or argmax: mirostat's own pick was dropped without a word."""
    pytest.importorskip("decodekit_adaptive")
    with pytest.raises(dk.ParameterError) as refused:
        as_logits_processor(f"top_k(40) | {selector}")
    name = selector.split("(")[0]
    assert str(refused.value) == (
        f"as_logits_processor: selector {name} picks by a rule of its own, and transformers picks the token itself "
        "(do_sample=True: a draw from the softmax, False: the argmax), so it would not run; allowed: a chain ending "
        "in sample, gumbel or greedy (or no selector), or decode with dk.generate to use it"
    )
    for kept in ("top_k(40)", "top_k(40) | sample", "top_k(40) | gumbel", "top_k(40) | greedy"):
        as_logits_processor(kept)


@pytest.mark.parametrize(
    "chain",
    [
        "min_new_tokens(30, [1])",  # ' ' barred for 30 tokens
        "repetition_penalty(1.5, include_prompt=False)",
        "regex(pattern='(the ){3,}[a-z]+, [a-z]+ [a-z]+ [a-z]+ [a-z]+!')",
    ],
)
@pytest.mark.parametrize("assisted", ["prompt_lookup_num_tokens", "assistant_model"])
def test_assisted_decoding_gives_the_tokens_of_plain_decoding(
    trained: Any, gen_config: Any, chain: str, assisted: str
) -> None:
    """Assisted decoding asks at each draft, then again from the drafts it kept: each such call started a new
    generation at step 0, so the minimum length counted again, the penalised tokens were the last few and the grammar
    began anew mid-text. Greedy, assisted decoding's tokens are plain decoding's."""
    if chain.startswith("regex"):
        pytest.importorskip("decodekit_grammar")
    tokenizer = dk.load_model("tiny-shakespeare-llama").tokenizer
    ids = torch.tensor([tokenizer.encode("ROMEO:\nthe the the the the the the\n")])
    config = gen_config(max_new_tokens=40)
    helper = (
        {"prompt_lookup_num_tokens": 3}
        if assisted == "prompt_lookup_num_tokens"
        else {"assistant_model": copy.deepcopy(trained)}
    )
    plain, fast = (
        trained.generate(
            ids, generation_config=config, logits_processor=[as_logits_processor(chain, tokenizer=tokenizer)], **kw
        )
        for kw in ({}, helper)
    )
    assert fast.tolist() == plain.tolist()


def test_assisted_decoding_going_back_over_a_stage_with_state_is_refused(trained: Any, gen_config: Any) -> None:
    """Its state advanced on drafts that generate() dropped; it cannot follow generate() back."""
    ids = torch.tensor([[60, 1, 60, 1, 60, 1, 60, 1, 60, 1]])
    processor = as_logits_processor(dk.Chain([_Recorder()]))
    with pytest.raises(dk.ParameterError, match=r"stage recorder keeps state across steps, and generate\(\) went back"):
        trained.generate(
            ids,
            generation_config=gen_config(max_new_tokens=40),
            logits_processor=[processor],
            prompt_lookup_num_tokens=3,
        )
