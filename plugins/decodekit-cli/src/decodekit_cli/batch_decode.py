"""Checking the lines of a batch job against a model, and decoding them into records.

The local job and every Ray actor run these same functions, so a line gets the same record
wherever it is decoded. Each prompt has its own seed: the line's `seed`, else the stream that row
`line - 1` of one batch of the whole file would get from `--seed`; batch-invariant seeding then
makes a result independent of the batch it shares, of `--batch-size`, of resuming and of Ray. A line's `n`
samples are `n` rows of its prompt seeded `row_seeds([seed], 1, n)`: sample 0 the line's one sample, as
`decodekit generate PROMPT -n N` draws them; under beam search `n` is the search's best beams (`num_return_sequences`).
"""

from __future__ import annotations

import itertools
import json
import secrets
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import decodekit as dk
from decodekit.chain_string import parse_stage
from decodekit.context import mix_seed, row_seeds
from decodekit.engine import PREALLOCATED_COLUMNS, check_rows
from decodekit.errors import CompileError
from decodekit_cli.batch_input import InputLine, LineError, PromptLine, parse_line
from decodekit_cli.batch_records import Record, error_record, result_record, sequence
from decodekit_cli.batch_settings import BatchSettings, parsed_chain
from decodekit_cli.batch_warnings import said_of_lines
from decodekit_cli.errors import CliError
from decodekit_cli.grammar_options import line_chain
from decodekit_cli.logprob_records import TokenTexts, prompt_records, token_records
from decodekit_cli.options import cache_flag, encode_prompt, is_spec, spec_text
from decodekit_cli.result_fields import own_fields
from decodekit_cli.returned_sequences import hypotheses, plan_sequences
from decodekit_cli.sampling_options import eos_tokens

__all__ = ["Pending", "batches", "check_lines", "decode_records"]


@dataclass(frozen=True)
class Pending:
    """A checked line: what to decode, every default resolved."""

    line: int
    id: str | int
    prompt: str | None  # None: the line gave token ids, `ids`
    ids: list[int]  # the prompt as the model encodes it
    seed: int | None  # None: no --seed and none of its own, so a fresh one when decoded
    max_new_tokens: int
    chain: str
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    stop: tuple[str, ...] = ()  # the line's own stop strings, else the job's
    include_stop: bool = False  # the line's own, else --include-stop: its text keeps the stop string that ended it
    strategy: str = "sample"  # under beam search with the line's num_return_sequences
    copies: int = 1  # rows of the prompt: its samples
    hypotheses: int = 1  # sequences each row returns: beam search's best beams

    def options(self) -> tuple[str, int | None, int | None, str, bool]:
        """What the rows of one decode share (not max_new_tokens nor stop strings: one per prompt, unless the
        strategy refuses a limit per prompt)."""
        return self.chain, self.logprobs, self.prompt_logprobs, self.strategy, self.include_stop

    def row_seeds(self) -> list[int]:
        """Each copy's seed: copy 0 the line's own, copy `k > 0` `mix_seed(seed, k)`."""
        assert self.seed is not None
        return row_seeds([self.seed], 1, self.copies) or []


def check_lines(
    model: Any, settings: BatchSettings, lines: Iterable[InputLine], *, unique_ids: bool = True
) -> list[Pending | Record]:
    """Every line checked as `dk.decode` would check it, without decoding: a `Pending`, or its
    error record. `unique_ids`: a line whose id an earlier line has is an error."""
    seen: dict[str | int, int] = {}
    checked: list[Pending | Record] = []
    for line in lines:
        key, item = parse_line(line, settings.chain)
        if unique_ids and key in seen:
            item = LineError(
                "ParameterError", f"id {key!r} is also the id of {_line_of(key, seen[key])}; allowed: one per line"
            )
        seen.setdefault(key, line.number)
        if isinstance(item, PromptLine):
            try:
                checked.append(_check(model, settings, line.number, key, item))
                continue
            except LineError as exc:
                item = exc
        checked.append(error_record(key, line.number, item.kind, str(item)))
    return checked


def _line_of(key: str | int, number: int) -> str:
    """The earlier line that has id `key`; where that is its number, that line may name no id, or an invalid one."""
    return (
        f"line {number} (its number: the id of a line that names no valid one of its own)"
        if key == number
        else f"line {number}"
    )


