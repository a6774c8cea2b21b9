"""reasoning_budget: hand-worked sequences, the state machine against a re-implementation of llama.cpp's
`common_reasoning_budget_accept` / `_apply` and `common_utf8_is_complete` (written from its source, mutable as
there), and the stage in the decode loop under sampling, speculative decoding and beam search."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest
import torch
from decodekit_beam.search import BeamGeneration
from decodekit_constraints.params import ReasoningBudgetParams
from decodekit_constraints.reasoning_budget import ReasoningBudget
from decodekit_constraints.utf8 import ends_a_character
from decodekit_gpt.gpt import GPT, GPTConfig

import decodekit as dk
from decodekit.prompts import Tokenizer


class ByteTokens:
    """A byte-level tokenizer: id i is `pieces[i]` (None: a special token, no text)."""

    def __init__(self, pieces: Sequence[bytes | None]) -> None:
        self.pieces = list(pieces)

    def token_bytes(self) -> list[bytes | None]:
        return self.pieces

    def encode(self, text: str) -> list[int]:
        raise NotImplementedError("the prompts here are ids")

    def decode(self, ids: Sequence[int]) -> str:
        return b"".join(self.pieces[i] or b"" for i in ids).decode("utf-8", errors="replace")


def forced_after(params: dict[str, object], tokens: list[int], tokenizer: Tokenizer | None = None) -> int | None:
    """The token the stage forces after generating `tokens` (None: it removes nothing), over 16 ids."""
    stage = ReasoningBudget(ReasoningBudgetParams.model_validate(params))
    ctx = dk.DecodeContext(tokens=torch.tensor([[0, *tokens]]), step=len(tokens), tokenizer=tokenizer)
    kept = stage(torch.zeros(1, 16), ctx)[0].isfinite().nonzero().view(-1).tolist()
    return kept[0] if len(kept) == 1 else None


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


# The emoji U+1F600 is F0 9F 98 80 in UTF-8; a byte-level BPE may split it across tokens.
EMOJI_PIECES = {
    10: b"\xf0\x9f",  # its lead byte and one continuation byte
    11: b"\x98",  # one more continuation byte
    12: b"\x80",  # its last byte alone: continuation bytes only
    13: b"\x98\x80!",  # its last two bytes, then "!"
    14: b"\x80!",  # its last byte, then "!"
    15: b"\xf0\x9f\x98\x80",  # the whole character
}
EMOJI_TOKENS = ByteTokens([EMOJI_PIECES.get(i, b"a") for i in range(16)])


def test_a_budget_that_runs_out_inside_a_character_waits_for_a_token_that_ends_one() -> None:
    """llama.cpp (`REASONING_BUDGET_WAITING_UTF8`): the end is forced only after a token whose own bytes end a
    whole character; the forced tokens followed at once before."""
    p = {"budget": 2, "start": [7], "end": [8]}
    assert forced_after(p, [7, 1, 15], EMOJI_TOKENS) == 8  # the block's last token is a whole character
    # Split over 2 tokens: waiting after the first, forcing after the second.
    assert [forced_after(p, [7, 1, 10, 13][:n], EMOJI_TOKENS) for n in (3, 4)] == [None, 8]
    # Split over 3 tokens.
    assert [forced_after(p, [7, 1, 10, 11, 14][:n], EMOJI_TOKENS) for n in (3, 4, 5)] == [None, None, 8]
    # A token of continuation bytes alone counts as unfinished, though it completes the character: as llama.cpp
    # judges each token by its own bytes, the wait ends one token later.
    assert [forced_after(p, [7, 1, 10, 11, 12, 1][:n], EMOJI_TOKENS) for n in (5, 6)] == [None, 8]
    assert forced_after(p, [7, 1, 10, 8], EMOJI_TOKENS) is None  # the block ended while waiting: done
    assert forced_after(p, [7, 1, 10]) == 8  # ids only (no tokenizer): nothing to wait for


class TextOnly:
    """A tokenizer without `token_bytes()`."""

    def encode(self, text: str) -> list[int]:
        raise NotImplementedError("the prompts here are ids")

    def decode(self, ids: Sequence[int]) -> str:
        return "a" * len(ids)


class RefusesBytes(ByteTokens):
    """`HFTokenizer`'s refusal, for a decoder that does not spell each token alone (WordPiece's)."""

    def token_bytes(self) -> list[bytes | None]:
        raise dk.ParameterError("HFTokenizer.token_bytes: the decoder 'WordPiece' does not spell each token alone")


@pytest.mark.parametrize("tokenizer", [TextOnly(), RefusesBytes(EMOJI_TOKENS.pieces)], ids=["text only", "refuses"])
def test_a_tokenizer_that_cannot_state_its_bytes_counts_as_ids_only(tokenizer: Tokenizer) -> None:
    """The end is forced at once, as with no tokenizer, and nothing is raised: the bytes only refine the budget."""
    assert forced_after({"budget": 2, "start": [7], "end": [8]}, [7, 1, 10], tokenizer) == 8


@pytest.mark.parametrize(
    ("piece", "complete"),
    [  # llama.cpp's tests/test-reasoning-budget.cpp, test_utf8_boundary_detection
        (b"hello", True),
        (b"", True),
        (b"\xc2\xa0", True),
        (b"\xe2\x80\x9c", True),
        (b"\xf0\x9f\x98\x80", True),
        (b"abc\xc3\xa9", True),
        (b"\xc2", False),
        (b"\xe2\x80", False),
        (b"\xe2", False),
        (b"\xf0\x9f\x98", False),
        (b"\xf0\x9f", False),
        (b"\xf0", False),
        (b"\x80", False),  # an orphan continuation byte
        (b"hello\xc3", False),
        (b"hello\xc3\xa9", True),
    ],
)
def test_a_piece_ends_a_character_as_llama_cpp_says(piece: bytes, complete: bool) -> None:
    assert ends_a_character(piece) is complete


def utf8_is_complete(s: bytes) -> bool:
    """llama.cpp's `common_utf8_is_complete` (common/unicode.cpp), as written there."""
    if not s:
        return True
    for i in range(1, min(4, len(s)) + 1):
        c = s[len(s) - i]
        if (c & 0xC0) != 0x80:
            expected = 4 if c >= 0xF0 else 3 if c >= 0xE0 else 2 if c >= 0xC0 else 1
            return i >= expected
    return False


