"""A grammar under speculative decoding and beam search. Speculative: greedy gives `dk.generate`'s tokens
(drafts that a grammar state advanced over are rejected all the time), and sampled tokens have
`dk.generate`'s joint distribution (a two-sample chi-square over 2,000 seeded rows, which can fail). Beam
search: every returned beam is a complete, valid text; beams of prompts with different grammars."""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

import jsonschema
import pytest
from decodekit_beam.search import beam_search
from decodekit_speculative.strategy import SpeculativeGeneration
from draws import two_sample_p

import decodekit as dk

PROMPTS = ["ROMEO:\n", "JULIET:\nO Romeo, Romeo! wherefore art thou Romeo?\nROMEO:\n", "NURSE:\n"]
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "who": {"type": "string", "pattern": "^[A-Z][a-z]{1,7}$"},
        "says": {"type": "array", "maxItems": 3, "items": {"enum": ["ay", "no", "thou", "thee"]}},
        "act": {"type": "integer", "minimum": 1, "maximum": 5},
    },
    "required": ["who", "says", "act"],
    "additionalProperties": False,
}
PATTERN = r"(thou|thee|the|my|mine|sir|so) [a-z]{1,6}( [a-z]{1,6})?[.!?]"
GREEDY_CHAINS = {
    "json_schema": dk.Chain([dk.create("json_schema", schema=SCHEMA)], dk.create("greedy")),
    "regex": dk.Chain([dk.create("regex", pattern=PATTERN)], dk.create("greedy")),
    "penalised json": dk.Chain([dk.create("repetition_penalty", penalty=1.3), dk.create("json")], dk.create("greedy")),
}


@pytest.mark.parametrize("draft", ["tiny-shakespeare-draft", "ngram"])
@pytest.mark.parametrize("which", list(GREEDY_CHAINS))
def test_speculative_greedy_gives_generates_tokens(shakespeare: Any, which: str, draft: str) -> None:
    chain = GREEDY_CHAINS[which]
    plain = dk.generate(shakespeare, PROMPTS, chain=chain, max_new_tokens=60)
    spec = dk.decode(shakespeare, PROMPTS, strategy=f"speculative(draft={draft}, k=4)", chain=chain, max_new_tokens=60)
    assert spec.tokens == plain.tokens
    assert spec.finish_reasons == plain.finish_reasons and spec.stopped_by == plain.stopped_by
    if (which, draft) != ("regex", "ngram"):  # (short lines: no n-gram of theirs repeats, nothing drafted)
        assert isinstance(spec, SpeculativeGeneration)
        assert sum(spec.accepted) < sum(spec.drafted)  # drafts were rejected: their grammar states abandoned
    if which != "penalised json":
        assert set(spec.stopped_by) == {chain.processors[0].name}  # type: ignore[attr-defined]  # a grammar stage


ROWS = 2000
SAMPLED = dk.Chain([dk.create("regex", pattern=PATTERN), dk.create("temperature", value=1.0)])


def joint(tokens: list[list[int]]) -> Counter[tuple[int, ...]]:
    return Counter(tuple(t[:4]) for t in tokens)


# Four tokens are rarely a whole line: the rows end at max_new_tokens, and the engine's warning says so.
pytestmark = pytest.mark.filterwarnings("ignore:.*rows ended with regex incomplete:UserWarning")


@pytest.fixture(scope="module")
def plain_sampled(shakespeare: Any) -> Counter[tuple[int, ...]]:
    return joint(dk.generate(shakespeare, [PROMPTS[0]] * ROWS, chain=SAMPLED, max_new_tokens=4, seed=1).tokens)


@pytest.mark.slow
@pytest.mark.xdist_group("grammar-sampled")  # the two tests of plain_sampled in one worker: it is drawn once
def test_speculative_sampling_has_generates_distribution(
    shakespeare: Any, plain_sampled: Counter[tuple[int, ...]]
) -> None:
    out = dk.decode(
        shakespeare,
        [PROMPTS[0]] * ROWS,
        strategy="speculative(draft=tiny-shakespeare-draft, k=3)",
        chain=SAMPLED,
        max_new_tokens=4,
        seed=2,
    )
    assert isinstance(out, SpeculativeGeneration)
    assert 0.1 * sum(out.drafted) < sum(out.accepted) < sum(out.drafted)  # accepts and rejects
    assert len(plain_sampled) > 20  # a spread of four-token beginnings
    assert two_sample_p(joint(out.tokens), plain_sampled) > 1e-3