def _check(model: Any, settings: BatchSettings, number: int, key: str | int, item: PromptLine) -> Pending:
    seed = item.seed if item.seed is not None else _derived_seed(settings.seed, number)
    logprobs = item.logprobs if item.logprobs is not None else settings.logprobs
    prompt_logprobs = item.prompt_logprobs if item.prompt_logprobs is not None else settings.prompt_logprobs
    try:
        ids = line_ids(model, item, settings.replace_unknown)
        chain = _models_chain(model, settings, ids) if item.chain is None else _own_chain(item.chain)
        chain = line_chain(chain, item.json_schema, item.regex, item.grammar, item.gbnf)  # decodekit-grammar's
        max_new = item.max_new_tokens if item.max_new_tokens is not None else _default_length(settings, ids)
        n = item.n if item.n is not None else settings.n
        plan = plan_sequences(settings.strategy, n or 1, None if n is None else f"n={n}", count='a line\'s "n"')
        # Sized before the rows are listed: an n far past the memory would hang building them.
        check_rows("prompt line", "n", plan.copies, plan.copies, len(ids) + min(max_new, PREALLOCATED_COLUMNS), model)
        stop = _line_stop(model, settings, item)
        include_stop = settings.include_stop if item.include_stop is None else item.include_stop
        pending = Pending(number, key, item.prompt, ids, seed, max_new, chain, logprobs, prompt_logprobs, stop)
        pending = replace(
            pending,
            include_stop=include_stop,
            strategy=plan.strategy,
            copies=plan.copies,
            hypotheses=plan.hypotheses,
        )
        # only checked here: the copies are seeded `Pending.row_seeds()` when decoded
        dk.validate(model, [ids] * plan.copies, **_options(model, settings, pending), seed=seed)
    except dk.ContextLengthError as exc:  # its advice names the job's --cache (max_new_tokens: the line's or the job's)
        raise LineError(type(exc).__name__, cache_flag(" ".join(str(exc).split()))) from None
    except (CliError, dk.DecodekitError) as exc:
        raise LineError.of(exc) from None
    return pending


def _line_stop(model: Any, settings: BatchSettings, item: PromptLine) -> tuple[str, ...]:
    """The line's stop strings (its own, else the job's --stop), refused in the words of the field or flag that
    gave them: the library's would name its stop_strings and stop_tokens, which no line field sets."""
    stop = settings.stop if item.stop is None else (item.stop,) if isinstance(item.stop, str) else tuple(item.stop)
    given = (
        " ".join(f"--stop {s!r}" for s in stop) if item.stop is None else f"prompt line: stop={json.dumps(item.stop)}"
    )
    if "" in stop:  # as --stop '' is refused
        raise CliError(
            f"{given} is invalid: an empty stop string would end every sample at once; allowed: non-empty strings"
        )
    if stop and getattr(model, "tokenizer", None) is None:
        raise CliError(
            f"{given} is invalid: the model has no tokenizer to decode text with; allowed: no stop strings (a line "
            "of prompt_token_ids ends at its max_new_tokens or at the model's stop_tokens)"
        )
    return stop


def line_ids(model: Any, item: PromptLine, replace_unknown: bool) -> list[int]:
    """The line's prompt as token ids: its text encoded, or its own ids, each checked against the vocabulary."""
    if item.prompt_token_ids is None:
        assert item.prompt is not None  # `one_prompt`: the line gives one of them
        try:
            return encode_prompt(model, item.prompt, replace_unknown)
        except CliError as exc:  # the tokenizer's words name a position in the text: say which field holds it
            refused = LineError.of(exc)
            raise LineError(refused.kind, f"prompt: {refused}") from None
    vocab = model.spec.vocab_size
    for i, token in enumerate(item.prompt_token_ids):
        if not 0 <= token < vocab:
            raise CliError(
                f"prompt line: prompt_token_ids.{i}={token} is invalid; allowed: a token id, 0 <= id < the model's "
                f"vocab_size={vocab}"
            )
    return item.prompt_token_ids


def _default_length(settings: BatchSettings, ids: list[int]) -> int:
    """A line's max_new_tokens without its own: the settings', or a `max_length` less the prompt's tokens, as
    `generate()` counts it (and refuses a prompt that leaves nothing to generate)."""
    if settings.max_length is None:
        return settings.max_new_tokens
    if len(ids) >= settings.max_length:
        raise CliError(
            f"the model's max_length={settings.max_length} counts the prompt, and this prompt has {len(ids)} tokens, "
            f"so nothing is left to generate; allowed: a prompt of at most {settings.max_length - 1} tokens, or the "
            "line's own max_new_tokens (or --max-new-tokens N for every line)"
        )
    return settings.max_length - len(ids)


