"""GBNF (llama.cpp's grammars) through `grammar(gbnf=...)`: llama.cpp's sample grammars under sampling, beams and
speculative decoding, each output checked by a regular expression of the grammar written by hand (json.gbnf's by
`json.loads`); what llguidance's converter refuses; where its reading differs from llama.cpp's."""

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence
from typing import Any

import pytest
import regex
import torch
from char_tokenizer import Chars

import decodekit as dk
from decodekit.errors import UnfinishedRowsWarning

# llama.cpp's sample grammars (github.com/ggml-org/llama.cpp, grammars/*.gbnf) as they are there, and for each a
# regular expression of its sentences written by hand: a second reading of the grammar that outputs are checked by.
JSON = r"""root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws

object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws

array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]" ws

string ::=
  "\"" (
    [^"\\\x7F\x00-\x1F] |
    "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) # escapes
  )* "\"" ws

number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws

# Optional space: by convention, applied in this grammar after literal chars when allowed
ws ::= | " " | "\n" [ \t]{0,20}
"""

ARITHMETIC = r"""root  ::= (expr "=" ws term "\n")+
expr  ::= term ([-+*/] term)*
term  ::= ident | num | "(" ws expr ")" ws
ident ::= [a-z] [a-z0-9_]* ws
num   ::= [0-9]+ ws
ws    ::= [ \t\n]*
"""

LIST = r"""root ::= item+

# Excludes various line break characters
item ::= "- " [^\r\n\x0b\x0c\x85\u2028\u2029]+ "\n"
"""

CHESS = r"""# Specifies chess moves as a list in algebraic notation, using PGN conventions

# Force first move to "1. ", then any 1-2 digit number after, relying on model to follow the pattern
root    ::= "1. " move " " move "\n" ([1-9] [0-9]? ". " move " " move "\n")+
move    ::= (pawn | nonpawn | castle) [+#]?

# piece type, optional file/rank, optional capture, dest file & rank
nonpawn ::= [NBKQR] [a-h]? [1-8]? "x"? [a-h] [1-8]

# optional file & capture, dest file & rank, optional promotion
pawn    ::= ([a-h] "x")? [a-h] [1-8] ("=" [NBKQR])?

castle  ::= "O-O" "-O"?
"""

JAPANESE = r"""# A probably incorrect grammar for Japanese
root        ::= jp-char+ ([ \t\n] jp-char+)*
jp-char     ::= hiragana | katakana | punctuation | cjk
hiragana    ::= [ぁ-ゟ]
katakana    ::= [ァ-ヿ]
punctuation ::= [、-〾]
cjk         ::= [一-鿿]
"""

# Their sentences as regular expressions (`regex` module syntax; arithmetic's parentheses to a depth of three, which
# the outputs checked do not pass).
_WS = r"[ \t\n]*"
_TERM0 = rf"(?:[a-z][a-z0-9_]*{_WS}|[0-9]+{_WS})"


def _term(depth: int) -> str:
    if depth == 0:
        return _TERM0
    inner = _term(depth - 1)
    return rf"(?:{_TERM0}|\({_WS}{inner}(?:[-+*/]{inner})*\){_WS})"


_EXPR = rf"{_term(3)}(?:[-+*/]{_term(3)})*"
ARITHMETIC_RE = rf"(?:{_EXPR}={_WS}{_term(3)}\n)+"
LIST_RE = r"(?:- [^\r\n\x0b\x0c\x85\u2028\u2029]+\n)+"
_MOVE = r"(?:(?:[a-h]x)?[a-h][1-8](?:=[NBKQR])?|[NBKQR][a-h]?[1-8]?x?[a-h][1-8]|O-O(?:-O)?)[+#]?"
CHESS_RE = rf"1\. {_MOVE} {_MOVE}\n(?:[1-9][0-9]?\. {_MOVE} {_MOVE}\n)+"
JAPANESE_RE = r"[ぁ-ゟァ-ヿ、-〾一-鿿]+(?:[ \t\n][ぁ-ゟァ-ヿ、-〾一-鿿]+)*"


def allowed(stage: Any, tokenizer: Chars, text: str) -> str:
    """The characters (and `<eos>`) the stage lets follow `text`."""
    keep = stage.allowed(_context(tokenizer, [text]), len(tokenizer.alphabet) + 1)[0]
    return tokenizer.decode(keep.nonzero().flatten().tolist())


