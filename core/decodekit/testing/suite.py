"""What the processor and selector suites share: how a sampler under test is made, the dtypes and
shapes it is checked on, and its spec round trip."""

from __future__ import annotations

import json
from typing import Any, ClassVar

import torch

from decodekit.context import DecodeContext
from decodekit.stage import Stage
from decodekit.testing.inputs import FLOAT_DTYPES

__all__ = ["Conformance", "check_spec_round_trip"]


def check_spec_round_trip(stage: object) -> None:
    """A `Stage` describes itself as JSON and its class rebuilds the same stage from it."""
    if not isinstance(stage, Stage):
        return
    spec = stage.spec()
    assert json.loads(json.dumps(spec)) == spec, f"{stage!r}: spec() {spec!r} does not survive JSON"
    assert spec["name"] == stage.name, f"{stage!r}: spec() names {spec['name']!r}, expected {stage.name!r}"
    rebuilt = type(stage)(**spec["params"])
    assert rebuilt.spec() == spec, f"{stage!r}: rebuilt from its spec as {rebuilt.spec()!r}, expected {spec!r}"


class Conformance:
    """Base of the pytest suites: set `spec = (name, params)` for a registered sampler, or define `make()`."""

    vocab_size: ClassVar[int] = 64
    batch_size: ClassVar[int] = 4
    dtypes: ClassVar[tuple[torch.dtype, ...]] = FLOAT_DTYPES
    seed: ClassVar[int] = 0
    spec: ClassVar[tuple[str, dict[str, Any]] | None] = None  # (name, params) of a registered sampler

    def make(self) -> Any:
        """The sampler under test: `dk.create(name, **params)` for `spec = (name, params)`, or define make()."""
        if self.spec is None:
            raise NotImplementedError(f"{type(self).__name__} must set spec or define make() returning the sampler")
        from decodekit.plugins import create

        name, params = self.spec
        return create(name, **params)

    def make_context(self, **fields: Any) -> DecodeContext:
        """Wraps each history the checks build (tokens, prompt_lengths, step, generators) in a context."""
        return DecodeContext(**fields)

    def test_spec_round_trip(self) -> None:
        check_spec_round_trip(self.make())
