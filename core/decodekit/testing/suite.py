"""What the processor and selector checks share: how a sampler under test is made, the dtypes and
shapes it is checked on (`KitSettings`, the keywords of `check_processor` and `check_selector`),
and its spec round trip."""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, TypedDict

import torch
from torch import Tensor

from decodekit.context import DecodeContext
from decodekit.stage import Stage
from decodekit.testing.host_reads import UncheckedError
from decodekit.testing.inputs import FLOAT_DTYPES, ContextFactory, TokenHistory, cases

__all__ = ["Conformance", "KitOptions", "KitSettings", "check_spec_round_trip", "each_fake_case", "warn_unchecked"]


class KitOptions(TypedDict, total=False):
    """The keywords `check_processor` and `check_selector` take, each optional: the fields of `KitSettings`."""

    vocab_size: int
    batch_size: int
    dtypes: Sequence[torch.dtype]
    seed: int
    ctx_factory: ContextFactory | None


@dataclass(frozen=True)
class KitSettings:
    """What the sampler checks run on: `batch_size` rows of `vocab_size` logits in each of `dtypes`,
    inputs drawn from `seed`, and contexts made by `ctx_factory` (`DecodeContext` when None)."""

    vocab_size: int = 64
    batch_size: int = 4
    dtypes: Sequence[torch.dtype] = FLOAT_DTYPES
    seed: int = 0
    ctx_factory: ContextFactory | None = None

    @property
    def factory(self) -> ContextFactory:
        """Called as `factory(tokens=, prompt_lengths=, step=, generators=)` to make each context."""
        return self.ctx_factory or DecodeContext

    def history(self, ragged: bool) -> TokenHistory:
        """The token history of the checks, plain or left-padded to ragged prompts (`TokenHistory`)."""
        return TokenHistory(self.batch_size, self.vocab_size, seed=self.seed, ragged=ragged)

    def cases(self, ragged: bool) -> Iterator[tuple[Tensor, TokenHistory]]:
        """Continuous and tied logits in each dtype, with the history (`inputs.cases`)."""
        return cases(self.batch_size, self.vocab_size, self.dtypes, self.seed, ragged)


def check_spec_round_trip(stage: object) -> None:
    """A `Stage` describes itself as JSON and its class rebuilds the same stage from it."""
    if not isinstance(stage, Stage):
        return
    spec = stage.spec()
    assert json.loads(json.dumps(spec)) == spec, f"{stage!r}: spec() {spec!r} does not survive JSON"
    assert spec["name"] == stage.name, f"{stage!r}: spec() names {spec['name']!r}, expected {stage.name!r}"
    rebuilt = type(stage)(**spec["params"])
    assert rebuilt.spec() == spec, f"{stage!r}: rebuilt from its spec as {rebuilt.spec()!r}, expected {spec!r}"


def each_fake_case(settings: KitSettings, check: Callable[[Tensor, TokenHistory, ContextFactory], None]) -> None:
    """`check(logits, history, factory)` on the logits of each dtype, with a plain and a ragged history:
    the inputs of a check on fake tensors (where only shapes, dtypes and the history's form count)."""
    for ragged in (False, True):
        for logits, history in settings.cases(ragged):
            check(logits, history, settings.factory)


def warn_unchecked(check: Callable[[], None]) -> None:
    """Run a host-read check outside pytest; one that cannot run on fake tensors is a warning, not a pass."""
    try:
        check()
    except UncheckedError as exc:
        warnings.warn(f"host reads not checked: the stage cannot run on fake tensors: {exc}", stacklevel=3)


class Conformance:
    """Base of the pytest suites: set `spec = (name, params)` for a registered sampler, or define `make()`."""

    vocab_size: ClassVar[int] = 64
    batch_size: ClassVar[int] = 4
    dtypes: ClassVar[tuple[torch.dtype, ...]] = FLOAT_DTYPES
    seed: ClassVar[int] = 0
    spec: ClassVar[tuple[str, dict[str, Any]] | None] = None  # (name, params) of a registered sampler
    # Why the stage must read a value back from the device in its step (a loop as long as something in
    # the history, say); the host-read test is then skipped with this reason. Empty: it must not.
    reads_back: ClassVar[str] = ""

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

    @property
    def settings(self) -> KitSettings:
        """The class's shapes, dtypes and seed, with `make_context` as the context factory."""
        return KitSettings(self.vocab_size, self.batch_size, self.dtypes, self.seed, self.make_context)

    def test_spec_round_trip(self) -> None:
        check_spec_round_trip(self.make())

    def _unless_reads_back(self, check: Callable[[], None]) -> None:
        """Run a host-read check, skipped (never passed) when the stage declares `reads_back` or cannot run
        on fake tensors."""
        import pytest

        if self.reads_back:
            pytest.skip(f"reads back in its step, as declared: {self.reads_back}")
        try:
            check()
        except UncheckedError as exc:
            pytest.skip(f"host reads not checked: the stage cannot run on fake tensors: {exc}")