def _context(tokenizer: Chars, texts: Sequence[str]) -> dk.DecodeContext:
    """A context whose rows generated `texts` (equal lengths) after a one-token prompt."""
    rows = [[1, *tokenizer.encode(t)] for t in texts]
    return dk.DecodeContext(tokens=torch.tensor(rows), step=len(rows[0]) - 1, tokenizer=tokenizer)


MODELS = ["tiny-shakespeare", "tiny-shakespeare-llama"]
STRATEGIES: list[tuple[str, dict[str, Any]]] = [
    ("sample", {}),
    ("beam", {"num_beams": 2}),
    ("speculative", {"draft": "ngram", "k": 4}),
]


@pytest.fixture(scope="module", params=MODELS)
def model(request: pytest.FixtureRequest) -> Any:
    return dk.load_model(request.param)


def test_gbnf_masks_follow_the_grammar_from_root() -> None:
    gbnf = 'root ::= "{" pair ("," pair)* "}"\npair ::= key ":" num\nkey ::= [ab]\nnum ::= [0-9]'
    stage, tok = dk.create("grammar", gbnf=gbnf), Chars("ab{}:,0123456789")
    assert allowed(stage, tok, "") == "{"
    assert allowed(stage, tok, "{") == "ab"
    assert allowed(stage, tok, "{a:1") == "},"
    assert allowed(stage, tok, "{a:1}") == "<eos>"  # complete: the end is forced
    assert stage.ends_row(0, tok.encode("{a:1,b:2}")) == "grammar"
    assert stage.unfinished(0, tok.encode("{a:1,")) == "grammar incomplete"