def _models_chain(model: Any, settings: BatchSettings, ids: list[int]) -> str:
    """The job's chain; where it is the model's own, the one the model gives this prompt (a checkpoint's min_length
    counts it: `generate()` of this line alone), the command's options set over it as over the job's."""
    if settings.chain_over is None:
        return settings.chain
    own = (model.generation_defaults(len(ids), ["chain"]) or {}).get("chain")  # a checkpoint's: 0.2 ms
    return settings.chain if own is None else settings.chain_over.chain_text(str(own))


def _own_chain(chain: str | list[Any] | dict[str, Any]) -> str:
    """A line's `chain` as chain text: a chain string as it is, a JSON spec (as `--chain` takes one) as its string."""
    if isinstance(chain, str) and not is_spec(chain):
        return chain
    return spec_text(chain, "chain")


def _derived_seed(seed: int | None, number: int) -> int | None:
    """What row `number - 1` of one batch of the whole file gets from `seed` (see `dk.generate`)."""
    return None if seed is None else mix_seed(seed, number - 1)


def _options(model: Any, settings: BatchSettings, line: Pending) -> dict[str, Any]:
    return {
        "strategy": line.strategy,
        "chain": parsed_chain(line.chain),
        "max_new_tokens": line.max_new_tokens,
        "logprobs": line.logprobs,
        "prompt_logprobs": line.prompt_logprobs,
        "cache": settings.cache,
        "stop_strings": line.stop,
        "include_stop_str_in_output": line.include_stop,
        "stop_tokens": eos_tokens(model, settings.ignore_eos),
        "compile": settings.compile,
    }


LOOKAHEAD_BATCHES = 16  # how far a batch waits for lines of its options: records held until their turn, bounded


def batches(pending: Sequence[Pending], size: int) -> Iterator[list[Pending]]:
    """Prompts sharing chain, logprobs asked, strategy and include_stop, of `size` rows at most (a line of `n` samples
    takes `n`; one line, however many): one decode each. A batch gathers its lines from the next `LOOKAHEAD_BATCHES`
    batches' worth of lines, so lines that alternate two chains still fill batches; a batch is given once full or once
    its first line is that far behind, so the records held for the lines before them stay bounded."""
    reach = size * LOOKAHEAD_BATCHES
    open_batches: dict[tuple[Any, ...], tuple[int, list[Pending]]] = {}  # by options: its first line's index, lines
    for i, line in enumerate(pending):
        first, batch = open_batches.pop(line.options(), (i, []))
        if batch and sum(p.copies for p in batch) + line.copies > size:
            yield batch
            first, batch = i, []
        batch.append(line)
        open_batches[line.options()] = (first, batch)
        stale = sorted((f, key) for key, (f, _) in open_batches.items() if f <= i - reach)
        yield from (open_batches.pop(key)[1] for _, key in stale)
    yield from (batch for _, batch in sorted(open_batches.values(), key=lambda entry: entry[0]))


def decode_records(
    model: Any, settings: BatchSettings, batch: Sequence[Pending], *, rows: int = 0, where: str = "--input"
) -> Iterator[Record]:
    """Decode one batch (one chain and logprobs asked), yielding each row's record as the row ends.

    rows: under `--compile`, a smaller batch is decoded with copies of its last row up to this many (their
    records dropped), so that the job's last batch runs the same compiled graphs as the others. where: the input,
    as a warning about a line names it ("--input prompts.jsonl").

    If decoding fails, the rows not yet ended are decoded again one at a time (with the same
    seeds, so the same results): only a row that fails on its own gets an error record. Under a strategy that
    refuses one max_new_tokens per prompt (beam), each length is decoded apart.
    """
    seeded = [p if p.seed is not None else replace(p, seed=secrets.randbits(63)) for p in batch]
    padding = rows - sum(p.copies for p in seeded) if settings.compile else 0
    padded = [*seeded, *[replace(seeded[-1], copies=1)] * padding]
    ended: set[int] = set()
    try:
        for i, record in _stream(model, settings, padded, where):
            if i >= len(seeded):
                continue
            ended.add(i)
            yield record
    except CompileError:  # no row's fault: every row would fail again (the job stops, saying --compile)
        raise
    except Exception as exc:  # a sampler or model failing on one row must not cost the others
        limits = sorted({p.max_new_tokens for p in seeded})
        # Every line passed alone: limits that differ are refused (beam), or a model that counts the batch's slots
        # (an HF sliding-window model's rule for evicting caches) refuses their width; each limit apart, then.
        if isinstance(exc, (dk.ParameterError, dk.ContextLengthError)) and not ended and len(limits) > 1:
            for limit in limits:
                same = [p for p in seeded if p.max_new_tokens == limit]
                yield from decode_records(model, settings, same, rows=rows, where=where)
            return
        if len(seeded) == 1:
            error = LineError.of(exc)
            yield error_record(seeded[0].id, seeded[0].line, error.kind, str(error))
            return
        for i, row in enumerate(seeded):
            if i not in ended:
                yield from decode_records(model, settings, [row], where=where)


