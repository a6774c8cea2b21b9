"""reasoning_budget: hand-worked sequences, the state machine against a re-implementation of llama.cpp's
`common_reasoning_budget_accept` / `_apply` (written from its source, mutable as there), and the stage in the
decode loop under sampling, speculative decoding and beam search."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from decodekit_constraints.params import ReasoningBudgetParams
from decodekit_constraints.reasoning_budget import Budgets, Phase
from decodekit_gpt.gpt import GPT, GPTConfig

import decodekit as dk


def forced_after(params: dict[str, object], tokens: list[int]) -> int | None:
    """The token the stage forces after `tokens` (None: it removes nothing)."""
    p = ReasoningBudgetParams.model_validate(params)
    state = Budgets(p).state(np.array(tokens, dtype=np.int32))
    forced = p.end if p.forced is None else p.forced
    return forced[state.forced] if state.phase is Phase.FORCING else None


def test_a_block_of_budget_tokens_then_the_end_is_forced() -> None:
    """start [5, 6], end [7], budget 2: 5 6 opens; 1 and 2 spend the budget; 7 is forced, then nothing."""
    p = {"budget": 2, "start": [5, 6], "end": [7]}
    assert [forced_after(p, [5, 6, 1, 2][:n]) for n in range(5)] == [None, None, None, None, 7]
    assert forced_after(p, [5, 6, 1, 2, 7]) is None  # done
    assert forced_after(p, [5, 6, 1, 7]) is None  # closed within the budget
    assert forced_after(p, [5, 6, 1, 7, 5, 6, 3, 4]) == 7  # a new block, a fresh budget


def test_the_forced_sequence_is_forced_token_by_token() -> None:
    p = {"budget": 1, "start": [5], "end": [7], "forced": [9, 8, 7]}
    assert [forced_after(p, [5, 1, *[9, 8, 7][:n]]) for n in range(4)] == [9, 8, 7, None]


def test_a_broken_partial_match_restarts_as_llama_cpp_does() -> None:
    """llama.cpp's matcher restarts at 1 only when the breaking token is the sequence's first: start [5, 5, 6]
    is not found in 5 5 5 6 (a substring search would find it), and is in 5 5 6."""
    p = {"budget": 0, "start": [5, 5, 6], "end": [7]}
    assert forced_after(p, [5, 5, 5, 6]) is None
    assert forced_after(p, [5, 5, 6]) == 7  # budget 0: forcing at once


def test_open_counts_from_the_first_generated_token() -> None:
    p = {"budget": 2, "start": [5], "end": [7], "open": True}
    assert [forced_after(p, [1, 2][:n]) for n in range(3)] == [None, None, 7]
    assert forced_after({**p, "budget": 0}, []) == 7


class LlamaCppReasoningBudget:
    """llama.cpp's sampler as its source has it (no vocabulary, so no UTF-8 wait): `accept` per token, `forced`
    what `apply` keeps."""

    def __init__(self, budget: int, start: list[int], end: list[int], forced: list[int], counting: bool) -> None:
        self.budget, self.start, self.end, self.forced_tokens = budget, start, end, forced
        self.start_pos = self.end_pos = self.force_pos = 0
        self.remaining = budget
        self.state = "counting" if counting else "idle"
        if self.state == "counting" and budget <= 0:
            self.state = "forcing"

    @staticmethod
    def advance(tokens: list[int], pos: int, token: int) -> tuple[int, bool]:
        if token == tokens[pos]:
            pos += 1
            if pos >= len(tokens):
                return 0, True
            return pos, False
        return (1 if token == tokens[0] else 0), False

    def accept(self, token: int) -> None:
        if self.state in ("idle", "done"):
            self.start_pos, hit = self.advance(self.start, self.start_pos, token)
            if hit:
                self.state, self.remaining = "counting", self.budget
                if self.state == "counting" and self.remaining <= 0:
                    self.state, self.force_pos = "forcing", 0
                self.end_pos = 0
        elif self.state == "counting":
            self.end_pos, hit = self.advance(self.end, self.end_pos, token)
            if hit:
                self.state = "done"
                return
            self.remaining -= 1
            if self.remaining <= 0:
                self.state, self.force_pos, self.end_pos = "forcing", 0, 0
        else:
            self.force_pos += 1
            if self.force_pos >= len(self.forced_tokens):
                self.state = "done"

    def forced(self) -> int | None:
        if self.state == "forcing" and self.force_pos < len(self.forced_tokens):
            return self.forced_tokens[self.force_pos]
        return None


@pytest.mark.parametrize("seed", range(40))
def test_the_state_machine_matches_llama_cpp_on_random_streams(seed: int) -> None:
    """Token streams over a 6-token vocabulary, so starts, ends and partial matches happen often; whenever a
    token is forced the stream takes it (as a decode does)."""
    rng = random.Random(seed)
    start = [rng.randrange(6) for _ in range(rng.randint(1, 3))]
    end = [rng.randrange(6) for _ in range(rng.randint(1, 3))]
    forced = [rng.randrange(6) for _ in range(rng.randint(1, 3))] if rng.random() < 0.5 else None
    budget, counting = rng.randint(0, 5), rng.random() < 0.3
    params = {"budget": budget, "start": start, "end": end, "forced": forced, "open": counting}
    theirs = LlamaCppReasoningBudget(budget, start, end, end if forced is None else forced, counting)
    tokens: list[int] = []
    for _ in range(60):
        want = theirs.forced()
        assert forced_after(params, tokens) == want, (params, tokens)
        token = rng.randrange(6) if want is None else want
        theirs.accept(token)
        tokens.append(token)


def tiny_gpt() -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=50, block_size=128, n_layer=1, n_head=2, n_embd=16)).eval()


START, END = 7, 8
# Biased towards opening and against closing, so blocks open early and run into their budget.
BIASED = f"logit_bias({{{START}: 4.0, {END}: -4.0}})"


def blocks(row: list[int]) -> list[int]:
    """The length of each reasoning block of a row (tokens between START and END; the last may be open)."""
    lengths: list[int] = []
    inside: int | None = None
    for token in row:
        if inside is None and token == START:
            inside = 0
        elif inside is not None and token == END:
            lengths.append(inside)
            inside = None
        elif inside is not None:
            inside += 1
    return lengths if inside is None else [*lengths, inside]


def test_blocks_hold_at_most_the_budget_in_generate() -> None:
    chain = f"{BIASED} | reasoning_budget(4, [{START}], [{END}]) | temperature(0.8) | sample"
    out = dk.generate(tiny_gpt(), [[1, 2, 3], [4, 5], [6]], chain=chain, max_new_tokens=40, seed=3)
    free = dk.generate(tiny_gpt(), [[1, 2, 3], [4, 5], [6]], chain=f"{BIASED} | temperature(0.8)", seed=3,
                       max_new_tokens=40)  # fmt: skip
    assert all(length <= 4 for row in out.tokens for length in blocks(row))
    assert sum(len(blocks(row)) for row in out.tokens) >= 3
    assert any(length > 4 for row in free.tokens for length in blocks(row))  # without it, longer blocks


def test_speculative_decoding_and_beam_search_keep_the_budget() -> None:
    """A row's state is a function of its tokens: speculative decoding gives greedy decoding's tokens exactly,
    and every beam keeps the budget."""
    model, chain = tiny_gpt(), f"{BIASED} | reasoning_budget(3, [{START}], [{END}]) | greedy"
    plain = dk.generate(model, [[1, 2, 3], [4, 5]], chain=chain, max_new_tokens=30)
    drafted = dk.decode(model, [[1, 2, 3], [4, 5]], strategy="speculative", draft="ngram", chain=chain,
                        max_new_tokens=30)  # fmt: skip
    assert drafted.tokens == plain.tokens
    beams = dk.decode(model, [[1, 2, 3]], strategy="beam", num_beams=3, num_return_sequences=3,
                      chain=f"{BIASED} | reasoning_budget(3, [{START}], [{END}])", max_new_tokens=20)  # fmt: skip
    assert all(length <= 3 for row in beams.tokens for length in blocks(row))


def test_speculative_decoding_with_many_drafts_advances_each_row_a_token_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """8 rows drafting k=12 tokens a round touch ~200 prefixes a round, more than the 64 states held at first:
    each row's parent was evicted, and rebuilding it from the start held every prefix rebuilt, which evicted the
    other rows' states in turn (384,000 state transitions for 1,600 tokens, quadratic in the length). The held
    states now grow to what the decode touches, and a rebuild holds only its last state."""
    import decodekit_constraints.reasoning_budget as rb

    steps = [0]
    after = rb.Budget.after

    def counted(self: rb.Budget, token: int, p: ReasoningBudgetParams) -> rb.Budget:
        steps[0] += 1
        return after(self, token, p)

    monkeypatch.setattr(rb.Budget, "after", counted)
    model = dk.load_model("tiny-shakespeare")
    prompts = ["ROMEO:", "JULIET:", "KING:", "HAMLET: O", "First", "Second Citizen", "A", "QUEEN MARGARET:"]
    out = dk.decode(model, prompts, strategy="speculative", draft="tiny-shakespeare-draft", k=12, seed=list(range(8)),
                    chain="reasoning_budget(1000, [60], [83, 83]) | sample", max_new_tokens=200)  # fmt: skip
    generated = sum(len(t) for t in out.tokens)
    assert generated == 1600
    assert steps[0] <= 13 * generated  # one transition per new prefix: k + 1 a round, a round emits 1 token or more


@pytest.mark.parametrize(
    ("chain", "said"),
    [
        ("reasoning_budget(3, [99], [8])", "start holds token id 99"),
        ("reasoning_budget(3, [7], [8, 120])", "end holds token id 120"),
        ("reasoning_budget(3, [7], [8], forced=[5, 64, 8])", "forced holds token id 64"),
    ],
)
def test_token_ids_past_the_vocabulary_are_named(chain: str, said: str) -> None:
    """Each parameter by its own name (all three were named together, whichever held the id)."""
    with pytest.raises(dk.ParameterError, match=rf"reasoning_budget: {said}, outside the vocabulary of"):
        dk.generate(tiny_gpt(), [[1]], chain=chain, max_new_tokens=2)


@pytest.mark.xdist_group("compile")
def test_a_compiled_decode_forces_as_an_eager_one() -> None:
    """The states are host-side Python (`eager`: one graph break a step): compiled, the same tokens."""
    model, chain = tiny_gpt(), f"{BIASED} | reasoning_budget(3, [{START}], [{END}]) | temperature(0.8) | sample"
    eager = dk.generate(model, [[1, 2, 3], [4, 5]], chain=chain, max_new_tokens=16, seed=2)
    compiled = dk.generate(model, [[1, 2, 3], [4, 5]], chain=chain, max_new_tokens=16, seed=2, compile=True)
    assert compiled.tokens == eager.tokens
    assert any(length == 3 for row in eager.tokens for length in blocks(row))  # a block ran into its budget
