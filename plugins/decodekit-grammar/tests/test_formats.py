"""What a schema or pattern means where llguidance and the standards part: JSON Schema's `format` (a format
llguidance does not know is refused naming those it does; `date` takes 29 February of every year), a keyword it
does not implement (refused saying what to change), and `\\d` in `regex` (Unicode's digits) and in a schema's
`pattern` (ECMA-262's: 0-9)."""

from __future__ import annotations

import re

import pytest

import decodekit as dk


def _refusal(fmt: str) -> str:
    with pytest.raises(dk.ParameterError) as error:
        dk.create("json_schema", schema={"type": "string", "format": fmt})
    return str(error.value)


@pytest.mark.parametrize("fmt", ["password", "uri-reference", "binary"])  # pydantic's SecretStr, JSON Schema's, bytes
def test_an_unknown_format_names_the_formats_allowed_and_what_to_change(fmt: str) -> None:
    message = _refusal(fmt)
    found = re.fullmatch(
        rf"json_schema: schema is invalid: Unknown format: {fmt}; allowed formats: (?P<known>[a-z0-9, -]+) "
        r"\(JSON Schema's others are refused\); drop the format, or state the text with a pattern",
        message,
    )
    assert found, message
    known = found["known"].split(", ")
    assert {"date", "date-time", "email", "uuid"} <= set(known) and fmt not in known
    for name in known:  # every format the message names is taken
        dk.create("json_schema", schema={"type": "string", "format": name})


def _admits(model: dk.Model, schema: dict[str, str], text: str, stage: str = "json_schema") -> bool:
    """Whether `schema` (`stage`'s parameters) lets `text` be written: the stage and a regex of `text` alone,
    intersected."""
    grammar = dk.create(stage, **schema) if stage != "json_schema" else dk.create(stage, schema=schema)
    chain = dk.Chain([grammar, dk.create("regex", pattern=re.escape(text))], dk.create("greedy"))
    try:
        texts = dk.generate(model, ["x"], chain=chain, max_new_tokens=len(text.encode()) + 1).text
        return texts is not None and texts[0] == text
    except dk.NumericsError:  # the two grammars leave the row no token: the schema refuses the text
        return False


def test_the_date_format_takes_29_february_of_every_year_as_the_docs_say(shakespeare: dk.Model) -> None:
    """The gap docs/grammar.md states: llguidance's `date` checks a day against its month, not its year."""
    date = {"type": "string", "format": "date"}
    assert _admits(shakespeare, date, '"2024-02-29"') and _admits(shakespeare, date, '"2023-02-28"')
    assert not _admits(shakespeare, date, '"2023-02-30"') and not _admits(shakespeare, date, '"2023-04-31"')
    assert _admits(shakespeare, date, '"2023-02-29"')  # 2023 is no leap year: a strict parser refuses it
    assert _admits(shakespeare, {"type": "string", "format": "date-time"}, '"2023-02-29T00:00:00Z"')


@pytest.mark.parametrize(
    ("schema", "keys"),
    [
        ({"type": "array", "uniqueItems": True}, '["uniqueItems"]'),
        ({"properties": {"a": {"not": {"type": "null"}}}}, '["not"]'),  # nested: llguidance names the key alone
    ],
)
def test_an_unimplemented_keyword_is_refused_saying_what_to_change(schema: dict[str, object], keys: str) -> None:
    with pytest.raises(dk.ParameterError) as error:
        dk.create("json_schema", schema=schema)
    assert str(error.value) == (
        f"json_schema: schema is invalid: Unimplemented keys: {keys}; allowed: a schema without them "
        "(llguidance implements none of them, and ignores none: check what they say after decoding)"
    )


def test_a_digit_is_any_unicode_digit_in_regex_and_0_to_9_in_a_schemas_pattern(bpe_model: dk.Model) -> None:
    """`regex` reads `\\d` as Rust's and Python's `re` do (fullwidth and Arabic-Indic digits too); a schema's
    `pattern` as ECMA-262, JSON Schema's dialect, does. docs/grammar.md says so and to write `[0-9]`."""
    for digits in ["12", "\uff11\uff12", "\u0661\u0662"]:
        assert _admits(bpe_model, {"pattern": r"\d{2}"}, digits, stage="regex")
        assert re.fullmatch(r"\d{2}", digits)  # Python's re agrees
        assert _admits(bpe_model, {"type": "string", "pattern": r"^\d{2}$"}, f'"{digits}"') == (digits == "12")
    assert not _admits(bpe_model, {"pattern": "[0-9]{2}"}, "\uff11\uff12", stage="regex")
