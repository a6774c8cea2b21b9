"""The grammar stages on hand-worked cases: which tokens a row may take, when it ends, when an end is forced,
rows with different grammars, a row's mask as a function of its tokens alone, and bad grammars."""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
import warnings
from collections.abc import Sequence
from typing import Any

import pytest
import torch
from char_tokenizer import Chars
from decodekit_grammar.stages import GrammarStage

import decodekit as dk

WITH_EOS = Chars('ab{}":,0123456789 ')


def ctx_for(tokenizer: Any, texts: Sequence[str], prompt_index: Sequence[int] | None = None) -> dk.DecodeContext:
    """A context whose rows generated `texts` (equal lengths) after a one-token prompt."""
    rows = [[1, *tokenizer.encode(t)] for t in texts]
    step = len(rows[0]) - 1
    return dk.DecodeContext(tokens=torch.tensor(rows), step=step, tokenizer=tokenizer, prompt_index=prompt_index)


def allowed(stage: Any, tokenizer: Any, text: str, vocab_size: int) -> str:
    """The characters (and `<eos>`) the stage lets follow `text`."""
    keep = stage.allowed(ctx_for(tokenizer, [text]), vocab_size)[0]
    return "".join(tokenizer.decode([i]) for i in keep.nonzero().flatten().tolist())


def test_a_regex_allows_what_continues_a_match(shakespeare: Any) -> None:
    tok = shakespeare.tokenizer
    stage = dk.create("regex", pattern="ab|ac|b[0-2]")
    assert allowed(stage, tok, "", 84) == "ab"
    assert allowed(stage, tok, "a", 84) == "bc"
    assert allowed(stage, tok, "b", 84) == "012"
    assert stage.ends_row(0, tok.encode("a")) is None
    assert stage.ends_row(0, tok.encode("ac")) == "regex"


def test_a_complete_grammar_without_an_end_token_constrains_nothing_further(shakespeare: Any) -> None:
    """tiny-shakespeare has no end-of-text token: the row ends by `ends_row`; past it (a speculative draft
    looks ahead) every token is left."""
    stage = dk.create("regex", pattern="ab")
    assert len(allowed(stage, shakespeare.tokenizer, "ab", 84)) == 84


def test_an_end_token_is_allowed_once_the_text_matches_and_forced_once_nothing_else_can_follow() -> None:
    stage = dk.create("regex", pattern="a+b?")
    V = len(WITH_EOS.alphabet) + 1
    assert allowed(stage, WITH_EOS, "", V) == "a"
    assert allowed(stage, WITH_EOS, "a", V) == "<eos>ab"  # a sentence already: the end token may come
    assert allowed(stage, WITH_EOS, "aab", V) == "<eos>"  # complete: the end is forced
    assert stage.ends_row(0, WITH_EOS.encode("aa")) is None
    assert stage.ends_row(0, WITH_EOS.encode("aab")) == "regex"
    assert stage.ends_row(0, [*WITH_EOS.encode("aa"), 0]) == "regex"  # the end token ends the grammar too


def test_a_tokenizer_whose_end_tokens_are_none_has_none() -> None:
    """None is transformers' way to say a tokenizer has no end token: the grammar's table raised TypeError ('NoneType'
    object is not iterable); it constrains as a tokenizer without the member does, and other values are refused."""
    none, absent = Chars("ab"), Chars("ab")
    none.eos_token_ids = None  # type: ignore[assignment]
    absent.eos_token_ids = ()
    stage = dk.create("regex", pattern="a+b?")
    # no end token to allow or force: a complete text leaves every id (0 included, which has no bytes here)
    assert [allowed(stage, none, text, 3) for text in ("", "a", "ab")] == ["a", "ab", "<eos>ab"]
    assert [allowed(stage, absent, text, 3) for text in ("", "a", "ab")] == ["a", "ab", "<eos>ab"]
    broken = Chars("ba")  # another alphabet: a fresh token table
    broken.eos_token_ids = "0"  # type: ignore[assignment]
    with pytest.raises(dk.PluginError, match=r"eos_token_ids='0' is invalid; allowed: a sequence of int token ids"):
        allowed(stage, broken, "", 3)


