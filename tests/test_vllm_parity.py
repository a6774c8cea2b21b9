"""vLLM `SamplingParams` against the decodekit chains docs/samplers.md names for them ("Coming from another
library", vLLM), one row at a time and all together.

`vllm_logits` below re-implements what vLLM V1's sampler does to one row of logits, written from its source
(vllm/v1/sample/sampler.py `apply_logits_processors` and `sample`, ops/bad_words.py, ops/penalties.py with
model_executor/layers/utils.py `apply_penalties` and `_custom_ops.apply_repetition_penalties_torch`,
logits_processor/builtin.py's min-p, logit-bias and min-tokens processors, ops/topk_topp_sampler.py
`apply_top_k_top_p_pytorch`, sampling_params.py's clamps); vllm itself is not imported. Where decodekit
deliberately differs (ties at the top-p cut) the test pins both sides.

`vllm_stops` re-implements how vLLM V1 ends a request and cuts its text: vllm/v1/core/sched/utils.py `check_stop`
(the eos or a stop_token_ids token ends it, FINISHED_STOPPED, stop_reason the id), vllm/v1/engine/detokenizer.py
`BaseIncrementalDetokenizer.update(new_token_ids, stop_terminated)` (the stop token is detokenized only under
include_stop_str_in_output, and the stop strings are looked for in the text as ever), `check_stop_strings` and
`get_next_output_text` (a stream holds back max(len(stop)) - 1 characters while the stop string is cut).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch

import decodekit as dk
from decodekit.testing.tiny_lm import TinyLM
from tinymodels import CharTokenizer

NEG_INF = float("-inf")


@dataclass
class Params:
    """The vLLM `SamplingParams` fields that change the logits (defaults as vLLM's)."""

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    logit_bias: dict[int, float] = field(default_factory=dict)
    allowed_token_ids: list[int] | None = None
    bad_words: list[list[int]] = field(default_factory=list)  # already tokenized
    min_tokens: int = 0
    stop_token_ids: list[int] = field(default_factory=list)  # with the eos: vLLM's all_stop_token_ids


def vllm_logits(x: torch.Tensor, prompt: list[int], output: list[int], sp: Params) -> torch.Tensor:
    """vLLM's processed logits for one row `[V]` (greedy, temperature < 1e-5: before the temperature)."""
    x = x.float().clone()
    V = x.shape[0]
    if sp.allowed_token_ids is not None:  # allowed_token_ids_mask: True where not allowed
        mask = torch.ones(V, dtype=torch.bool)
        mask[sp.allowed_token_ids] = False
        x[mask] = NEG_INF
    for word in sp.bad_words:  # matched against the output tokens only
        if len(word) > len(output) + 1:
            continue
        prefix = output[len(output) - (len(word) - 1) :] if len(word) > 1 else []
        if prefix == word[:-1]:
            x[word[-1]] = NEG_INF
    if len(output) < sp.min_tokens:
        x[sp.stop_token_ids] = NEG_INF
    for token, bias in sp.logit_bias.items():  # SamplingParams.from_optional clamps to [-100, 100]
        x[token] += min(100.0, max(-100.0, bias))
    seen = torch.zeros(V, dtype=torch.bool)
    seen[prompt + output] = True
    counts = torch.bincount(torch.tensor(output, dtype=torch.long), minlength=V).float()
    penalties = torch.where(seen, sp.repetition_penalty, 1.0)
    x *= torch.where(x > 0, 1.0 / penalties, penalties)
    x -= sp.frequency_penalty * counts
    x -= sp.presence_penalty * (counts > 0).float()
    T = max(sp.temperature, 1e-2) if sp.temperature > 0 else 0.0  # SamplingParams raises 0 < T < 0.01 to 0.01
    if T < 1e-5:  # the sampler's greedy rule: only T = 0 reaches it
        return x
    x /= T
    if sp.min_p > 0:
        probs = x.softmax(-1)
        x[probs < probs.max() * sp.min_p] = NEG_INF
    if 0 < sp.top_k < V or sp.top_p < 1.0:
        srt, idx = x.sort(descending=False)
        if 0 < sp.top_k < V:
            srt[srt < srt[V - sp.top_k]] = NEG_INF
        if sp.top_p < 1.0:
            mask = srt.softmax(-1).cumsum(-1) <= 1 - sp.top_p
            mask[-1] = False
            srt[mask] = NEG_INF
        x = x.scatter(0, idx, srt)
    return x


def chain_for(sp: Params) -> str:
    """The chain docs/samplers.md's vLLM table gives for `sp`, in vLLM's order."""
    stages = []
    if sp.allowed_token_ids is not None:
        stages.append(f"allowed_tokens({sp.allowed_token_ids})")
    if sp.bad_words:
        stages.append(f"bad_words({sp.bad_words}, false)")
    if sp.min_tokens:
        stages.append(f"min_new_tokens({sp.min_tokens}, {sp.stop_token_ids})")
    if sp.logit_bias:
        bias = ", ".join(f"{t}: {b}" for t, b in sp.logit_bias.items())
        stages.append(f"logit_bias({{{bias}}})")
    if sp.repetition_penalty != 1.0:
        stages.append(f"repetition_penalty({sp.repetition_penalty})")
    if sp.frequency_penalty:
        stages.append(f"frequency_penalty({sp.frequency_penalty})")
    if sp.presence_penalty:
        stages.append(f"presence_penalty({sp.presence_penalty})")
    if sp.temperature == 0:
        stages.append("temperature(0)")
    else:
        stages.append(f"temperature({max(sp.temperature, 1e-2)})")
    if sp.min_p > 0:
        stages.append(f"min_p({sp.min_p})")
    if sp.top_k > 0:
        stages.append(f"top_k({sp.top_k})")
    if sp.top_p < 1.0:
        stages.append(f"top_p({sp.top_p})")
    return " | ".join(stages)


def ctx_with(prompt: list[int], output: list[int]) -> dk.DecodeContext:
    return dk.DecodeContext(tokens=torch.tensor([prompt + output]), step=len(output))


def decodekit_logits(x: torch.Tensor, prompt: list[int], output: list[int], sp: Params) -> torch.Tensor:
    return dk.Chain.parse(chain_for(sp)).process(x[None], ctx_with(prompt, output))[0]


def assert_same(ours: torch.Tensor, theirs: torch.Tensor) -> None:
    assert torch.equal(torch.isfinite(ours), torch.isfinite(theirs)), "the kept tokens differ"
    kept = torch.isfinite(theirs)
    assert torch.allclose(ours[kept], theirs[kept], rtol=1e-6, atol=1e-6)


V = 40
PROMPT = [3, 7, 7, 12, 30]
OUTPUT = [7, 21, 21, 21, 5, 30]

TRUNCATE: dict[str, Any] = dict(temperature=0.8, top_k=20, top_p=0.9, min_p=0.02)
PENALISE: dict[str, Any] = dict(repetition_penalty=1.2, frequency_penalty=0.3, presence_penalty=0.2, logit_bias={5: 2})
CONSTRAIN: dict[str, Any] = dict(allowed_token_ids=[*range(0, 40, 2), 5, 21], bad_words=[[6], [30, 10]])
HOLD_BACK: dict[str, Any] = dict(min_tokens=8, stop_token_ids=[0])

# One row of the table per case, then rows together (vLLM's order of application matters there).
CASES = {
    "temperature": Params(temperature=0.7),
    "temperature_below_0.01": Params(temperature=0.004),
    "temperature_below_1e-5": Params(temperature=1e-6),  # 0.01 in vLLM, not greedy
    "top_k": Params(top_k=5),
    "top_k_0_off": Params(top_k=0),
    "top_p": Params(top_p=0.6),
    "min_p": Params(min_p=0.2),
    "repetition_penalty": Params(repetition_penalty=1.7),
    "repetition_penalty_below_1": Params(repetition_penalty=0.6),
    "frequency_penalty": Params(frequency_penalty=0.8),
    "presence_penalty": Params(presence_penalty=-1.1),
    "logit_bias": Params(logit_bias={4: 5.0, 21: -2.5, 9: 100.0}),
    "allowed_token_ids": Params(allowed_token_ids=[1, 4, 7, 21, 33]),
    "bad_words": Params(bad_words=[[4], [5, 9], [30, 11], [21, 5, 30, 2], [8, 8]]),
    "min_tokens": Params(min_tokens=10, stop_token_ids=[0, 2, 39]),
    "min_tokens_reached": Params(min_tokens=6, stop_token_ids=[0, 2, 39]),
    "penalties_together": Params(repetition_penalty=1.3, frequency_penalty=0.5, presence_penalty=0.4),
    "bias_then_penalty": Params(logit_bias={21: -6.0, 7: 3.0}, repetition_penalty=2.0),
    "truncations_together": Params(temperature=1.3, min_p=0.05, top_k=12, top_p=0.8),
    "everything": Params(**TRUNCATE, **PENALISE, **CONSTRAIN, **HOLD_BACK),
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("seed", range(6))
def test_chain_processes_as_vllm(name: str, seed: int) -> None:
    x = torch.randn(V, generator=torch.Generator().manual_seed(seed)) * 3
    sp = CASES[name]
    assert_same(decodekit_logits(x, PROMPT, OUTPUT, sp), vllm_logits(x, PROMPT, OUTPUT, sp))


@pytest.mark.parametrize("seed", range(6))
def test_temperature_0_picks_vllm_greedy_token(seed: int) -> None:
    # vLLM's greedy row: argmax of the logits after penalties and bias; min_p, top_k and top_p are reset.
    x = torch.randn(V, generator=torch.Generator().manual_seed(seed)) * 3
    sp = Params(temperature=0.0, repetition_penalty=1.5, logit_bias={1: 4.0}, presence_penalty=0.7)
    ours = decodekit_logits(x, PROMPT, OUTPUT, sp)
    assert torch.isfinite(ours).sum() == 1
    assert int(ours.argmax()) == int(vllm_logits(x, PROMPT, OUTPUT, sp).argmax())


def test_greedy_tie_takes_lowest_id_as_argmax() -> None:
    x = torch.tensor([0.0, 2.0, 1.0, 2.0])
    out = dk.Chain.parse("temperature(0)").process(x[None], ctx_with([1], []))[0]
    assert out.tolist() == [NEG_INF, 2.0, NEG_INF, NEG_INF]  # torch.argmax, vLLM's greedy_sample: id 1


def test_repetition_penalty_hand_worked() -> None:
    # Token 0 in the prompt, token 1 in the output, r = 2: positive / 2, negative * 2, unseen unchanged.
    x = torch.tensor([2.0, -2.0, 1.0, 0.5])
    sp = Params(repetition_penalty=2.0)
    assert vllm_logits(x, [0], [1], sp).tolist() == [1.0, -4.0, 1.0, 0.5]
    assert decodekit_logits(x, [0], [1], sp).tolist() == [1.0, -4.0, 1.0, 0.5]


def test_logit_bias_before_repetition_penalty_hand_worked() -> None:
    # vLLM adds the bias first: token 0 (seen) 1 - 3 = -2, then * 2 = -4 (the other order gives 0.5 - 3).
    x = torch.tensor([1.0, 0.0])
    sp = Params(logit_bias={0: -3.0}, repetition_penalty=2.0)
    assert vllm_logits(x, [0], [], sp).tolist() == [-4.0, 0.0]
    assert decodekit_logits(x, [0], [], sp).tolist() == [-4.0, 0.0]


def test_frequency_presence_count_output_only_hand_worked() -> None:
    # Output [1, 1, 2], prompt [3, 3]: token 1 loses 2 * 0.5 + 0.25, token 2 0.5 + 0.25, token 3 nothing.
    x = torch.zeros(4)
    sp = Params(frequency_penalty=0.5, presence_penalty=0.25)
    assert vllm_logits(x, [3, 3], [1, 1, 2], sp).tolist() == [0.0, -1.25, -0.75, 0.0]
    assert decodekit_logits(x, [3, 3], [1, 1, 2], sp).tolist() == [0.0, -1.25, -0.75, 0.0]


def test_bad_words_prefix_in_prompt_does_not_count_in_vllm() -> None:
    # The prompt ends with 5; bad word [5, 9]. vLLM matches the output tokens only, so 9 stays at the first
    # step; HF's rule (bad_words' default, include_prompt=true) reads the prompt and removes it.
    x = torch.zeros(12)
    sp = Params(bad_words=[[5, 9]])
    assert torch.isfinite(vllm_logits(x, [1, 5], [], sp)).all()
    assert torch.isfinite(decodekit_logits(x, [1, 5], [], sp)).all()
    hf = dk.create("bad_words", [[5, 9]])(x[None], ctx_with([1, 5], []))[0]
    assert hf[9] == NEG_INF
    # Once 5 is generated, both remove 9.
    assert vllm_logits(x, [1], [5], sp)[9] == NEG_INF
    assert decodekit_logits(x, [1], [5], sp)[9] == NEG_INF


def test_bad_words_generated_only_in_a_ragged_batch() -> None:
    # Row 0 generated [5], row 1 has 5 only as its prompt's last token (left-padded prompts, one step generated
    # in both: row 1's step was 4). Only row 0 removes 9.
    tokens = torch.tensor([[0, 2, 5], [1, 5, 4]])
    ctx = dk.DecodeContext(tokens=tokens, prompt_lengths=torch.tensor([1, 2]), step=1)
    out = dk.create("bad_words", [[5, 9], [5, 4, 3]], include_prompt=False)(torch.zeros(2, 12), ctx)
    assert torch.isneginf(out).nonzero().tolist() == [[0, 9]]


def test_top_p_ties_differ_by_design() -> None:
    # Four equal tokens, top_p 0.5: vLLM keeps exactly two (which two, its sort decides); decodekit keeps the
    # four, as every truncation here keeps the ties of the last token kept.
    x = torch.zeros(4)
    theirs = vllm_logits(x, [0], [], Params(top_p=0.5))
    assert int(torch.isfinite(theirs).sum()) == 2
    ours = decodekit_logits(x, [0], [], Params(top_p=0.5))
    assert int(torch.isfinite(ours).sum()) == 4


def test_top_k_keeps_ties_as_vllm_pytorch_path() -> None:
    # Logits 3, 2, 2, 2, 1 under top_k = 2: the k-th value is 2, and all three 2s stay in both.
    x = torch.tensor([3.0, 2.0, 2.0, 2.0, 1.0])
    expected = [3.0, 2.0, 2.0, 2.0, NEG_INF]
    assert vllm_logits(x, [0], [], Params(top_k=2)).tolist() == expected
    assert decodekit_logits(x, [0], [], Params(top_k=2)).tolist() == expected


def test_logit_bias_past_100_is_refused_not_clamped() -> None:
    # vLLM's SamplingParams.from_optional clamps a bias to [-100, 100]; decodekit refuses it, naming it.
    with pytest.raises(dk.ParameterError, match="bias"):
        dk.create("logit_bias", {3: 150.0})


def test_logprobs_are_vllm_raw_logprobs() -> None:
    # vLLM's default logprobs_mode "raw_logprobs": log_softmax of the logits before any processing.
    x = torch.randn(1, V, generator=torch.Generator().manual_seed(0))
    chain = dk.Chain.parse("repetition_penalty(1.5) | temperature(0.5) | top_k(3)")
    ctx = dk.DecodeContext(
        tokens=torch.tensor([PROMPT + OUTPUT]), step=len(OUTPUT), generators=[torch.Generator().manual_seed(1)]
    )
    picked = chain.step(x, ctx, logprobs=4)
    assert picked.logprobs is not None
    lp = picked.logprobs[0]
    raw = x[0].log_softmax(-1)
    top_v, top_i = raw.topk(4)
    assert [i for i, _ in lp.raw_top] == top_i.tolist()
    assert torch.allclose(torch.tensor([v for _, v in lp.raw_top]), top_v)
    assert lp.raw == pytest.approx(float(raw[picked.ids[0]]), abs=1e-6)


# The request-level rows: dk.generate's options for vLLM's stop_token_ids, ignore_eos, stop, max_tokens and n.


@pytest.fixture(scope="module")
def model() -> TinyLM:
    lm = TinyLM(95)
    lm.tokenizer = CharTokenizer()  # type: ignore[attr-defined,assignment]
    return lm


def first_new(tokens: list[int], start: int) -> int:
    """The first position from `start` whose token did not occur before it."""
    return next(i for i in range(start, len(tokens)) if tokens[i] not in tokens[:i])


def test_stop_token_ids_end_the_row_on_the_stop_token(model: TinyLM) -> None:
    # vLLM: the stop token ends the sequence and is its last output token id.
    free = dk.generate(model, [[1, 2, 3]], chain="greedy", max_new_tokens=12, stop_tokens=[]).tokens[0]
    at = first_new(free, 2)
    out = dk.generate(model, [[1, 2, 3]], chain="greedy", max_new_tokens=12, stop_tokens=[free[at]])
    assert out.tokens[0] == free[: at + 1] and out.finish_reasons == ["stop"]


def test_ignore_eos_is_the_eos_left_out_of_stop_tokens(model: TinyLM) -> None:
    # vLLM's ignore_eos samples the eos like any token and goes on; min_tokens still holds it back.
    free = dk.generate(model, [[1, 2, 3]], chain="greedy", max_new_tokens=12, stop_tokens=[]).tokens[0]
    eos = free[first_new(free, 2)]
    out = dk.generate(model, [[1, 2, 3]], chain="greedy", max_new_tokens=12, stop_tokens=[])
    assert out.tokens[0] == free and eos in out.tokens[0] and out.finish_reasons == ["length"]


def test_stop_strings_leave_the_stop_string_out_of_the_text(model: TinyLM) -> None:
    # vLLM's default include_stop_str_in_output=False: the text ends before the stop string.
    free = dk.generate(model, ["ab"], chain="greedy", max_new_tokens=12, stop_tokens=[]).text[0]  # type: ignore[index]
    at = next(i for i in range(2, len(free)) if free[i] not in free[:i])
    out = dk.generate(model, ["ab"], chain="greedy", max_new_tokens=12, stop_tokens=[], stop_strings=[free[at]])
    assert out.text == [free[:at]] and out.finish_reasons == ["stop"]


def test_max_tokens_and_n_are_max_new_tokens_and_copies_of_the_prompt(model: TinyLM) -> None:
    # n = 3 samples of one prompt: the prompt three times, one seed each; each copy decodes as it would alone.
    out = dk.generate(model, [[4, 5]] * 3, chain="top_k(20)", max_new_tokens=6, seed=[1, 2, 3], stop_tokens=[])
    for b, seed in enumerate([1, 2, 3]):
        alone = dk.generate(model, [[4, 5]], chain="top_k(20)", max_new_tokens=6, seed=[seed], stop_tokens=[])
        assert out.tokens[b] == alone.tokens[0] and len(out.tokens[b]) == 6


class ByteCharTokenizer(CharTokenizer):
    """CharTokenizer stating its tokens' bytes, as the grammar stages need."""

    def token_bytes(self) -> list[bytes | None]:
        return [chr(i + 32).encode() for i in range(95)]


@pytest.mark.parametrize(
    ("chain", "valid"),
    [
        ("regex(pattern='(yes|no|maybe)') | temperature(0.8)", lambda t: t in ("yes", "no", "maybe")),  # choice
        ('json_schema(schema={"type": "boolean"})', lambda t: json.loads(t) in (True, False)),  # json
        ('grammar(lark=\'start: "a" "b"+\') | top_k(10)', lambda t: t.startswith("ab") and set(t) == {"a", "b"}),
    ],
)
def test_structured_outputs_rows(chain: str, valid: Callable[[str], bool]) -> None:
    pytest.importorskip("decodekit_grammar")
    lm = TinyLM(95)
    lm.tokenizer = ByteCharTokenizer()  # type: ignore[attr-defined,assignment]
    out = dk.generate(lm, ["q"] * 4, chain=chain, max_new_tokens=8, seed=[1, 2, 3, 4], stop_tokens=[])
    assert out.text is not None and all(valid(t) for t in out.text), out.text


def test_stop_strings_are_not_held_back_by_min_new_tokens(model: TinyLM) -> None:
    # Pinned difference: vLLM looks for stop strings only after min_tokens tokens; here min_new_tokens removes the
    # stop tokens alone, and a stop string in the first tokens still ends the row.
    free = dk.generate(model, ["ab"], chain="greedy", max_new_tokens=12, stop_tokens=[]).text[0]  # type: ignore[index]
    at = next(i for i in range(1, len(free)) if free[i] not in free[:i])
    chain = "min_new_tokens(8, [94]) | greedy"
    out = dk.generate(model, ["ab"], chain=chain, max_new_tokens=12, stop_tokens=[], stop_strings=[free[at]])
    assert len(free) > 8 and out.text == [free[:at]] and at < 8


# vLLM's stop handling (`vllm_stops`, module docstring) against dk.stream's, on rows whose tokens are known.


@dataclass
class Stops:
    """The vLLM `SamplingParams` fields that end a request or cut its text."""

    stop_token_ids: list[int]
    stop: list[str]
    include_stop_str_in_output: bool


@dataclass
class Ended:
    """What vLLM returns for one request: `text` and `token_ids` (its last output), `stop_reason` (an id, a stop
    string, or None: the length) and `deltas`, the text of each step's DELTA output."""

    text: str
    token_ids: list[int]
    stop_reason: int | str | None
    deltas: list[str]


def check_stop_strings(text: str, new: int, stop: list[str], include: bool) -> tuple[str, int] | None:
    """vLLM's: the first stop string (in `stop`'s order) in the text's last `new` characters, with where the text
    ends (-1: where it ends now)."""
    if not new:
        return None
    for s in stop:
        at = text.find(s, 1 - new - len(s))
        if at == -1:
            continue
        if include:
            at += len(s)
            if at >= len(text):
                return s, -1
        return s, at
    return None


def vllm_stops(sampled: list[int], special: list[int], sp: Stops, render: Callable[[int], str] | None = None) -> Ended:
    """vLLM V1 on a request whose model samples `sampled` (max_tokens: its length), one token a step, streamed as
    DELTA, through CharTokenizer: a token adds its character, a `special` one nothing (skip_special_tokens=True,
    vLLM's default); or the text each token adds is `render`'s (its incremental detokenizer's, `VllmBytes`)."""
    render = render or (lambda token: "" if token in special else chr(token + 32))
    text, ids, deltas, sent = "", [], [], 0
    reason: int | str | None = None
    hold = max(map(len, sp.stop)) - 1 if sp.stop and not sp.include_stop_str_in_output else 0
    for token in sampled:
        ids.append(token)
        stop_terminated = token in sp.stop_token_ids  # check_stop, min_tokens 0
        reason = token if stop_terminated else None
        if not stop_terminated or sp.include_stop_str_in_output:  # update(): a stop token skipped unless kept
            before = len(text)
            text += render(token)
            hit = check_stop_strings(text, len(text) - before, sp.stop, sp.include_stop_str_in_output)
            if hit is not None:
                reason, cut = hit
                text = text if cut == -1 else text[:cut]
        finished = reason is not None or len(ids) == len(sampled)
        upto = len(text) - (0 if finished else hold)  # get_next_output_text(finished, delta=True)
        deltas.append(text[sent:upto] if sent < upto else "")
        sent = max(sent, upto)
        if finished:
            break
    return Ended(text, ids, reason, deltas)


class SpecialChars(CharTokenizer):
    """CharTokenizer with special tokens: `decode` keeps their characters (as the HF bridge's, transformers'
    default), `special_token_ids` names them (vLLM's skip_special_tokens leaves them out)."""

    def __init__(self, special: list[int]) -> None:
        self.special_token_ids = tuple(special)


def stops_case(rng: random.Random, free: str) -> tuple[Stops, list[int]]:
    """Stop tokens, strings and specials drawn around the text `free` the row makes without them: tokens first met
    in it (some absent), strings cut from it (some ending on a stop token's character), specials among the tokens."""
    enc = CharTokenizer().encode
    firsts = [i for i in range(len(free)) if free[i] not in free[:i]]
    tokens = [enc(free[i])[0] for i in rng.sample(firsts, rng.randint(0, 2))] + [94] * rng.randint(0, 1)  # 94: "~"
    stop = []
    for _ in range(rng.randint(0, 2)):
        start = rng.randrange(len(free))
        stop.append(free[start : start + rng.randint(1, 3)])
    if tokens and rng.random() < 0.5:
        at = free.find(chr(tokens[0] + 32))  # a string that the first stop token's character completes
        stop.insert(0, free[max(0, at - rng.randint(1, 2)) : at + 1])
    special = [t for t in tokens if rng.random() < 0.4]
    return Stops(tokens, [s for s in stop if s], rng.random() < 0.5), special


def streamed(lm: TinyLM, prompt: Any, chain: str, new: int, seed: int, sp: Stops) -> tuple[Ended, str | None]:
    """dk.stream's row under `sp`, as `vllm_stops` gives vLLM's, and its finish reason."""
    stops: dict[str, Any] = dict(stop_tokens=sp.stop_token_ids, stop_strings=sp.stop)
    options: dict[str, Any] = dict(
        chain=chain, max_new_tokens=new, seed=[seed], include_stop_str_in_output=sp.include_stop_str_in_output
    )
    events = list(dk.stream(lm, [prompt], **stops, **options))
    texts = [ev.text or "" for ev in events]
    ended = Ended("".join(texts), [ev.token for ev in events], events[-1].stopped_by, texts)
    return ended, events[-1].finish_reason


@pytest.mark.parametrize("seed", range(4))
def test_stops_end_rows_and_cut_text_as_vllm(seed: int) -> None:
    """25 cases per seed: the text, tokens, stop reason and (the stop string kept: nothing held back) each event's
    text as vLLM's; cut, vLLM holds back a fixed max(len(stop)) - 1 characters and decodekit only what may start a
    stop string, so there the streamed texts join to the same text."""
    rng, lm = random.Random(seed), TinyLM(95)
    prompt, chain, new = "ab", "temperature(1.5)", 24
    for case in range(25):
        lm.tokenizer = SpecialChars([])  # type: ignore[attr-defined,assignment]
        sampled = dk.generate(lm, [prompt], chain=chain, max_new_tokens=new, seed=[case], stop_tokens=[]).tokens[0]
        sp, special = stops_case(rng, CharTokenizer().decode(sampled))
        lm.tokenizer = SpecialChars(special)  # type: ignore[attr-defined,assignment]
        theirs = vllm_stops(sampled, special, sp)
        ours, reason = streamed(lm, prompt, chain, new, case, sp)
        what = f"seed {seed} case {case}: {sp}, special {special}"
        assert (ours.text, ours.token_ids) == (theirs.text, theirs.token_ids), what
        assert ours.stop_reason == theirs.stop_reason, what
        assert reason == ("length" if theirs.stop_reason is None else "stop"), what
        if sp.include_stop_str_in_output:
            assert ours.deltas == theirs.deltas, what


class SpecialBytes:
    """Token i < 256 is byte i, decoded as a byte-level tokenizer does (a character whose bytes did not all come:
    U+FFFD); `special` ones, 256 among them, have no text."""

    def __init__(self, special: list[int]) -> None:
        self.special_token_ids = (256, *special)

    def encode(self, text: str) -> list[int]:
        return list(text.encode())

    def decode(self, ids: Sequence[int]) -> str:
        return bytes(i for i in ids if i < 256 and i not in self.special_token_ids).decode(errors="replace")


class VllmBytes:
    """vLLM's slow incremental detokenizer over `SpecialBytes` (vllm/transformers_utils/detokenizer_utils.py
    `detokenize_incrementally`, skip_special_tokens=True): a special token adds no token; a token adds the text its
    window's decode gained, or nothing while that decode ends in U+FFFD (the last character's bytes may yet come)."""

    def __init__(self, prompt: list[int], tokenizer: SpecialBytes) -> None:
        self.tokens, self.tokenizer = list(prompt), tokenizer
        self.prefix, self.read = max(len(prompt) - 5, 0), len(prompt)  # convert_prompt_ids_to_tokens' offsets

    def __call__(self, token: int) -> str:
        if token in self.tokenizer.special_token_ids:
            return ""
        self.tokens.append(token)
        before = self.tokenizer.decode(self.tokens[self.prefix : self.read])
        after = self.tokenizer.decode(self.tokens[self.prefix :])
        if len(after) <= len(before) or after.endswith("\ufffd"):
            return ""
        self.prefix, self.read = self.read, len(self.tokens)
        return after[len(before) :]


@pytest.mark.parametrize("seed", range(3))
def test_kept_stops_on_bytes_end_rows_and_text_as_vllm(seed: int) -> None:
    """Under include_stop_str_in_output, on a byte tokenizer whose text breaks characters: text, tokens, stop reason
    and each event's text as vLLM's, stop and special tokens among bytes that start or end a character. A stop token
    that ended inside a character showed U+FFFD; a special one let out a held, broken tail and cut the text at a
    stop string in it while naming the token."""
    rng, lm = random.Random(seed), TinyLM(257)
    prompt, chain, new = [97, 98], "temperature(1.5)", 24
    for case in range(25):
        lm.tokenizer = SpecialBytes([])  # type: ignore[attr-defined,assignment]
        sampled = dk.generate(lm, [prompt], chain=chain, max_new_tokens=new, seed=[case], stop_tokens=[]).tokens[0]
        firsts = [t for i, t in enumerate(sampled) if t not in sampled[:i]]
        tokens = rng.sample(firsts, min(len(firsts), rng.randint(0, 2))) + [256] * rng.randint(0, 1)
        special = [t for t in tokens if t != 256 and rng.random() < 0.4]
        free = SpecialBytes(special).decode(sampled)
        stop = [free[(at := rng.randrange(len(free))) : at + rng.randint(1, 3)] for _ in range(rng.randint(0, 2))]
        sp = Stops(tokens, [s for s in stop if s], True)
        tokenizer = SpecialBytes(special)
        lm.tokenizer = tokenizer  # type: ignore[attr-defined,assignment]
        theirs = vllm_stops(sampled, special, sp, VllmBytes(prompt, tokenizer))
        assert streamed(lm, prompt, chain, new, case, sp)[0] == theirs, f"seed {seed} case {case}: {sp}, {special}"