@pytest.mark.slow
@pytest.mark.xdist_group("grammar-sampled")
def test_the_chi_square_can_fail(shakespeare: Any, plain_sampled: Counter[tuple[int, ...]]) -> None:
    """The draft model's own distribution under the same grammar differs, and the test sees it."""
    draft = dk.load_model("tiny-shakespeare-draft")
    wrong = joint(dk.generate(draft, [PROMPTS[0]] * ROWS, chain=SAMPLED, max_new_tokens=4, seed=3).tokens)
    assert two_sample_p(wrong, plain_sampled) < 1e-6


def test_beam_search_returns_only_valid_beams(shakespeare: Any) -> None:
    chain = dk.Chain([dk.create("json_schema", schema=SCHEMA)])
    out = beam_search(
        shakespeare,
        PROMPTS[:2],
        num_beams=4,
        num_return_sequences=4,
        early_stopping=True,
        chain=chain,
        max_new_tokens=90,
    )
    validator = jsonschema.Draft202012Validator(SCHEMA)
    for b, beams in enumerate(out.sequences):
        assert len(beams) == 4
        for tokens in beams:
            assert validator.is_valid(json.loads(shakespeare.tokenizer.decode(tokens)))
        assert out.finish_reasons[b] == "stop" and out.stopped_by[b] == "json_schema"


def test_beam_search_with_a_grammar_per_prompt(shakespeare: Any) -> None:
    chain = dk.Chain([dk.create("regex", pattern=[PATTERN, r"[A-Z]{2,4}![0-9]"])])
    out = beam_search(shakespeare, PROMPTS[:2], num_beams=3, num_return_sequences=3, chain=chain, max_new_tokens=40)
    texts = [[shakespeare.tokenizer.decode(t) for t in beams] for beams in out.sequences]
    assert all(re.fullmatch(PATTERN, t) for t in texts[0]), texts[0]
    assert all(re.fullmatch(r"[A-Z]{2,4}![0-9]", t) for t in texts[1]), texts[1]


@pytest.mark.parametrize("strategy", ["sample", "beam(num_beams=2)", "speculative(draft='ngram', k=2)"])
@pytest.mark.parametrize("patterns", [["a", "b", "c"], ["a", "b", "c", "d"]])
def test_a_list_of_grammars_not_one_per_prompt_is_refused_under_every_strategy(
    shakespeare: Any, strategy: str, patterns: list[str]
) -> None:
    """Beam search and speculative decoding tell the stage only which prompt a row serves: a list longer than
    the prompts went unnoticed there (the grammars left over ignored)."""
    chain = dk.Chain([dk.create("regex", pattern=patterns)], dk.create("greedy"))
    message = rf"^regex: {len(patterns)} grammars \(pattern\) for 2 prompts; allowed: one grammar, or one per prompt$"
    with pytest.raises(dk.ParameterError, match=message):
        dk.decode(shakespeare, ["A:", "B:"], strategy=strategy, chain=chain, max_new_tokens=2)


def test_speculative_decoding_with_many_drafts_advances_each_row_a_token_at_a_time(
    shakespeare: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """8 rows drafting k=12 tokens a round touch ~100 prefixes a round, more than the 64 parse states held at first:
    each row's parent was evicted, and rebuilding it held every prefix rebuilt, evicting the other rows' states in
    turn (208,642 advances for 8 x 150 tokens, quadratic in the length). The held states now grow to what a round
    touches, and a rebuild holds only its last state."""
    from decodekit_grammar import llguidance_engine

    advances = [0]
    advance = llguidance_engine._Matcher.advance

    def counted(self: Any, token: int) -> Any:
        advances[0] += 1
        return advance(self, token)

    monkeypatch.setattr(llguidance_engine._Matcher, "advance", counted)
    prompts = ["ROMEO:", "JULIET:", "KING:", "HAMLET: O", "First", "Second Citizen", "A", "QUEEN MARGARET:"]
    strategy = "speculative(draft=tiny-shakespeare-draft, k=12)"
    out = dk.decode(shakespeare, prompts, strategy=strategy, chain="regex(pattern='[a-z ,.]*') | sample",
                    seed=list(range(8)), max_new_tokens=150)  # fmt: skip
    generated = sum(len(t) for t in out.tokens)
    assert generated == 8 * 150
    assert advances[0] <= 13 * generated  # one advance per new prefix: k + 1 a round, a round emits 1 token or more