def test_a_character_the_vocabulary_lacks_is_never_skipped(shakespeare: Any) -> None:
    """tiny-shakespeare has no "<" and no "ï": where the grammar needs one, no token of the vocabulary may
    follow (not the character after it, which llguidance's tokenizing of the bytes it forces would give)."""
    tok = shakespeare.tokenizer
    assert allowed(dk.create("regex", pattern="a<b|ac"), tok, "a", 84) == "c"
    assert allowed(dk.create("regex", pattern="a<b"), tok, "a", 84) == ""
    assert allowed(dk.create("json_schema", schema={"const": "naïve"}), tok, '"na', 84) == ""
    out = dk.generate(shakespeare, ["ROMEO:\n"], chain="regex(pattern='x#y|xz') | greedy", max_new_tokens=3)
    assert out.text == ["xz"] and out.stopped_by == ["regex"]


def test_json_schema_masks_follow_the_schema() -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"enum": [1, 22]}},
        "required": ["a"],
        "additionalProperties": False,
    }
    stage = dk.create("json_schema", schema=schema)
    V = len(WITH_EOS.alphabet) + 1
    assert allowed(stage, WITH_EOS, "", V) == "{"
    assert allowed(stage, WITH_EOS, '{"a":', V) == "12"
    assert allowed(stage, WITH_EOS, '{"a":2', V) == "2"
    assert allowed(stage, WITH_EOS, '{"a":22}', V) == "<eos>"
    flexible = dk.create("json_schema", schema=schema, whitespace="flexible")
    assert allowed(flexible, WITH_EOS, '{"a":', V) == "12 "  # whitespace between tokens


def test_json_allows_any_value() -> None:
    V = len(WITH_EOS.alphabet) + 1
    stage = dk.create("json")
    assert set(allowed(stage, WITH_EOS, "", V)) == set('{"0123456789')  # (no '-', 't', 'f', 'n', '[' here)
    assert stage.ends_row(0, WITH_EOS.encode('{"a":1')) is None
    assert stage.ends_row(0, WITH_EOS.encode('{"a":"b"}')) == "json"


def test_a_lark_grammar() -> None:
    lark = 'start: "{" pair ("," pair)* "}"\npair: KEY ":" NUM\nKEY: /[ab]/\nNUM: /[0-9]/'
    stage = dk.create("grammar", lark=lark)
    V = len(WITH_EOS.alphabet) + 1
    assert allowed(stage, WITH_EOS, "{", V) == "ab"
    assert allowed(stage, WITH_EOS, "{a:1", V) == "},"
    assert stage.ends_row(0, WITH_EOS.encode("{a:1,b:2}")) == "grammar"


def test_rows_with_different_grammars_in_one_batch(shakespeare: Any) -> None:
    tok = shakespeare.tokenizer
    stage = dk.create("regex", pattern=["a", "b+", None])
    keep = stage.allowed(ctx_for(tok, ["", "", ""]), 84)
    assert [tok.decode(row.nonzero().flatten().tolist()) for row in keep[:2]] == ["a", "b"]
    assert bool(keep[2].all())  # None: that prompt is unconstrained
    beams = stage.allowed(ctx_for(tok, ["", "", "", ""], prompt_index=[1, 1, 0, 0]), 84)  # two beams of each
    assert [tok.decode(row.nonzero().flatten().tolist()) for row in beams] == ["b", "b", "a", "a"]
    assert stage.ends_row(0, tok.encode("a")) == "regex" and stage.ends_row(1, tok.encode("bb")) is None
    with pytest.raises(dk.ParameterError, match=r"regex: 3 grammars \(pattern\) for 4 prompts; allowed: one"):
        stage.allowed(ctx_for(tok, ["", "", "", ""]), 84)
    with pytest.raises(dk.ParameterError, match=r"regex: 3 grammars \(pattern\) for a batch with a prompt 3"):
        stage.allowed(ctx_for(tok, ["", "", "", ""], prompt_index=[0, 1, 2, 3]), 84)


def test_a_list_of_grammars_that_is_not_one_per_prompt_is_refused(shakespeare: Any) -> None:
    """A grammar left over means the list and the prompts are misaligned: refused, as a list too short is."""
    with pytest.raises(dk.ParameterError, match=r"^regex: 3 grammars \(pattern\) for 2 prompts; allowed: one"):
        dk.generate(shakespeare, ["A:", "B:"], chain="regex(pattern=['a', 'b', 'c']) | greedy", max_new_tokens=2)
    with pytest.raises(dk.ParameterError, match=r"^json_schema: schema=\[\] is invalid; allowed: one grammar, or a"):
        dk.create("json_schema", schema=[])


