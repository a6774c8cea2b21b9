"""`generate --input prompts.jsonl`: the file as numbered lines, and each line as a `PromptLine`.

Lines are split on the byte `\\n` only: U+2028, U+0085 and a lone `\\r` are characters of a line,
not ends of one, so line numbers (the default ids and seeds) are what an editor or `wc -l` counts.
Each line is decoded on its own, so invalid UTF-8 is that line's problem; a UTF-8 byte-order mark
at the start of the file is skipped. Blank lines are no prompts and get no record.
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import Field, StrictBool

from decodekit.errors import DecodekitError, ParameterError
from decodekit.params import Params, validate_params
from decodekit_cli.errors import CliError
from decodekit_cli.grammar_options import NESTING

__all__ = [
    "BOM",
    "InputLine",
    "LineError",
    "PromptLine",
    "file_digest",
    "input_lines",
    "input_path",
    "is_stdin",
    "parse_line",
    "read_input",
]

BOM = b"\xef\xbb\xbf"
PROMPT_FIELDS = "a 'prompt' (text) or a 'prompt_token_ids' (a list of token ids)"
# Other libraries' request fields that a line has no field for, and what gives them (`stop_token_ids` was "did you
# mean 'prompt_token_ids'?", vLLM's `min_tokens` "'max_new_tokens'?", llama-server's `cache_prompt` "'prompt'?" and its
# `mirostat: 2` "chain": "mirostat(2)", the mode read as mirostat's tau).
OTHER_FIELDS = {
    "min_tokens": 'vLLM\'s min_tokens is a stage of the line\'s chain: "chain": "min_new_tokens(n, [eos ids])"',
    "ignore_eos": "--ignore-eos, for every line",
    "messages": "a chat goes through the model's chat template first: give the ids it returns as prompt_token_ids",
    "stop_token_ids": 'a line stops at the model\'s end-of-text ids (none under --ignore-eos) and its "stop" strings',
    "do_sample": 'do_sample false is the line\'s "chain": "greedy"',
    "typical_p": 'a sampler is a stage of the line\'s chain: "chain": "typical(mass)"',
    "n_predict": 'llama.cpp\'s n_predict is "max_new_tokens"',
    "n_probs": 'llama.cpp\'s n_probs is "logprobs": the record\'s "top"; its post_sampling_probs, "processed_top"',
    "post_sampling_probs": 'the "logprobs" records hold both: "top" (the model\'s), "processed_top" (after the chain)',
    "samplers": "llama.cpp's samplers are the stages of the line's \"chain\", in that order",
    "repeat_penalty": 'llama.cpp\'s repeat_penalty is the line\'s "chain": "repetition_penalty(r, 64)"',
    "repeat_last_n": 'llama.cpp\'s repeat_last_n is the penalty stage\'s window: "chain": "repetition_penalty(r, n)"',
    "mirostat": 'llama.cpp\'s mirostat 1 is "chain": "temperature(t) | mirostat(tau, eta)", 2 "temperature(t) | '
    'mirostat_v2(tau, eta)"',
    "cache_prompt": "a job prefills a prefix its lines share once, unasked",
}
STDIN_HINT = (
    'reading prompt lines from standard input (one JSON object per line, such as {"prompt": "ROMEO:"}); end with Ctrl-D'
)


def _optional(description: str, allowed: str, **bounds: Any) -> Any:
    """A line's optional field (null: the command's option) and what its error says is allowed: the bounds that
    `dk.validate` checks, and what null means, which its type alone cannot say (`decodekit.params.allowed_values`
    reads it)."""
    return Field(None, description=description, json_schema_extra={"allowed": allowed}, **bounds)


class PromptLine(Params):
    """One line of the input file; what it leaves out comes from the command's options.

    seed, max_new_tokens, n, logprobs and prompt_logprobs are checked by `dk.validate`, whose bounds are the
    decoder's own.
    """

    # Exactly one of the two (`_one_prompt`); ids are a field of their own, as vLLM's `prompt_token_ids`, so a
    # Parquet or Arrow column stays one type. Their range needs the model: `batch_decode` checks it.
    prompt: str | None = Field(
        None,
        min_length=1,
        description="text to continue",
        json_schema_extra={"allowed": "a non-empty string (token ids: prompt_token_ids)"},
    )
    prompt_token_ids: list[int] | None = Field(
        None,
        min_length=1,
        description="token ids to continue, as the model's tokenizer would give them (in place of prompt)",
        json_schema_extra={"allowed": "a non-empty list of token ids (integers 0 <= id < the model's vocab_size)"},
    )
    id: str | int | None = _optional("names the result; default: the line number", "a string or an integer")
    seed: int | None = _optional(
        "this prompt's own seed; default: derived from --seed", "an integer 0 <= seed < 2**64, or null (from --seed)"
    )
    max_new_tokens: int | None = _optional("default: --max-new-tokens", "an integer >= 0, or null")
    n: int | None = _optional(
        "sequences of this prompt: samples, or beam search's best beams; default: -n",
        "an integer n >= 1, or null (-n's count)",
        ge=1,
    )
    chain: str | list[Any] | dict[str, Any] | None = _optional(
        "a chain string or a JSON chain spec (its list, or its JSON text); default: --chain (or the flags)",
        "a chain string, or a JSON chain spec (a list of stage objects, or its JSON text)",
    )
    logprobs: int | None = _optional(
        "the generated tokens' logprobs, with the top n; default: --logprobs", "an integer >= 0, or null"
    )
    prompt_logprobs: int | None = _optional(
        "the prompt tokens' logprobs, with the top n; default: --prompt-logprobs", "an integer >= 0, or null"
    )
    stop: str | list[str] | None = _optional(
        "stop strings ending this line's text (lm-eval's `until`, vLLM's per-request `stop`); default: --stop",
        "a non-empty string or a list of them, or null (--stop's)",
    )
    include_stop: StrictBool | None = _optional(
        "keep the stop string that ended this line's text (vLLM's include_stop_str_in_output); default: --include-stop",
        "true or false, or null (--include-stop's)",
    )
    # decodekit-grammar: a grammar this line's text follows, put first in its chain (at most one of them)
    json_schema: dict[str, Any] | StrictBool | str | None = _optional(
        "a JSON Schema (an object or true, or its JSON text)", "a JSON Schema (an object or true, or its JSON text)"
    )
    regex: str | None = _optional("a regular expression the whole text matches", "a string")
    grammar: str | None = _optional("a Lark grammar (its rule `start`)", "a string (Lark's grammar)")
    gbnf: str | None = _optional("a GBNF grammar (llama.cpp's; its rule `root`)", "a string (GBNF's grammar)")


@dataclass(frozen=True)
class InputLine:
    """A non-blank line of the input file, as bytes, with its 1-based number."""

    number: int
    data: bytes


class LineError(Exception):
    """Why a line yields an error record: `kind` is its `error.type` (an exception's class name)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind

    @classmethod
    def of(cls, exc: Exception) -> LineError:
        """The error record of an exception; a CliError wrapping a decodekit error takes its type."""
        if isinstance(exc, LineError):
            return exc
        cause = exc.__context__ if isinstance(exc, CliError) else None
        kind = type(cause if isinstance(cause, DecodekitError) else exc).__name__
        return cls("ParameterError" if kind == "CliError" else kind, " ".join(str(exc).split()))


# Files a data set often comes as that are no text: split on their newline bytes, they would be lines of garbage.
NOT_TEXT = {
    b"PAR1": (
        "a Parquet file",
        "its rows go through decodekit_ray.generate(ray.data.read_parquet(...)) in Python (docs/scale-out.md)",
    ),
    b"\x1f\x8b": ("gzip-compressed", "decompress it first (gunzip -k FILE)"),
    b"\x28\xb5\x2f\xfd": ("zstd-compressed", "decompress it first (zstd -d FILE)"),
}


def read_input(path: Path) -> bytes:
    """The whole input file, or stdin for `-`; a path that cannot be read is a `CliError` naming it."""
    if is_stdin(path):
        if sys.stdin.isatty():  # a terminal waits for typed lines: say so, not a silent wait
            print(STDIN_HINT, file=sys.stderr)
        data = sys.stdin.buffer.read()  # bytes: lines are split and decoded one by one, as a file's are
    else:
        try:
            data = path.read_bytes()
        except IsADirectoryError:
            raise CliError(f"--input {str(path)!r} is a directory; allowed: a JSONL file") from None
        except OSError as exc:
            raise CliError(f"--input {str(path)!r}: cannot read it: {exc.strerror}") from None
    if (found := not_text(data)) is not None:  # one error, not an error per line of garbage
        raise CliError(f"--input {str(path)!r} is {found}")
    return data


def not_text(head: bytes) -> str | None:
    """Where a file starting with `head` is a Parquet or compressed file (its first bytes tell), what it is, what is
    allowed and what to do; else None."""
    for magic, (kind, how) in NOT_TEXT.items():
        if head.startswith(magic):
            return f"{kind}; allowed: a JSONL file (one JSON object a line); {how}"
    return None


def input_path(given: str) -> Path:
    """`--input`'s value as a path: "-" stays stdin; another path to a file named "-" (`./-`) is made
    absolute, since `Path("./-")` is `Path("-")`."""
    path = Path(given)
    return path.absolute() if given != "-" and is_stdin(path) else path


def is_stdin(path: Path) -> bool:
    """`--input -`: the shell convention for stdin (a file named "-" is given by its full path)."""
    return str(path) == "-"


def file_digest(data: bytes) -> str:
    """The input's fingerprint, recorded with the output so `--resume` knows its input."""
    return hashlib.sha256(data).hexdigest()


def input_lines(data: bytes) -> list[InputLine]:
    """The non-blank lines of `data`, split on b"\\n" only, numbered from 1; a leading BOM is skipped."""
    data = data.removeprefix(BOM)
    return [InputLine(n, raw) for n, raw in enumerate(data.split(b"\n"), 1) if raw.strip()]


_JSON_KINDS = {list: "array", str: "string", int: "number", float: "number", bool: "boolean", type(None): "null"}
"""What JSON calls the values a line may be that are not objects (`json.loads` gives these types)."""


def parse_line(line: InputLine, job_chain: str = "") -> tuple[str | int, PromptLine | LineError]:
    """The line's id (its own, or its number) and the prompt it asks for, or why it is not one. job_chain: the
    chain a line without its own gets, which a hint to write one names (a line's chain replaces it)."""
    try:
        text = line.data.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad = line.data[exc.start]
        return line.number, LineError(
            "UnicodeDecodeError", f"invalid UTF-8: byte 0x{bad:02x} at column {exc.start + 1}; allowed: UTF-8 text"
        )
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        return line.number, LineError("JSONDecodeError", f"not JSON: {exc.msg} at column {exc.colno}")
    except RecursionError:  # Python's parser, past its recursion limit: this line's error, not the job's
        return line.number, LineError("ParameterError", f"JSON nested too deeply to read; allowed: {NESTING}")
    key = _own_id(value, line.number)
    if not isinstance(value, dict):
        return key, LineError(
            "ParameterError", f"a JSON {_JSON_KINDS[type(value)]}; allowed: an object with {PROMPT_FIELDS}"
        )
    if other := next((k for k in value if k in OTHER_FIELDS), None):  # before a close name misleads
        allowed = ", ".join(PromptLine.model_fields)
        message = f"prompt line: unknown parameter {other}; allowed parameters: {allowed}; {OTHER_FIELDS[other]}"
        return key, LineError("ParameterError", message)
    if value.get("seed") == -1:  # llama-server's "a fresh seed": the decoder's range check alone would not say so
        return key, LineError(
            "ParameterError",
            "prompt line: seed=-1 is invalid; allowed: an integer 0 <= seed < 2**64, or null (from --seed); "
            "llama.cpp's -1 (a fresh seed) is leaving out the line's seed and --seed",
        )
    try:
        item = validate_params("prompt line", PromptLine, value)
        assert isinstance(item, PromptLine)
        _one_prompt(item)
    except DecodekitError as exc:
        error = LineError.of(exc)
        return key, LineError(error.kind, f"{error}{_chain_hint(value, job_chain)}")
    return key, item


def _chain_hint(value: dict[str, Any], job_chain: str) -> str:
    """Where a line names a sampler as a field (vLLM's per-request `temperature`, `top_p`), where it goes: its chain,
    which replaces the job's (vLLM keeps a model's other defaults: here the line writes them)."""
    from decodekit.plugins import get_registry, sampler_call

    samplers = get_registry().samplers
    given = {name: v for name, v in value.items() if name in samplers and name not in PromptLine.model_fields}
    for name, v in given.items():  # a stage the sampler refuses (llama.cpp's logit_bias pairs): why, not that chain
        try:
            sampler_call(name, (v,), {})
        except DecodekitError as exc:
            return f'; a sampler is a stage of the line\'s chain: "chain": "{name}(...)", where {exc}'
    stages = " | ".join(f"{name}({json.dumps(v)})" for name, v in given.items())
    if not stages:
        return ""
    others = [name for name in _stage_names(job_chain) if name not in given]
    hint = f'; a sampler is a stage of the line\'s chain: "chain": {json.dumps(stages)}'
    if not others:
        return hint
    return f"{hint} (it replaces the job's chain, {json.dumps(job_chain)}: give its {', '.join(others)} too)"


def _stage_names(chain: str) -> list[str]:
    """The stages of a chain string a line's own chain would replace (a plain `sample` selector goes without saying)."""
    if not chain:
        return []
    from decodekit_cli.batch_settings import parsed_chain

    parsed = parsed_chain(chain)
    names = [getattr(stage, "name", "") for stage in (*parsed.processors, parsed.selector)]  # a string's: all Stages
    return [name for name in names[:-1] if name] + ([] if names[-1] in ("", "sample") else [names[-1]])


def _one_prompt(item: PromptLine) -> None:
    """A line gives its prompt as text or as token ids: one of them, not both."""
    if item.prompt is not None and item.prompt_token_ids is not None:
        raise ParameterError(
            f"prompt line: prompt={item.prompt!r} and prompt_token_ids={item.prompt_token_ids} are both given; "
            "allowed: one of them"
        )
    if item.prompt is None and item.prompt_token_ids is None:
        raise ParameterError(
            f"prompt line: missing required parameter prompt or prompt_token_ids; allowed: {PROMPT_FIELDS}, one of them"
        )


def _own_id(value: Any, number: int) -> str | int:
    """The id a line names, if it names a usable one (a string or an int, not a bool); else its number."""
    own = value.get("id") if isinstance(value, dict) else None
    return own if isinstance(own, (str, int)) and not isinstance(own, bool) else number
