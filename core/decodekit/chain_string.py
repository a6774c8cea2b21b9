"""The one-line string form of chains, cache backends, strategies and models: `"name(arg, key=value) | name"`.

A small recursive-descent parser over Python literal syntax (numbers, strings, True, False, None, lists, tuples,
dicts, unary signs, bare words as strings; also `inf`, as `repr` writes it, so `-inf` can ban a token in
`logit_bias({5: -inf})`, and JSON's `true`, `false` and `null`, so JSON pasted in reads as JSON): no `eval`, a
bounded nesting depth, and every malformed input a `ChainSpecError` naming the position and what was expected there.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from typing import Any, NamedTuple

from decodekit.errors import ChainSpecError

__all__ = ["MAX_DEPTH", "MODEL_NAME", "StageCall", "parse_chain_string", "parse_model", "parse_stage"]

MAX_DEPTH = 32
"""The deepest nesting of brackets and signs a value may have."""

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MODEL_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*")
"""A model's name: may also hold '-' and '.' ("tiny-shakespeare"), but not ':' (it starts the loader's argument)."""
# A bare word stands for a string, so a command line needs no inner quotes:
# `window(size=auto)`, `speculative(draft=tiny-shakespeare-draft, k=4)`; a call's text too, `draft=m(n_layer=1)`.
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_.:/-]*")
_WORD_TAIL = re.compile(r"[A-Za-z0-9_.:/-]*")  # always matches
_HYPHENATED = re.compile(r"[A-Za-z0-9_-]*")  # always matches
_NUMBER = re.compile(r"(?:\d(?:_?\d)*(?:\.(?:\d(?:_?\d)*)?)?|\.\d(?:_?\d)*)(?:[eE][+-]?\d(?:_?\d)*)?")
_STRING = re.compile(r"'(?:[^'\\\n]|\\.)*'|\"(?:[^\"\\\n]|\\.)*\"")
_ESCAPE = re.compile(r"\\(.)")  # a backslash and the character after it, pairs taken from the left
# What follows a backslash in a Python string's escapes; any other (an unknown escape, "\d") stays as written.
_ESCAPED = frozenset("\\'\"abfnrtv01234567xNuU")
_CONSTANTS: dict[str, Any] = {"True": True, "False": False, "None": None, "inf": float("inf"), "nan": float("nan")}
_CONSTANTS |= {"true": True, "false": False, "null": None}  # JSON's
_CLOSE = {"(": ")", "[": "]", "{": "}"}


class StageCall(NamedTuple):
    """One parsed stage: `name(*args, **kwargs)`."""

    name: str
    args: list[Any]
    kwargs: dict[str, Any]


class _Parser:
    def __init__(self, text: str, what: str, form: str) -> None:
        if not isinstance(text, str):
            raise ChainSpecError(f"{what} {text!r} is a {type(text).__name__}; allowed: a string {form!r}")
        self.text, self.what, self.pos = text, what, 0

    def error(self, expected: str, at: int | None = None) -> ChainSpecError:
        at = self.pos if at is None else at
        found = repr(self.text[at]) if at < len(self.text) else "the end"
        return ChainSpecError(f"{self.what} {self.text!r}: at position {at}: expected {expected}, found {found}")

    def skip_space(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1

    def peek(self) -> str:
        self.skip_space()
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def expect(self, char: str, expected: str) -> None:
        if self.peek() != char:
            raise self.error(expected)
        self.pos += 1

    def name(self, expected: str, pattern: re.Pattern[str] = _NAME) -> str:
        self.skip_space()
        match = pattern.match(self.text, self.pos)
        if match is None:
            raise self.error(expected)
        self.pos = match.end()
        return match.group()

    def chain(self) -> list[StageCall]:
        stages = [self.stage()]
        while self.peek() == "|":
            self.pos += 1
            stages.append(self.stage())
        if self.peek():
            raise self.error("'|' or the end")
        return stages

    def stage(self, pattern: re.Pattern[str] = _NAME, depth: int = 0) -> StageCall:
        name = self.name(f"a {self.what} stage name", pattern)
        if self.text.startswith("-", self.pos):  # `top-k`: the spelling of vLLM's and HF's flags
            spelled = name + _HYPHENATED.match(self.text, self.pos).group()  # type: ignore[union-attr]
            raise ChainSpecError(
                f"{self.what} {self.text!r}: at position {self.pos}: found '-' in the name {spelled!r}; "
                f"names are written with '_' ({spelled.replace('-', '_')!r})"
            )
        args: list[Any] = []
        kwargs: dict[str, Any] = {}
        for start in self.items() if self.peek() == "(" else ():
            match = _NAME.match(self.text, start)
            if match and self.text[match.end() :].lstrip().startswith("="):
                key = self.name("a parameter name")
                self.expect("=", "'='")
                if key in kwargs:
                    raise self.error(f"each parameter once; {key} is given twice", start)
                kwargs[key] = self.value(depth)
            else:
                if kwargs:
                    raise self.error("name=value (a positional value cannot follow a keyword one)", start)
                args.append(self.value(depth))
        return StageCall(name, args, kwargs)

    def items(self) -> Iterator[int]:
        """The start of each comma-separated item inside the bracket at `pos`, which is then past its closing one."""
        opened, opening = self.pos, self.text[self.pos]
        close = _CLOSE[opening]
        self.pos += 1
        while self.peek() != close:
            if not self.peek():
                raise self.error(f"{close!r} to close the {opening!r} at position {opened}")
            yield self.pos
            if self.peek() == ",":
                self.pos += 1
            elif self.peek() != close:
                raise self.error(f"',' or {close!r} to close the {opening!r} at position {opened}")
        self.pos += 1

    def value(self, depth: int) -> Any:
        if depth >= MAX_DEPTH:
            raise self.error(f"a value nested at most {MAX_DEPTH} deep")
        char = self.peek()
        start = self.pos
        if char in "+-":
            self.pos += 1
            operand = self.value(depth + 1)
            if isinstance(operand, bool) or not isinstance(operand, (int, float)):
                raise self.error("a number after the sign", start + 1)
            return -operand if char == "-" else operand
        if char in _CLOSE:
            return self.bracketed(char, depth)
        if char in "'\"":
            return self.string()
        if (match := _NUMBER.match(self.text, self.pos)) is not None:
            return self.number(match)
        match = _NAME.match(self.text, self.pos)
        if match is not None and match.group() in _CONSTANTS:
            self.pos = match.end()
            return _CONSTANTS[match.group()]
        match = _WORD.match(self.text, self.pos)
        if match is not None and self.text.startswith("(", match.end()):  # `draft=m(n_layer=1)`: the text, as if quoted
            self.stage(MODEL_NAME, depth + 1)
            self.pos = _WORD_TAIL.match(self.text, self.pos).end()  # type: ignore[union-attr]  # a model's `:argument`
            return self.text[start : self.pos]
        if match is not None:
            self.pos = match.end()
            return match.group()
        raise self.error(
            "a literal (a number, inf, nan, a string or bare word, True, False, None, a list, a tuple or a dict)"
        )

    def string(self) -> str:
        """The quoted string at `pos`, its escapes read as Python reads them."""
        match = _STRING.match(self.text, self.pos)
        if match is None:
            raise self.error("a closed string literal")
        try:
            value: str = ast.literal_eval(_ESCAPE.sub(_unknown_escape_kept, match.group()))
        except (SyntaxError, ValueError) as exc:  # a malformed escape ("\x1")
            raise self.error(
                f"a string with valid escapes ({exc.msg if isinstance(exc, SyntaxError) else exc})"
            ) from None
        self.pos = match.end()
        return value

    def number(self, match: re.Match[str]) -> int | float:
        """The unsigned number `match` found at `pos`: an int, or a float if it has a point or an exponent."""
        self.pos, token = match.end(), match.group()
        try:
            return float(token) if any(c in token for c in ".eE") else int(token)
        except ValueError:  # an int of more digits than Python converts
            raise self.error("a number of at most 4,300 digits", match.start()) from None

    def bracketed(self, opening: str, depth: int) -> Any:
        items: list[Any] = []
        pairs: dict[Any, Any] = {}
        for start in self.items():
            item = self.value(depth + 1)
            if opening == "{":
                self.expect(":", "':' after a dict key")
                try:
                    pairs[item] = self.value(depth + 1)
                except TypeError:
                    raise self.error(f"a hashable dict key (a number, string or tuple), not {item!r}", start) from None
            else:
                items.append(item)
        if opening == "{":
            return pairs
        if opening == "[":
            return items
        trailing_comma = self.text[: self.pos - 1].rstrip().endswith(",")  # `(1,)` is a tuple, `(1)` is 1
        return items[0] if len(items) == 1 and not trailing_comma else tuple(items)


def parse_chain_string(text: str) -> list[StageCall]:
    """`"a(1, x=2) | b"` -> `[("a", [1], {"x": 2}), ("b", [], {})]`; values are Python literals."""
    return _Parser(text, "chain", "name(args) | name").chain()


def parse_stage(text: str, what: str) -> StageCall:
    """One `"name(args)"` (a cache backend or a strategy, `what`), in the syntax of one chain stage."""
    parser = _Parser(text, what, "name(args)")
    stage = parser.stage()
    if parser.peek():
        raise parser.error("the end (one name(args), no '|')")
    return stage


def parse_model(text: str) -> tuple[StageCall, str | None]:
    """`"name(args)"` or `"name(args):argument"`: a model's call, and the text after ':' as it is (None without)."""
    parser = _Parser(text, "model", "name(args):argument")
    call = parser.stage(MODEL_NAME)
    if parser.peek() == ":":
        return call, text[parser.pos + 1 :]
    if parser.peek():
        raise parser.error("':' or the end")
    return call, None


def _unknown_escape_kept(escape: re.Match[str]) -> str:
    """An unknown escape's backslash doubled, so Python reads it as written without a warning: silencing that
    warning swapped the process's warning filters, and parses on several threads at once left them all ignored."""
    return escape.group() if escape.group(1) in _ESCAPED else "\\" + escape.group()