def test_a_stage_shared_by_threads_ends_each_threads_rows_by_its_own_tokenizer() -> None:
    """A row's end is answered for the vocabulary its decode's last step used, not another thread's."""
    import threading

    ab, ba = Chars("ab"), Chars("ba")
    stage = dk.create("regex", pattern="ab")
    stage.allowed(ctx_for(ab, ["a"]), 3)  # this thread decodes with `ab`...
    other = threading.Thread(target=stage.allowed, args=(ctx_for(ba, ["a"]), 3))  # ...another with `ba`
    other.start()
    other.join()
    assert stage.ends_row(0, ab.encode("ab")) == "regex"
    assert stage.unfinished(0, ab.encode("ab")) is None


def test_generate_with_a_grammar_per_prompt(shakespeare: Any) -> None:
    stage = dk.create("regex", pattern=["[A-Z]{3}!", "[a-z]{2} [0-9]{2}\\.", None])
    chain = dk.Chain([stage, dk.create("temperature", value=0.9)])
    out = dk.generate(shakespeare, ["ROMEO:", "JULIET:", "NURSE:"], chain=chain, max_new_tokens=12, seed=0)
    import re

    assert out.text is not None
    assert re.fullmatch("[A-Z]{3}!", out.text[0]) and re.fullmatch("[a-z]{2} [0-9]{2}\\.", out.text[1])
    assert out.stopped_by[:2] == ["regex", "regex"] and out.finish_reasons[2] == "length"


@pytest.mark.xdist_group("compile")  # the compiling tests in one worker: inductor starts once, reuses its kernels
def test_compile_gives_the_eager_tokens(shakespeare: Any) -> None:
    """Under `compile=True` the mask runs outside the graph (the parser reads each row's tokens on the host)."""
    chain = "regex(pattern=['[A-Z]{3}!', '[a-z]{2} [0-9]{2}\\\\.']) | temperature(0.9)"
    eager = dk.generate(shakespeare, ["ROMEO:", "JULIET:"], chain=chain, max_new_tokens=8, seed=0)
    compiled = dk.generate(shakespeare, ["ROMEO:", "JULIET:"], chain=chain, max_new_tokens=8, seed=0, compile=True)
    assert compiled.tokens == eager.tokens and eager.stopped_by == ["regex", "regex"]


def random_walks(stage: GrammarStage[Any], tokenizer: Any, vocab_size: int, seed: int, n: int = 40) -> list[list[int]]:
    """Token sequences the grammar allows, grown, branched and cut back at random."""
    rng = random.Random(seed)
    seqs: list[list[int]] = [[]]
    for _ in range(n):
        base = list(rng.choice(seqs))
        if base and rng.random() < 0.3:
            base = base[: rng.randrange(len(base))]  # back to a prefix: a rejected draft, another beam
        keep = stage.allowed(ctx_for(tokenizer, [tokenizer.decode(base)] if base else [""]), vocab_size)[0]
        options = keep.nonzero().flatten().tolist()
        if options:
            seqs.append([*base, rng.choice(options)])
    return seqs