class LlamaCppReasoningBudget:
    """llama.cpp's sampler as its source has it: `accept` per token, `forced` what `apply` keeps. `vocab`: each
    token's piece (`common_token_to_piece` without specials: None renders as nothing), None as a null vocab."""

    def __init__(
        self,
        budget: int,
        start: list[int],
        end: list[int],
        forced: list[int],
        counting: bool,
        vocab: Sequence[bytes | None] | None = None,
    ) -> None:
        self.budget, self.start, self.end, self.forced_tokens, self.vocab = budget, start, end, forced, vocab
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
        elif self.state in ("counting", "waiting_utf8"):
            self.end_pos, hit = self.advance(self.end, self.end_pos, token)
            if hit:
                self.state = "done"
                return
            utf8_complete = True
            if self.vocab is not None:
                utf8_complete = utf8_is_complete(self.vocab[token] or b"")
            if self.state == "waiting_utf8":
                if utf8_complete:
                    self.state, self.force_pos, self.end_pos = "forcing", 0, 0
            else:
                self.remaining -= 1
                if self.remaining <= 0:
                    if utf8_complete:
                        self.state, self.force_pos, self.end_pos = "forcing", 0, 0
                    else:
                        self.state, self.end_pos = "waiting_utf8", 0
        else:
            self.force_pos += 1
            if self.force_pos >= len(self.forced_tokens):
                self.state = "done"

    def forced(self) -> int | None:
        if self.state == "forcing" and self.force_pos < len(self.forced_tokens):
            return self.forced_tokens[self.force_pos]
        return None


# Pieces for the random vocabularies: whole characters, a character's start, its tail alone, its tail and more.
PIECES = [b"a", b"", None, b"\xc3\xa9", b"\xc3", b"\xf0\x9f", b"\x98", b"\x80", b"\x80!", b"\xe2\x80\x9c"]


@pytest.mark.parametrize("seed", range(60))
def test_the_state_machine_matches_llama_cpp_on_random_streams(seed: int) -> None:
    """Token streams over a 6-token vocabulary, so starts, ends and partial matches happen often, of random
    bytes (none: ids only), so budgets run out inside characters; whenever a token is forced the stream takes it
    (as a decode does)."""
    rng = random.Random(seed)
    start = [rng.randrange(6) for _ in range(rng.randint(1, 3))]
    end = [rng.randrange(6) for _ in range(rng.randint(1, 3))]
    forced = [rng.randrange(6) for _ in range(rng.randint(1, 3))] if rng.random() < 0.5 else None
    budget, counting = rng.randint(0, 5), rng.random() < 0.3
    vocab = [rng.choice(PIECES) for _ in range(6)] if rng.random() < 0.7 else None
    params = {"budget": budget, "start": start, "end": end, "forced": forced, "open": counting}
    theirs = LlamaCppReasoningBudget(budget, start, end, end if forced is None else forced, counting, vocab)
    tokenizer = None if vocab is None else ByteTokens(vocab)
    tokens: list[int] = []
    for _ in range(60):
        want = theirs.forced()
        assert forced_after(params, tokens, tokenizer) == want, (params, vocab, tokens)
        token = rng.randrange(6) if want is None else want
        theirs.accept(token)
        tokens.append(token)