@pytest.mark.parametrize(("strategy", "options"), STRATEGIES, ids=[s for s, _ in STRATEGIES])
@pytest.mark.parametrize(
    ("gbnf", "sentence"),
    [(ARITHMETIC, ARITHMETIC_RE), (LIST, LIST_RE), (CHESS, CHESS_RE)],
    ids=["arithmetic", "list", "chess"],
)
def test_every_output_of_a_sample_grammar_is_a_prefix_of_its_sentences(
    model: Any, strategy: str, options: dict[str, Any], gbnf: str, sentence: str
) -> None:
    """These grammars never end (`root ::= x+`): each output, cut by max_new_tokens, is the start of a sentence, a
    whole one exactly when the stage says the row is not incomplete."""
    stage = dk.create("grammar", gbnf=gbnf)
    chain = dk.Chain([stage] if strategy == "beam" else [stage, dk.create("temperature", 1.0)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnfinishedRowsWarning)  # cut by max_new_tokens, as intended
        out = dk.decode(model, ["ROMEO:\n"] * 3, chain=chain, strategy=strategy, max_new_tokens=60, seed=0, **options)
    assert out.text is not None
    for text, tokens in zip(out.text, out.tokens):
        assert regex.fullmatch(sentence, text, partial=True), text
        whole = regex.fullmatch(sentence, text) is not None
        assert whole == (stage.unfinished(0, list(tokens)) is None), text


@pytest.mark.parametrize(("strategy", "options"), STRATEGIES, ids=[s for s, _ in STRATEGIES])
def test_json_gbnf_outputs_are_json_objects(model: Any, strategy: str, options: dict[str, Any]) -> None:
    """json.gbnf's rows end complete (a bias towards `"` and `}` keeps the model's strings short), and each text is
    a JSON object `json.loads` reads."""
    tok = model.tokenizer
    bias = {tok.encode(c)[0]: 10.0 for c in '"}'}
    chain = f"grammar(gbnf={JSON!r}) | logit_bias(bias={bias})" + ("" if strategy == "beam" else " | temperature(1.0)")
    out = dk.decode(model, ["ROMEO:\n"] * 4, chain=chain, strategy=strategy, max_new_tokens=200, seed=0, **options)
    assert out.text is not None and out.stopped_by == ["grammar"] * 4, out.text
    assert all(isinstance(json.loads(text), dict) for text in out.text), out.text


@pytest.mark.parametrize("name", MODELS)
def test_a_grammar_no_token_of_the_vocabulary_begins_is_refused_before_decoding(name: str) -> None:
    """japanese.gbnf: tiny-shakespeare's 84 characters hold no Japanese one; `dk.validate` says so, as for Lark."""
    model = dk.load_model(name)
    with pytest.raises(dk.ParameterError, match=r"^grammar: the grammar cannot be used with this tokenizer: no token"):
        dk.validate(model, ["ROMEO:"], chain=f"grammar(gbnf={JAPANESE!r})", max_new_tokens=4)


def test_japanese_gbnf_on_a_vocabulary_that_spells_it() -> None:
    """The mask after each text is what japanese.gbnf's regular expression lets follow (and the end once it matches)."""
    tok = Chars("あア、一 x\n")
    stage = dk.create("grammar", gbnf=JAPANESE)
    for text in ["", "あ", "あ ", "一ア\n、"]:
        follows = [c for c in tok.alphabet if regex.fullmatch(JAPANESE_RE, text + c, partial=True)]
        end = ["<eos>"] if regex.fullmatch(JAPANESE_RE, text) else []
        assert allowed(stage, tok, text) == "".join(end + follows), text
    assert allowed(stage, tok, "あ") == "<eos>あア、一 \n"  # by hand: the end, and every character but "x"


def test_spec_round_trip_and_chain_string() -> None:
    chain = dk.Chain.parse(f"grammar(gbnf={CHESS!r}) | temperature(0.7)")
    assert dk.Chain.from_spec(chain.to_spec()) == chain
    assert dk.Chain.parse(str(chain)) == chain
    per_prompt = dk.Chain.parse(f"grammar(gbnf=[{LIST!r}, null]) | temperature(0.7)")
    assert dk.Chain.parse(str(per_prompt)) == per_prompt


def test_one_grammar_per_prompt() -> None:
    stage = dk.create("grammar", gbnf=['root ::= "a" [0-9]', 'root ::= "b"+'])
    tok = Chars("ab0123456789")
    keep = stage.allowed(_context(tok, ["a", "b"]), 13)
    assert [tok.decode(k.nonzero().flatten().tolist()) for k in keep] == ["0123456789", "<eos>b"]


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({}, r"^grammar: the defaults are invalid together: allowed: one grammar, lark \(a Lark grammar\) or gbnf"),
        (
            {"lark": 'start: "a"', "gbnf": 'root ::= "a"'},
            r"^grammar: lark='start: \"a\"', gbnf='root ::= \"a\"' are invalid together: allowed: one grammar",
        ),
        ({"gbnf": 'top ::= "a"'}, r"^grammar: gbnf is invalid: not GBNF that llguidance's converter reads: No 'root'"),
        ({"gbnf": "root ::= word"}, r"^grammar: gbnf is invalid: .*: Rule 'word' not found$"),
        ({"gbnf": 'root ::= "\\q"'}, r"^grammar: gbnf is invalid: .*: Invalid escape sequence \\q at line 1"),
        # llama.cpp's tokens (`<think>`, `<[id]>`, `!<[id]>`): the converter reads no such syntax
        ({"gbnf": 'root ::= <think> "a"'}, r"^grammar: gbnf is invalid: .*: Expected name at line 1"),
        ({"gbnf": 'root ::= <[1000]> "a"'}, r"^grammar: gbnf is invalid: .*: Expected name at line 1"),
        # llama.cpp takes these; the converter renames `root` to `start`, `a-b` and `aB` to `a_b`, and they clash
        ({"gbnf": 'root ::= start\nstart ::= "a"'}, r"^grammar: gbnf is invalid: .*: Rule 'start' already exists$"),
        (
            {"gbnf": 'root ::= a-b a_b\na-b ::= "a"\na_b ::= "b"'},
            r"^grammar: gbnf is invalid: .*: Rule 'A_B' already exists$",
        ),
        ({"gbnf": ["root ::= [a]", 'root ::= "a']}, r"^grammar: gbnf\[1\] is invalid: .*: Unexpected end of input"),
    ],
)
def test_what_the_converter_refuses_is_a_parameter_error_naming_gbnf(params: dict[str, Any], message: str) -> None:
    with pytest.raises(dk.ParameterError, match=message):
        dk.create("grammar", **params)


def test_dot_excludes_a_newline_unlike_llama_cpp() -> None:
    """llama.cpp's `.` is any character; the converter writes it as the regex `.`, which a newline does not match.
    Pinned so that a change of llguidance's is seen; `[^\\x00]`-style classes take a newline in both."""
    tok = Chars("ab\n")
    assert allowed(dk.create("grammar", gbnf='root ::= "a" . "b"'), tok, "a") == "ab"
    assert allowed(dk.create("grammar", gbnf='root ::= "a" [^\\x00] "b"'), tok, "a") == "ab\n"
