"""The decode loop: `dk.generate` and `dk.stream`, and the "sample" strategy behind them (its steps:
`decodekit.engine.sample_steps`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from typing_extensions import Unpack

from decodekit.engine import Decoding, sample_steps
from decodekit.model import Model
from decodekit.params import Params
from decodekit.prompts import Prompts
from decodekit.request import DecodeOptions
from decodekit.results import Generation
from decodekit.strategies import EventStream, bind, run_decode

__all__ = ["generate", "sample_policy", "stream"]


def sample_policy(d: Decoding, params: Params) -> Iterator[None]:
    """The "sample" strategy: one token per row per step from the chain's selector."""
    d.open()  # now, not in a generator: `stream` refuses rows that cannot fit at its call
    return sample_steps(d)


def stream(model: Model, prompts: Prompts, *, strategy: str = "sample", **options: Any) -> EventStream:
    """Yield one `TokenEvent` per row per token, as soon as the strategy settles it; once exhausted, the iterator's
    `result` is the whole `Generation`. strategy: a registered decode strategy ("sample", "beam(num_beams=4)", ...),
    its own options also by keyword; the others are `DecodeOptions` (docs/concepts.md, "The decode engine")."""
    request, bound = bind(model, prompts, strategy, options, "stream" if strategy == "sample" else "")
    return EventStream(Decoding(request, bound.name, events=True), bound)


def generate(model: Model, prompts: Prompts, **options: Unpack[DecodeOptions]) -> Generation:
    """Generate up to `max_new_tokens` per row; the options are `stream`'s (`DecodeOptions`). A small model on the
    CPU decodes on one torch thread unless you chose another count (`decodekit.threads`: how, and why)."""
    return run_decode(model, prompts, "sample", options, "generate")