@pytest.mark.parametrize("capacity", [4096, 3])
def test_a_rows_mask_depends_on_its_tokens_alone(
    shakespeare: Any, capacity: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Asked for sequences in any order (extensions, branches, prefixes again, rows reordered), with a memo
    of 3 states (so most are rebuilt: kept from growing) or a large one, the mask is that of a fresh stage for the
    sequence."""
    from decodekit_grammar import matchers

    monkeypatch.setattr(matchers, "MAX_HELD", min(capacity, matchers.MAX_HELD))
    tok = shakespeare.tokenizer
    schema = {"type": "object", "properties": {"w": {"type": "array", "items": {"enum": ["ab", "ba", "cc"]}}}}
    stage = dk.create("json_schema", schema=schema)
    seqs = random_walks(stage, tok, 84, seed=capacity)
    stage._latest.matchers[0].capacity = capacity  # type: ignore[union-attr]
    random.Random(1).shuffle(seqs)
    for seq in seqs:
        fresh = dk.create("json_schema", schema=schema)
        ctx = ctx_for(tok, [tok.decode(seq)])
        assert torch.equal(stage.allowed(ctx, 84), fresh.allowed(ctx, 84)), tok.decode(seq)
        assert stage.ends_row(0, seq) == fresh.ends_row(0, seq)
    if capacity == 3:
        assert len(stage._latest.matchers[0]) <= 8  # type: ignore[union-attr]


def test_a_token_the_grammar_forbids_empties_the_row_and_is_reported(shakespeare: Any) -> None:
    tok = shakespeare.tokenizer
    stage = dk.create("regex", pattern="[a-c]+")
    assert not bool(stage.allowed(ctx_for(tok, ["ax"]), 84).any())
    assert stage.unfinished(0, tok.encode("ax")) == "regex violated"
    assert stage.unfinished(0, tok.encode("ab")) is None  # a match, though more could follow
    assert dk.create("regex", pattern="[a-c]+!").unfinished(0, tok.encode("ab")) is None  # (no call yet: unknown)


@pytest.mark.parametrize(
    ("chain", "message"),
    [
        ("regex(pattern='')", r"^regex: the grammar cannot be used with this tokenizer: the only text of it the"),
        ("regex(pattern='a{0}')", r"^regex: .* the only text of it the tokenizer's tokens can spell is the empty one"),
        ("regex(pattern='(é)?')", r"^regex: .* the only text of it the tokenizer's tokens can spell is the empty one"),
        ("regex(pattern='é+')", r"^regex: .* no token of it can begin the text \(the grammar needs a character"),
        ("grammar(lark='start: \"\\u00e9!\"')", r"^grammar: .* no token of it can begin the text"),
        ("regex(pattern=['[a-z]{3}', 'é'])", r"^regex: the grammar \(prompt 1\) cannot be used with this tokenizer"),
    ],
)
def test_a_grammar_no_first_token_can_begin_is_refused_with_the_reason(
    shakespeare: Any, chain: str, message: str
) -> None:
    """tiny-shakespeare has no end-of-text token and no "é": a first step with no token left is known before it,
    by `dk.validate` too (a batch job's check of each line, before any model work)."""
    with pytest.raises(dk.ParameterError, match=message):
        dk.validate(shakespeare, ["ROMEO:\n", "JULIET:\n"], chain=f"{chain} | greedy", max_new_tokens=4)
    with pytest.raises(dk.ParameterError, match=message):
        dk.generate(shakespeare, ["ROMEO:\n", "JULIET:\n"], chain=f"{chain} | greedy", max_new_tokens=4)


def test_the_empty_text_under_a_tokenizer_with_an_end_token_forces_the_end() -> None:
    V = len(WITH_EOS.alphabet) + 1
    assert allowed(dk.create("regex", pattern=""), WITH_EOS, "", V) == "<eos>"


@pytest.mark.parametrize(
    ("chain", "message"),
    [
        ("regex(pattern='a{1000000}')", r"^regex: pattern cannot go on after 1 tokens: lexer error: .* \(a limit of"),
        ("grammar(lark='start: \"a\" b\\nb: c\\nc: b')", r"^grammar: lark cannot go on after 1 tokens: nothing can"),
    ],
)
def test_a_grammar_the_engine_gives_up_on_is_a_parameter_error_with_its_reason(
    shakespeare: Any, chain: str, message: str
) -> None:
    """llguidance stops at its lexer's and parser's limits once a token it allowed is parsed; the row must not
    be left an empty mask, whose `NumericsError` would not say why."""
    with pytest.raises(dk.ParameterError, match=message):
        dk.generate(shakespeare, ["ROMEO:\n"], chain=f"{chain} | greedy", max_new_tokens=4)


# Greedy lexemes back to back, the first able to take the second's first character: no text is a sentence, yet
# "a" may always follow. llguidance 1.9's forcing of bytes pushed "a" after "a" without end while it computed a mask.
_NO_SENTENCE = {
    "gbnf, first mask": r"""grammar(gbnf='root ::= x x\nx ::= [a]+')""",
    "lark, first mask": r"""grammar(lark='start: x "a"\nx: /a+/')""",
    "lark, after a token": r"""grammar(lark='start: x x | "b"\nx: /a+/')""",  # the first mask allows "a" or "b"
    "lark, a rule that never ends": r"""grammar(lark='start: "a" start')""",  # was "Too many items", forced
}
_GENERATE = """
import json, warnings
import decodekit as dk
model = dk.load_model("tiny-shakespeare")
a = model.tokenizer.encode("a")
warnings.simplefilter("ignore")
for grammar in json.loads(input()):
    out = dk.generate(model, ["ROMEO:\\n"], chain=f"{grammar} | allowed_tokens(tokens={a}) | greedy", max_new_tokens=5)
    print(json.dumps([out.text[0], out.finish_reasons[0]]), flush=True)
"""


def test_a_grammar_of_no_sentence_never_hangs_a_decode() -> None:
    """Such a grammar leaves a row "a" to take at each step, to `max_new_tokens`; in a subprocess, killed if it
    hangs (as it did, in llguidance's first mask or the one after "a")."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", _GENERATE], input=json.dumps(list(_NO_SENTENCE.values())), capture_output=True,
            text=True, timeout=60,
        )  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        finished = str(exc.stdout or b"", "utf-8").splitlines()
        pytest.fail(f"hung on {list(_NO_SENTENCE)[len(finished)]} after {len(finished)} decodes")
    assert done.returncode == 0, done.stderr
    assert [json.loads(line) for line in done.stdout.splitlines()] == [["aaaaa", "length"]] * len(_NO_SENTENCE)


def test_the_stage_keeps_no_per_generation_state(shakespeare: Any) -> None:
    stage = dk.create("json")
    assert stage.init_state(dk.DecodeContext(tokens=torch.tensor([[1]]), tokenizer=shakespeare.tokenizer)) is None


def test_a_grammar_unfinished_at_max_new_tokens_ends_with_length_and_a_warning(shakespeare: Any) -> None:
    chain = dk.Chain([dk.create("regex", pattern="[a-z]{20}!")], selector=dk.create("greedy"))
    with pytest.warns(UserWarning, match=r"^2 of 2 rows ended with regex incomplete: rows 0 \(length\), 1 \(length\)$"):
        out = dk.generate(shakespeare, ["ROMEO:", "JULIET:"], chain=chain, max_new_tokens=5)
    assert out.finish_reasons == ["length", "length"] and out.stopped_by == [None, None]


@pytest.mark.parametrize(
    ("chain", "message"),
    [
        (
            'json_schema(schema={"type": "object"}) | allowed_tokens(tokens=[40, 41])',
            r"step 0, row 0: cannot pick a token: every token was removed by the chain: stage 1 \(allowed_tokens\) "
            r"removed the \d+ left by stage 0 \(json_schema\)",
        ),
        (
            'allowed_tokens(tokens=[40, 41]) | json_schema(schema={"type": "object"})',
            r"every token was removed by the chain: stage 1 \(json_schema\) removed the 2 left by stage 0 "
            r"\(allowed_tokens\)",
        ),
    ],
)
def test_a_first_token_the_rest_of_the_chain_forbids_names_both_stages(
    shakespeare: Any, chain: str, message: str
) -> None:
    with pytest.raises(dk.NumericsError, match=message):
        dk.generate(shakespeare, ["ROMEO:"], chain=chain, max_new_tokens=4, seed=0)


def _deep(depth: int) -> dict[str, Any]:
    """An array of arrays, `depth` deep, of integers."""
    schema: dict[str, Any] = {"type": "integer"}
    for _ in range(depth):
        schema = {"type": "array", "items": schema}
    return schema


DEEP = _deep(3000)
DEEP_TEXT = '{"type": "array", "items": ' * 3000 + '{"type": "integer"}' + "}" * 3000


@pytest.mark.parametrize(
    ("name", "params", "message"),
    [
        ("json_schema", {"schema": {"type": "foo"}}, r"^json_schema: schema is invalid: .*foo"),
        ("json_schema", {"schema": "{not json"}, r"^json_schema: schema is invalid: not JSON: Expecting"),
        ("json_schema", {"schema": [{"type": "string"}, {"type": 3}]}, r"^json_schema: schema\[1\] is invalid"),
        (
            "regex",
            {"pattern": "a(b"},
            r'^regex: pattern is invalid: invalid regex "a\(b": regex parse error: unclosed group$',
        ),
        ("regex", {"pattern": "a^b"}, r'^regex: pattern is invalid: invalid regex "a\^b": lookarounds not supported'),
        (
            "grammar",
            {"lark": "start: /a(b/"},
            r"(?s)^grammar: lark is invalid: .*: regex parse error: unclosed group\n",
        ),
        (
            "json_schema",
            {"schema": {"type": "string", "pattern": "(?=a)"}},
            r"^json_schema: schema is invalid: regex parse error: look-around, including look-ahead and look-behind, "
            r"is not supported$",
        ),
        (
            "json_schema",
            {"schema": {"oneOf": [{"type": "integer"}, {"type": "number"}]}},
            r"^json_schema: schema is invalid: oneOf whose branches a value may satisfy together is not supported; "
            r"allowed: anyOf, or oneOf of branches no value satisfies together \(of different types, say\)$",
        ),
        ("grammar", {"lark": "start: foo"}, r'^grammar: lark is invalid: .*unknown name: "foo"'),
        ("json", {"whitespace": "some"}, r"^json: whitespace='some' is invalid"),
        ("json_schema", {"schema": "3"}, r"^json_schema: schema is invalid: 3 is not a JSON object; allowed"),
        ("json_schema", {"schema": 1}, r"^json_schema: schema=1 is invalid; allowed: "),  # not read as true
        ("json_schema", {"schema": [0]}, r"^json_schema: schema=\[0\] is invalid; allowed: "),
        ("json_schema", {"schema": "[]", "whitespace": "flexible"}, r"^json_schema: schema is invalid: \[\] is not"),
        ("json_schema", {"schema": '{"const": NaN}'}, r"^json_schema: schema is invalid: expected value"),
        ("json_schema", {"schema": {"const": float("nan")}}, r"^json_schema: schema is not JSON: Out of range float"),
        ("json_schema", {"schema": [None, {"enum": {1, 2}}]}, r"^json_schema: schema\[1\] is not JSON: .* type set"),
        # deeper than Python's json reads or writes: a RecursionError escaped, as a dict and as JSON text
        ("json_schema", {"schema": DEEP}, r"^json_schema: schema is nested too deeply: maximum recursion .*; allowed"),
        (
            "json_schema",
            {"schema": [None, DEEP_TEXT]},
            r"^json_schema: schema\[1\] is invalid: nested too deeply: maximum recursion depth .*; allowed",
        ),
    ],
)
def test_an_invalid_grammar_is_a_parameter_error_at_construction(name: str, params: Any, message: str) -> None:
    with pytest.raises(dk.ParameterError, match=message):
        dk.create(name, **params)


@pytest.mark.parametrize("schema", [True, "true", " true\n", [True]])
def test_the_boolean_schema_true_allows_any_json_value(schema: Any) -> None:
    """JSON Schema's `true` is valid under every value: the masks of `json` (and of `{}`)."""
    V = len(WITH_EOS.alphabet) + 1
    for text in ["", "{", '{"a":', "12", '"b"']:
        assert allowed(dk.create("json_schema", schema=schema), WITH_EOS, text, V) == allowed(
            dk.create("json"), WITH_EOS, text, V
        ), text


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        (False, r"^json_schema: schema=false matches no JSON value; allowed: "),
        ("false", r"^json_schema: schema=false matches no JSON value; allowed: "),
        ([{"type": "integer"}, False], r"^json_schema: schema\[1\]=false matches no JSON value; allowed: "),
    ],
)
def test_the_boolean_schema_false_is_refused_with_the_reason(schema: Any, message: str) -> None:
    """JSON Schema's `false` is valid under no value: no text could be generated, said when the stage is built."""
    with pytest.raises(dk.ParameterError, match=message):
        dk.create("json_schema", schema=schema)