def tiny_gpt(tokenizer: ByteTokens | None = None) -> GPT:
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=50, block_size=128, n_layer=1, n_head=2, n_embd=16)).eval()
    if tokenizer is not None:
        model.tokenizer = tokenizer  # type: ignore[assignment]
    return model


START, END = 7, 8
# Biased towards opening and against closing, so blocks open early and run into their budget.
BIASED = f"logit_bias({{{START}: 4.0, {END}: -4.0}})"
# Bytes for the tiny model's 50 ids: 10-29 start a 4-byte character, 30-49 continue one, START and END are
# special (no text), the rest whole: most tokens leave a character unfinished, so a block often waits.
SPLIT = ByteTokens(
    [None if i in (START, END) else b"a" if i < 10 else b"\xf0" if i < 30 else b"\x80" for i in range(50)]
)


def follows_llama_cpp(row: list[int], budget: int, tokenizer: ByteTokens | None) -> bool:
    """Whether `row` takes every token llama.cpp's sampler forces on it (start [START], end [END])."""
    vocab = None if tokenizer is None else tokenizer.pieces
    theirs = LlamaCppReasoningBudget(budget, [START], [END], [END], False, vocab)
    for token in row:
        if theirs.forced() not in (None, token):
            return False
        theirs.accept(token)
    return True


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


def test_a_decode_waits_for_a_whole_character_as_llama_cpp_does() -> None:
    """With a tokenizer whose tokens split characters, a block runs past its budget until a token ends a whole
    character (the end was forced at once before: no block was longer than 3), and every token llama.cpp forces
    is taken."""
    chain = f"{BIASED} | reasoning_budget(3, [{START}], [{END}]) | temperature(0.8) | sample"
    out = dk.generate(tiny_gpt(SPLIT), [[1, 2, 3], [4, 5], [6]], chain=chain, max_new_tokens=40, seed=3)
    assert all(follows_llama_cpp(row, 3, SPLIT) for row in out.tokens)
    assert any(length > 3 for row in out.tokens for length in blocks(row))


@pytest.mark.parametrize("tokenizer", [None, SPLIT], ids=["ids", "bytes"])
def test_speculative_decoding_and_beam_search_keep_the_budget(tokenizer: ByteTokens | None) -> None:
    """A row's state is a function of its tokens: speculative decoding gives greedy decoding's tokens exactly,
    and every row, beams too, takes what llama.cpp forces (with SPLIT's bytes, after waits past the budget)."""
    # No START after START, so a block holds other tokens, most of which SPLIT's bytes leave unfinished.
    budgeted = f"{BIASED} | bad_words([[{START}, {START}]]) | reasoning_budget(3, [{START}], [{END}])"
    model = tiny_gpt(tokenizer)
    plain = dk.generate(model, [[1, 2, 3], [4, 5]], chain=f"{budgeted} | greedy", max_new_tokens=30)
    drafted = dk.decode(model, [[1, 2, 3], [4, 5]], strategy="speculative", draft="ngram",
                        chain=f"{budgeted} | greedy", max_new_tokens=30)  # fmt: skip
    assert drafted.tokens == plain.tokens
    beams = dk.decode(model, [[1, 2, 3]], strategy="beam", num_beams=3, num_return_sequences=3, chain=budgeted,
                      max_new_tokens=20)  # fmt: skip
    assert isinstance(beams, BeamGeneration)
    rows = [*plain.tokens, *beams.sequences[0]]
    assert all(follows_llama_cpp(row, 3, tokenizer) for row in rows)
    longest = max(length for row in rows for length in blocks(row))
    assert longest > 3 if tokenizer else longest == 3


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

    def counted(self: rb.Budget, token: int, p: ReasoningBudgetParams, unfinished: frozenset[int]) -> rb.Budget:
        steps[0] += 1
        return after(self, token, p, unfinished)

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
    """The states are host-side Python (`eager`: one graph break a step), the tokenizer's bytes read there too:
    compiled, the same tokens."""
    chain = f"{BIASED} | reasoning_budget(3, [{START}], [{END}]) | temperature(0.8) | sample"
    model = tiny_gpt(SPLIT)
    eager = dk.generate(model, [[1, 2, 3], [4, 5]], chain=chain, max_new_tokens=16, seed=2)
    compiled = dk.generate(model, [[1, 2, 3], [4, 5]], chain=chain, max_new_tokens=16, seed=2, compile=True)
    assert compiled.tokens == eager.tokens
    assert any(length > 3 for row in eager.tokens for length in blocks(row))  # a block waited past its budget
