"""The grammar stages: `json_schema`, `json`, `regex`, `grammar` (Lark or GBNF).

Each removes (sets to -inf) every token that would take a row's text out of its grammar, keeping the
end-of-sequence tokens once the text is a sentence of it, and only those once nothing else can follow
(so an end is forced); `ends_row` ends the row as soon as the grammar is complete (finish reason "stop",
`stopped_by` the stage's name). A row's mask is a function of its generated tokens alone (`matchers`):
the stage keeps no per-generation state (`init_state` checks the tokenizer and returns None), which is
what makes it exact under speculative decoding, beam search and a redone step, and new for every generation.

The model's tokenizer comes with the context (`DecodeContext.tokenizer`) and must state its tokens'
bytes (`vocabulary`). A grammar parameter may give one grammar per prompt: row b follows the grammar of
the prompt it serves (`DecodeContext.prompt_index`).
"""

from __future__ import annotations

import json
import threading
import weakref
from collections.abc import Sequence
from typing import Any, ClassVar, TypeVar

import numpy as np
import torch
from torch import Tensor

from decodekit.compiling import eager
from decodekit.context import DecodeContext
from decodekit.errors import ParameterError
from decodekit.params import Params
from decodekit.stage import ProcessorBase
from decodekit_grammar.bitmask import Words, any_token, caps, empty
from decodekit_grammar.book import Book
from decodekit_grammar.engine import Grammar, GrammarEngine, Matcher
from decodekit_grammar.llguidance_engine import LLGuidance
from decodekit_grammar.matchers import key_of
from decodekit_grammar.params import GrammarParams, JsonParams, JsonSchemaParams, RegexParams
from decodekit_grammar.vocabulary import TokenTable, check_tokenizer, token_table

__all__ = ["GrammarStage", "Json", "JsonSchema", "Lark", "Regex"]

P = TypeVar("P", bound=Params)