def test_a_gbnf_grammar_given_as_lark_is_told_to_be_one_and_where_it_goes(shakespeare: Any) -> None:
    """llama.cpp's GBNF (`root ::= ...`) as lark= is refused with Lark's parser error and the parameter that takes it,
    gbnf=, which gives a grammar that runs."""
    gbnf = 'root ::= "thou " word | "thee " word\nword ::= [a-z] [a-z] [a-z]?'
    with pytest.raises(dk.ParameterError) as error:
        dk.create("grammar", lark=gbnf)
    assert str(error.value).startswith("grammar: lark is invalid: 1(7): Expected token")
    assert str(error.value).endswith(
        "; this reads as GBNF (llama.cpp's `root ::= ...`); allowed: a Lark grammar (rule `start`), or this one as "
        "gbnf= (grammar(gbnf=...); the command line reads a .gbnf file as GBNF)"
    )
    out = dk.generate(
        shakespeare, ["ROMEO:\n"] * 4, chain=f"grammar(gbnf={gbnf!r}) | temperature(1.0)", max_new_tokens=8, seed=0
    )
    assert out.text is not None and all(re.fullmatch("(thou|thee) [a-z]{2,3}", text) for text in out.text), out.text


def test_scoring_a_prompt_under_a_grammar_warns_of_no_unfinished_row(shakespeare: Any) -> None:
    """max_new_tokens=0 generates nothing: the row warned "ended with regex incomplete" of a text it never began."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = dk.generate(shakespeare, ["ROMEO:"], chain="regex(pattern='ab') | greedy", max_new_tokens=0)
    assert out.text == [""]
    stage = dk.create("regex", pattern="ab")
    stage.allowed(ctx_for(shakespeare.tokenizer, [""]), 84)  # the vocabulary `unfinished` answers in
    assert stage.unfinished(0, []) is None
    assert stage.unfinished(0, shakespeare.tokenizer.encode("a")) == "regex incomplete"  # one token in: it warns


def test_an_invalid_grammar_in_a_chain_string_fails_when_the_chain_is_built() -> None:
    with pytest.raises(dk.ParameterError, match=r"^regex: pattern is invalid"):
        dk.Chain.parse("regex(pattern='[a-') | temperature(0.7)")


def test_spec_round_trip_and_chain_string() -> None:
    chain = dk.Chain.parse('json_schema(schema={"type": "integer"}, whitespace=flexible) | temperature(0.7) | sample')
    assert dk.Chain.from_spec(chain.to_spec()) == chain
    assert dk.Chain.parse(str(chain)) == chain


BPE_SCHEMA = {
    "type": "object",
    "properties": {
        "who": {"type": "string", "pattern": "^[A-Z][a-z]{1,8}$"},
        "lines": {"type": "array", "maxItems": 2, "items": {"enum": ["But soft", "what light"]}},
        "act": {"type": "integer", "minimum": 1, "maximum": 5},
    },
    "required": ["who", "lines", "act"],
    "additionalProperties": False,
}


@pytest.mark.parametrize("which", ["bpe", "bpe50k"])
def test_generation_over_a_byte_level_bpe(request: pytest.FixtureRequest, which: str) -> None:
    """A random model over each BPE: valid JSON, tokens of several bytes, some across the grammar's lexemes."""
    import json

    import jsonschema

    from decodekit.testing.tiny_lm import TinyLM

    bpe = request.getfixturevalue(which)
    model = TinyLM(len(bpe.hf), dim=16, max_positions=256)
    model.tokenizer = bpe
    chain = dk.Chain([dk.create("json_schema", schema=BPE_SCHEMA), dk.create("temperature", value=1.0)])
    out = dk.generate(model, ["ROMEO:"] * 8, chain=chain, max_new_tokens=120, seed=0)
    assert out.stopped_by == ["json_schema"] * 8
    assert out.text is not None
    for text in out.text:
        jsonschema.validate(json.loads(text), BPE_SCHEMA)
    pieces = [bpe.decode([t]) for tokens in out.tokens for t in tokens]
    assert any(len(p) > 1 and '"' in p and p.strip('"') for p in pieces)  # e.g. ',"' or '":"' or '"who'