def _stream(model: Any, settings: BatchSettings, lines: Sequence[Pending], where: str) -> Iterator[tuple[int, Record]]:
    """`dk.stream` over the lines' rows (a row per sample); (line index, record) as each line's rows have ended (with
    prompt_logprobs, beam search's several beams or any strategy but `sample`, whose result may have fields of its
    own, once all have: the stream's result holds them)."""
    line_of = [i for i, p in enumerate(lines) for _ in range(p.copies)]
    first_row = list(itertools.accumulate((p.copies for p in lines), initial=0))  # line i: rows first_row[i] ..
    left = [p.copies for p in lines]  # rows of each line still decoding
    n = len(line_of)
    tokens: list[list[int]] = [[] for _ in range(n)]
    texts: list[list[str] | None] = [[] if getattr(model, "tokenizer", None) else None for _ in range(n)]
    token_texts = TokenTexts(getattr(model, "tokenizer", None))  # each logprob's token's, and its top's
    first = lines[0]
    scores: list[list[dict[str, Any]] | None] = [None if first.logprobs is None else [] for _ in range(n)]
    options = _options(model, settings, first)
    options["max_new_tokens"] = [lines[i].max_new_tokens for i in line_of]
    options["stop_strings"] = [lines[i].stop for i in line_of]
    seeds = [seed for p in lines for seed in p.row_seeds()]
    events = dk.stream(model, [lines[i].ids for i in line_of], **options, seed=seeds)
    wait = first.prompt_logprobs is not None or first.hypotheses > 1 or _own_result(first.strategy)
    ended: list[tuple[str, int | str | None]] = [("length", None)] * n  # max_new_tokens=0: no event ends a row

    def record(i: int, own: Sequence[Record] = ()) -> tuple[int, Record]:
        p, rows = lines[i], range(first_row[i], first_row[i + 1])
        fields = [own[r] if r < len(own) else {} for r in rows]  # none before the result, which holds them
        own_seeds = p.row_seeds() if p.copies > 1 else [None]  # a sample's own, when it is one of several
        found = [
            sequence(
                text="".join(text) if (text := texts[r]) is not None else None,
                tokens=tokens[r],
                finish_reason=ended[r][0],
                stopped_by=ended[r][1],
                logprobs=scores[r],
                seed=own_seeds[k],
                fields=fields[k],
            )
            for k, r in enumerate(rows)
        ]
        if p.hypotheses > 1:  # beam search's best beams, each with the row's entries of the strategy's own fields
            found = [
                sequence(**h, fields=fields[0])
                for h in hypotheses(events.result, rows[0], p.logprobs is not None, token_texts)
            ]
        assert p.seed is not None
        return i, result_record(
            id=p.id,
            line=p.line,
            prompt=p.prompt,
            prompt_token_ids=None if p.prompt is not None else p.ids,
            sequences=found,
            n=p.copies * p.hypotheses,
            seed=p.seed,
            chain=p.chain,
            max_new_tokens=p.max_new_tokens,
            prompt_logprobs=prompt_scores(rows[0]),
        )

    def prompt_scores(row: int) -> list[dict[str, Any] | None] | None:
        result = events.result  # set once the stream is done: records with prompt_logprobs wait for it
        if result is None or result.prompt_logprobs is None:
            return None
        return prompt_records(result.prompt_tokens[row], result.prompt_logprobs[row], token_texts)

    for ev in said_of_lines(iter(events), [lines[i] for i in line_of], where):
        tokens[ev.row].append(ev.token)
        row_text, row_scores = texts[ev.row], scores[ev.row]
        if ev.text is not None and row_text is not None:
            row_text.append(ev.text)
        if ev.logprobs is not None and row_scores is not None:
            row_scores += token_records([ev.token], [ev.logprobs], token_texts)
        if ev.finish_reason is not None:
            ended[ev.row] = (ev.finish_reason, ev.stopped_by)
            left[line_of[ev.row]] -= 1
            if not wait and left[line_of[ev.row]] == 0:
                yield record(line_of[ev.row])
    own = own_fields(events.result)
    for i in range(len(lines)):  # max_new_tokens=0: the loop yields nothing, and every row ends by length
        if wait or left[i] > 0:
            yield record(i, own)


def _own_result(strategy: str) -> bool:
    """Whether `strategy`'s result may have fields of its own: any strategy's but the core's `sample`."""
    return parse_stage(strategy, what="--strategy")[0] != "sample"