class GrammarStage(ProcessorBase[P]):
    """Base of the grammar stages: a subclass says which grammars its parameters describe (`grammars`)."""

    engine: ClassVar[GrammarEngine] = LLGuidance()
    needs_tokenizer: ClassVar[bool] = True  # reads text (`ctx.tokenizer`): a host building contexts must give one

    @property
    def _parameter(self) -> str:
        """The parameter that holds the grammars, as errors name it."""
        raise NotImplementedError

    def __init__(self, params: P | None = None, /, **kwargs: Any) -> None:
        super().__init__(params, **kwargs)
        self._label = self.name  # once: `name` asks the registry
        self._grammars = self.grammars()
        if not self._grammars:  # found out only at the first step otherwise, as "a batch with a prompt 0"
            raise ParameterError(
                f"{self._label}: {self._parameter}=[] is invalid; allowed: one grammar, or a list of one per prompt"
            )
        for i, grammar in enumerate(self._grammars):
            problem = None if grammar is None else self.engine.check(grammar)
            if problem is not None:
                raise ParameterError(f"{self._label}: {self._grammar_name(i)} is invalid: {problem}")
        self._books: weakref.WeakKeyDictionary[TokenTable, Book] = weakref.WeakKeyDictionary()
        # The vocabulary of this thread's latest call, which `ends_row` answers for: per thread, as a decode
        # asks from its own thread, and another thread's decode of another tokenizer must not answer for it.
        self._local = threading.local()
        self._lock = threading.Lock()  # one stage may serve decodes in several threads

    @property
    def _latest(self) -> Book | None:
        return getattr(self._local, "book", None)

    def grammars(self) -> list[Grammar | None]:
        """One grammar, or one per prompt (None: unconstrained), from the parameters."""
        raise NotImplementedError

    def init_state(self, ctx: DecodeContext) -> None:
        """No state; a tokenizer that cannot state its bytes, or a grammar none of its tokens can begin, is refused
        here, before the first forward, so `dk.validate` (a batch job's check of each line) finds it."""
        check_tokenizer(ctx.tokenizer, self._label)
        self._book_of(token_table(ctx.tokenizer, None, self._label))  # the model's size is not known yet

    # -- the mask ---------------------------------------------------------------------------------

    def __call__(self, logits: Tensor, ctx: DecodeContext) -> Tensor:
        return _masked(self, logits, ctx)

    def allowed(self, ctx: DecodeContext, vocab_size: int) -> Tensor:
        """`[B, V]` bool: True where the token may follow row b's generated tokens under its grammar."""
        bits = np.unpackbits(self.mask(ctx, vocab_size).view(np.uint8), axis=1, count=vocab_size, bitorder="little")
        return torch.from_numpy(bits).view(torch.bool)

    def mask(self, ctx: DecodeContext, vocab_size: int) -> Words:
        """`[B, W]` int32 bitmasks (`engine`'s layout, at least `vocab_size` bits): the tokens that may follow
        each row's generated tokens under its grammar."""
        return self._mask(ctx, vocab_size, dead_end_raises=False)

    def _mask(self, ctx: DecodeContext, vocab_size: int, *, dead_end_raises: bool) -> Words:
        """`mask`; with `dead_end_raises` (the stage applied in a chain), a row whose text no token continues
        is a `ParameterError` saying where and why, not an empty mask the chain reports as a `NumericsError`
        naming only the stage."""
        book = self._book(ctx, vocab_size)
        history = (ctx.tokens if ctx.tokens.device.type == "cpu" else ctx.tokens.cpu()).numpy()  # [B, T]
        generated = history[:, history.shape[1] - ctx.step :].astype(np.int32)  # [B, step]: each row's key
        B = generated.shape[0]
        words = empty(book.size, B)
        grammar_of = self._grammar_indices(ctx, B)
        with self._lock:
            for b in range(B):
                matchers = book.matchers[grammar_of[b]]
                try:
                    state = None if matchers is None else matchers.state(generated[b].tobytes())
                    if state is None or (state.complete and book.open_end):
                        words[b] = -1  # unconstrained, or complete with no end token to force: nothing to remove
                    elif not state.error:
                        state.fill_mask(words[b])
                except ValueError as exc:
                    raise self._gave_up(grammar_of[b], ctx.step, exc) from None
                if dead_end_raises and state is not None and not state.error and not any_token(words[b], book.tokens):
                    raise self._dead_end(grammar_of[b], b, generated[b], ctx.tokenizer)
            for matchers in book.matchers:
                if matchers is not None:
                    matchers.reserve(B)
        return words

    def _gave_up(self, grammar: int, tokens: int, exc: ValueError) -> ParameterError:
        """The error for an engine that gave up on a grammar (a limit of its lexer or parser, a rule that never
        ends): left as an empty mask, it would surface as a `NumericsError` that hides the engine's reason."""
        return ParameterError(
            f"{self._label}: {self._grammar_name(grammar)} cannot go on after {tokens} tokens: {exc}; allowed: a "
            f"grammar whose rules can all end, within {self.engine.name}'s limits (fewer repetitions, longer lexemes)"
        )

    def _dead_end(self, grammar: int, row: int, generated: np.ndarray[Any, Any], tokenizer: Any) -> ParameterError:
        """The error for a text no token of the vocabulary continues under its grammar (a character it lacks)."""
        try:
            text = repr(tokenizer.decode(generated.tolist()))
        except Exception:  # a tokenizer that cannot decode a partial character: the ids say where
            text = f"token ids {generated.tolist()}"
        return ParameterError(
            f"{self._label}: {self._grammar_name(grammar)} has no token to go on with in row {row} after "
            f"{len(generated)} tokens ({text}): no token of the vocabulary continues the text (the grammar needs a "
            "character the vocabulary lacks there); allowed: a grammar whose text the tokenizer's tokens can spell"
        )

    def _grammar_name(self, grammar: int) -> str:
        """The parameter that gives grammar `grammar`, as errors name it: `pattern`, or `pattern[1]` in a list."""
        return f"{self._parameter}[{grammar}]" if len(self._grammars) > 1 else self._parameter

    def _book(self, ctx: DecodeContext, vocab_size: int) -> Book:
        """The book of the model's vocabulary, which this thread's `ends_row` then answers for."""
        self._local.book = book = self._book_of(token_table(ctx.tokenizer, vocab_size, self._label))
        return book

    def _book_of(self, table: TokenTable) -> Book:
        with self._lock:
            book = self._books.get(table)
            if book is None:
                book = self._books[table] = Book(self.engine, table, self._grammars, self._label)
        return book

    def check_prompts(self, prompts: int) -> None:
        """Refuse a list of grammars that is not one per prompt (`decode_request` asks, under every strategy)."""
        n = len(self._grammars)
        if n not in (1, prompts):  # a grammar left over, or missing: the list and the prompts are misaligned
            raise ParameterError(
                f"{self._label}: {n} grammars ({self._parameter}) for {prompts} prompts; "
                "allowed: one grammar, or one per prompt"
            )

    def _grammar_indices(self, ctx: DecodeContext, rows: int) -> Sequence[int]:
        """Which grammar each row follows: its prompt's (`DecodeContext.prompt_index`)."""
        n = len(self._grammars)
        if n == 1:
            return [0] * rows
        if ctx.prompt_index is None:  # one row per prompt
            self.check_prompts(rows)
            return range(rows)
        prompts = [int(p) for p in ctx.prompt_index]
        if max(prompts, default=0) >= n:
            raise ParameterError(
                f"{self._label}: {n} grammars ({self._parameter}) for a batch with a prompt {max(prompts)}; "
                "allowed: one grammar, or one per prompt"
            )
        return prompts

    # -- the end of a row ----------------------------------------------------------------------------

    def _state(self, row: int, generated: Sequence[int]) -> Matcher | None:
        """Prompt `row`'s parse after `generated`, in this thread's latest vocabulary (None: unconstrained)."""
        book, n = self._latest, len(self._grammars)
        if book is None or (n > 1 and not 0 <= row < n):
            return None
        grammar = 0 if n == 1 else row
        matchers = book.matchers[grammar]
        if matchers is None:
            return None
        with self._lock:
            try:
                return matchers.state(key_of(generated))
            except ValueError as exc:
                raise self._gave_up(grammar, len(generated), exc) from None

    def ends_row(self, row: int, generated: Sequence[int]) -> str | None:
        """The stage's name once prompt `row`'s grammar is complete after `generated`, else None."""
        state = self._state(row, generated)
        return self._label if state is not None and state.complete else None

    def unfinished(self, row: int, generated: Sequence[int]) -> str | None:
        """What a row that ended on `generated` lacks: its grammar incomplete (None: its text is a sentence, or
        empty: a row of no tokens, `max_new_tokens=0`, scored its prompt and left no text to warn about)."""
        if not generated:
            return None
        state = self._state(row, generated)
        if state is None or state.accepting or state.complete:
            return None
        return f"{self._label} {'violated' if state.error else 'incomplete'}"