def test_the_end_token_is_forced_once_the_document_is_complete(bpe: Any) -> None:
    stage = dk.create("json_schema", schema=BPE_SCHEMA)
    done = bpe.encode('{"who":"Romeo","lines":["But soft"],"act":2}')
    ctx = dk.DecodeContext(tokens=torch.tensor([[1, *done]]), step=len(done), tokenizer=bpe)
    keep = stage.allowed(ctx, len(bpe.hf))[0]
    assert keep.nonzero().flatten().tolist() == [0]  # <|endoftext|> alone
    assert stage.ends_row(0, done) == "json_schema"


@pytest.mark.parametrize("strategy", ["sample", "beam(num_beams=2)"])
def test_the_end_token_a_grammar_ends_a_row_on_is_outside_its_text(bpe_model: Any, strategy: str) -> None:
    """The text was '10<|endoftext|>': like a stop token, the end token is the row's last token, not its text."""
    end_first = dk.create("logit_bias", bias={0: 50.0})  # <|endoftext|>, as soon as the grammar allows it
    chain = dk.Chain([end_first, dk.create("regex", pattern="[0-9]+")])
    out = dk.decode(bpe_model, ["x"], strategy=strategy, chain=chain, max_new_tokens=5, seed=0)
    tokens = out.tokens[0]
    assert len(tokens) == 2 and tokens[-1] == 0 and (out.finish_reasons, out.stopped_by) == (["stop"], ["regex"])
    assert out.text == [bpe_model.tokenizer.decode(tokens[:1])] and out.text[0].isdigit()
    events = list(dk.stream(bpe_model, ["x"], strategy=strategy, chain=chain, max_new_tokens=5, seed=0))
    assert "".join(e.text for e in events) == out.text[0] and events[-1].text == ""  # type: ignore[misc]  # all str


