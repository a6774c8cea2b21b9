"""How many sequences of one prompt `decodekit generate` decodes: `-n N` samples, or the N best beams.

Beam search is deterministic, so N copies of a prompt would decode N identical beams. Under a strategy that returns
hypotheses (beam's `num_return_sequences`, or a plugin's, such as vLLM's `best_of`), `-n N` (or a checkpoint's
`num_return_sequences`) asks for the N best of one decoded prompt instead; beam's must fit among its `num_beams`, a
plugin's within its own limits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from decodekit.errors import DecodekitError
from decodekit_cli.errors import CliError
from decodekit_cli.logprob_records import TokenTexts, token_records

if TYPE_CHECKING:
    from decodekit.params import Params

__all__ = ["Sequences", "hypotheses", "plan_sequences"]


@dataclass(frozen=True)
class Sequences:
    """The strategy to run (with its `num_return_sequences` set), the prompt copies it decodes, and the hypotheses
    each copy returns (1 for a sampler; `copies * hypotheses` sequences are shown)."""

    strategy: str
    copies: int
    hypotheses: int = 1


def plan_sequences(
    strategy: str,
    n: int,
    source: str | None,
    from_model: bool = False,
    count: str = "-n N with N",
) -> Sequences:
    """`n` sequences under `strategy`. source: how `n` was asked ("-n 3", the model's own ...), None: not at all
    (n is 1, and a strategy with a `num_return_sequences` returns its own). from_model: `n` is a model's default,
    which a `num_return_sequences` given in `--strategy` overrides. count: how the user writes it, for the error."""
    from decodekit.chain_string import parse_stage
    from decodekit.strategies import strategy_params

    params = strategy_params(strategy)
    own = getattr(params, "num_return_sequences", None)
    if own is None:  # a sampler draws each sample from its own copy of the prompt
        return Sequences(strategy, n)
    name, _, kwargs = parse_stage(strategy, what="--strategy")
    given = "num_return_sequences" in kwargs
    if source is None or (given and from_model):
        return Sequences(strategy, 1, int(own))
    if given and own != n:
        raise CliError(
            f"{source} and --strategy {strategy!r}: two counts of {_returned(name)}; allowed: one of them "
            "(-n N sets num_return_sequences=N)"
        )
    beams = getattr(params, "num_beams", None)
    if beams is not None and n > beams:
        raise CliError(
            f"{source}: beam search returns at most its num_beams={beams} best hypotheses (num_return_sequences <= "
            f"num_beams); allowed: {count} <= {beams}{_more_beams(name, params, n)}"
        )
    if given:
        return Sequences(strategy, 1, n)
    counted = _with_count(strategy, n)
    try:  # the strategy's own limits on its count (a plugin's best_of), in its words
        strategy_params(counted)
    except DecodekitError as exc:
        raise CliError(f"{source}: {exc}") from None
    return Sequences(counted, 1, n)


def hypotheses(result: Any, row: int, logprobs: bool, texts: TokenTexts) -> list[dict[str, Any]]:
    """The sequences the strategy returned for the prompt of `row`, best first, as the keywords of a record's
    `sequence` and of a `SampleResult`, each with its score (`logprobs`: whether they were asked for; `texts`: their
    tokens' texts)."""
    found = []
    for h, score in enumerate(result.scores[row]):
        tokens, lps = list(result.sequences[row][h]), result.sequence_logprobs[row][h]
        found.append(
            {
                "text": result.sequence_texts[row][h],
                "tokens": tokens,
                "finish_reason": result.sequence_finish_reasons[row][h],
                "stopped_by": result.sequence_stopped_by[row][h],
                "logprobs": token_records(tokens, lps, texts) if logprobs and lps is not None else None,
                "score": score,
            }
        )
    return found


def _more_beams(name: str, params: Params, n: int) -> str:
    """The refusal's other way out: the strategy with `num_beams=n` and its other options, where its declared
    bounds take n, else why not (whether the device holds n beams is the run's own check, which names the most)."""
    from decodekit.strategies import strategy_params

    values = {"num_beams": n, **params.model_dump(exclude_defaults=True, exclude={"num_beams"})}
    more = f"{name}({', '.join(f'{k}={v!r}' for k, v in values.items())})"
    try:
        strategy_params(more)
    except DecodekitError as exc:
        return f" ({exc})"
    return f", or more beams: --strategy {more!r}"


def _returned(name: str) -> str:
    return "the hypotheses beam search returns" if name == "beam" else f"the sequences strategy {name!r} returns"


def _with_count(strategy: str, n: int) -> str:
    """`strategy` with `num_return_sequences=n` added: "beam" -> "beam(num_return_sequences=3)"."""
    text = strategy.strip()
    if not text.endswith(")"):
        return f"{text}(num_return_sequences={n})"
    head = text[:-1].rstrip()
    return f"{head}{'' if head.endswith('(') else ', '}num_return_sequences={n})"