@eager  # the parser: out of a compiled graph
def _masked(stage: GrammarStage[Any], logits: Tensor, ctx: DecodeContext) -> Tensor:
    """`logits` with -inf where the stage's grammar removes a token: their minimum with the caps (-inf even
    where a logit was +inf; NaN stays NaN), a third of `masked_fill`'s cost on a CPU at 50,000 tokens."""
    words = stage._mask(ctx, logits.shape[-1], dead_end_raises=True)
    bounds = caps(words, logits.shape[-1])  # [B, V]: +inf kept, -inf removed
    if logits.dtype == torch.float32 and logits.device.type == "cpu" and not logits.requires_grad:
        return torch.from_numpy(np.minimum(logits.numpy(), bounds, out=bounds))  # into the caps: one array less
    return torch.minimum(logits, torch.from_numpy(bounds).to(logits.device, logits.dtype))


_BOOLEAN = {"true": True, "false": False}  # JSON Schema's boolean schemas, as JSON text


def _per_prompt(value: Any) -> list[Any]:
    """A grammar parameter as a list of one per prompt (one grammar for all: a list of one)."""
    return list(value) if isinstance(value, list) else [value]


class JsonSchema(GrammarStage[JsonSchemaParams]):
    """A JSON value valid under `schema`."""

    _parameter = "schema"

    def grammars(self) -> list[Grammar | None]:
        compact = self.params.whitespace == "compact"
        schemas = _per_prompt(self.params.schema)
        return [
            None if s is None else Grammar("json_schema", self._text(s, i, len(schemas)), compact)
            for i, s in enumerate(schemas)
        ]

    def _text(self, schema: dict[str, Any] | bool | str, i: int, n: int) -> str:
        """A schema's JSON text; a dict that is not JSON (a set, a date, a NaN) is refused, saying what it holds.
        JSON Schema's boolean schemas: `true` (any value) is `{}`; `false` (no value) is refused."""
        which = f"[{i}]" if n > 1 else ""
        boolean = _BOOLEAN.get(schema.strip()) if isinstance(schema, str) else schema
        if boolean is False:  # no text is valid: every row would be a dead end at its first step
            raise ParameterError(
                f"{self._label}: schema{which}=false matches no JSON value; allowed: a schema some value is valid "
                "under (true or {} for any value)"
            )
        if boolean is True:
            return "{}"
        if isinstance(schema, str):
            return schema
        try:
            return json.dumps(schema, allow_nan=False)
        except RecursionError as exc:
            raise ParameterError(
                f"{self._label}: schema{which} is nested too deeply: {exc}; allowed: a schema nested less deeply"
            ) from None
        except (TypeError, ValueError) as exc:
            raise ParameterError(
                f"{self._label}: schema{which} is not JSON: {exc}; allowed: a JSON Schema of dicts, lists, str, "
                "finite numbers, bools and None"
            ) from None


class Json(GrammarStage[JsonParams]):
    """Any JSON value."""

    _parameter = "json"

    def grammars(self) -> list[Grammar | None]:
        return [Grammar("json_schema", "{}", self.params.whitespace == "compact")]


class Regex(GrammarStage[RegexParams]):
    """A text the regular expression `pattern` matches as a whole."""

    _parameter = "pattern"

    def grammars(self) -> list[Grammar | None]:
        return [None if p is None else Grammar("regex", p) for p in _per_prompt(self.params.pattern)]


class Lark(GrammarStage[GrammarParams]):
    """A sentence of the Lark grammar `lark` (its rule `start`), or of the GBNF grammar `gbnf` (its rule `root`)."""

    @property
    def _parameter(self) -> str:
        return "lark" if self.params.lark is not None else "gbnf"

    def grammars(self) -> list[Grammar | None]:
        if self.params.lark is not None:
            return [None if g is None else Grammar("lark", g) for g in _per_prompt(self.params.lark)]
        return [None if g is None else Grammar("gbnf", g) for g in _per_prompt(self.params.gbnf)]