def selectors() -> list[str]:
    from decodekit.plugins import get_registry

    return sorted(name for name, entry in get_registry().samplers.items() if entry.kind == "selector")


@pytest.mark.parametrize("selector", selectors())
@pytest.mark.parametrize("at", ["first", "middle", "last"])
def test_a_grammar_anywhere_in_a_chain_with_every_selector(shakespeare: Any, selector: str, at: str) -> None:
    import re

    pattern = "(thou|thee|my lord),? [a-z]{2,7}[.!?]"
    stages = {
        "first": [f"regex(pattern='{pattern}')", "temperature(0.9)", "top_k(40)"],
        "middle": ["repetition_penalty(1.2)", f"regex(pattern='{pattern}')", "top_p(0.95)"],
        "last": ["temperature(1.1)", "top_k(60)", f"regex(pattern='{pattern}')"],
    }[at]
    required = {"adaptive_p": "adaptive_p(0.5)"}  # a selector whose parameters have no defaults
    chain = " | ".join([*stages, required.get(selector, selector)])
    out = dk.generate(shakespeare, ["ROMEO:\n", "JULIET:\n"], chain=chain, max_new_tokens=20, seed=0)
    assert out.text is not None
    assert selectors() and all(re.fullmatch(pattern, text) for text in out.text), (chain, out.text)
    assert out.stopped_by == ["regex", "regex"]


@pytest.mark.parametrize(
    ("chain", "prompts", "message"),
    [
        (
            "regex(pattern='abé')",
            ["ROMEO:\n"],
            "regex: pattern has no token to go on with in row 0 after 2 tokens ('ab'): no token of the vocabulary "
            "continues the text (the grammar needs a character the vocabulary lacks there); allowed: a grammar "
            "whose text the tokenizer's tokens can spell",
        ),
        (
            "grammar(lark=['start: \"ab\"', 'start: \"b\\u00e9\"'])",
            ["ROMEO:\n", "JULIET:\n"],
            "grammar: lark[1] has no token to go on with in row 1 after 1 tokens ('b'): no token of the vocabulary",
        ),
    ],
)
def test_a_dead_end_in_the_middle_of_the_text_names_the_grammar_the_text_and_why(
    shakespeare: Any, chain: str, prompts: list[str], message: str
) -> None:
    """tiny-shakespeare has no "é": the text reaches it after its first characters. It was a NumericsError
    saying only "stage 0 (regex) removed the 84 left"."""
    with pytest.raises(dk.ParameterError) as err:
        dk.generate(shakespeare, prompts, chain=f"{chain} | greedy", max_new_tokens=6)
    assert str(err.value).startswith(message), str(err.value)


@pytest.mark.parametrize("strategy", ["sample", "beam(num_beams=2)", "speculative(draft=tiny-shakespeare-draft, k=3)"])
def test_a_match_only_a_missing_character_could_go_on_from_ends_there(shakespeare: Any, strategy: str) -> None:
    """'ab' matches `ab(é)?`, and tiny-shakespeare has no "é" and no end token: the row ends on the match (there
    is nothing to choose), rather than being a dead end; a match that can go on ('a' under `a(é|b)?`) does."""
    chain = dk.Chain([dk.create("regex", pattern=["ab(é)?", "a(é|b)?"])], dk.create("greedy"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # and no warning: the texts are sentences of their grammars
        out = dk.decode(shakespeare, ["ROMEO:\n", "JULIET:\n"], strategy=strategy, chain=chain, max_new_tokens=6)
    assert out.text == ["ab", "ab"]
    assert (out.finish_reasons, out.stopped_by) == (["stop", "stop"], ["regex", "regex"])


def test_a_long_decode_holds_as_many_parse_states_at_400_tokens_as_at_200(shakespeare: Any) -> None:
    """A held parse state keeps llguidance's history of the whole text, so holding one per token (up to thousands)
    made a long decode's memory grow as tokens x held states (870 MB after 8,192 tokens, docs/benchmarks.md)."""
    held: dict[int, int] = {}
    texts: dict[int, str] = {}
    for n in (200, 400):
        chain = dk.Chain.parse('regex(pattern="[a-zA-Z ,.\\n]*") | temperature(0.8)')
        out = dk.generate(shakespeare, "ROMEO:", chain=chain, cache="window(size=64)", max_new_tokens=n, seed=0)
        assert len(out.tokens[0]) == n
        held[n] = len(chain.processors[0]._latest.matchers[0])  # type: ignore[attr-defined]
        texts[n] = out.text[0]  # type: ignore[index]
    assert texts[400].startswith(texts[200])  # the same decode, run on
    assert held[400] == held[200] < 200
