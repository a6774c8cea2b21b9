"""Speculative decoding's acceptance figures as the command line shows them: `generate`'s status line from a
result's properties, a batch job's closing line from its records' `drafted`, `accepted` and `draft_rounds`."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

__all__ = ["Acceptance", "DraftTotals"]


@dataclass(frozen=True)
class Acceptance:
    """A speculative run's figures over all samples (None: nothing was drafted): accepted / drafted tokens, and the
    tokens a round that drafted emitted on average (its accepted drafts and the target's own token)."""

    rate: float | None
    mean_length: float | None

    def shown(self) -> str:
        if self.rate is None or self.mean_length is None:
            return "nothing drafted"
        return (
            f"{self.rate:.0%} of drafts accepted · {self.mean_length:.2f} tokens per round"  # the line fits 80 columns
        )

    names: ClassVar[tuple[str, str]] = ("acceptance_rate", "mean_acceptance_length")  # the result's, and the JSON's

    def records(self) -> dict[str, float | None]:
        return dict(zip(self.names, (None if x is None else round(x, 4) for x in (self.rate, self.mean_length))))


@dataclass
class DraftTotals:
    """The draft counts of a batch job's records, summed as they are written (a record of several samples counts
    each); `acceptance` is None where no record has them (a strategy that does not draft)."""

    drafted: int = 0
    accepted: int = 0
    rounds: int = 0
    counted: bool = False  # a record had them

    COUNTS: ClassVar[tuple[str, str, str]] = ("drafted", "accepted", "draft_rounds")  # the speculative result's fields

    @classmethod
    def of(cls, records: Iterable[dict[str, Any]]) -> DraftTotals:
        totals = cls()
        for record in records:
            totals.add(record)
        return totals

    def add(self, record: dict[str, Any]) -> None:
        for sequence in record.get("samples", [record]):
            drafted, accepted, rounds = (sequence.get(name) for name in self.COUNTS)
            if isinstance(drafted, int) and isinstance(accepted, int) and isinstance(rounds, int):
                self.drafted += drafted
                self.accepted += accepted
                self.rounds += rounds
                self.counted = True

    @property
    def acceptance(self) -> Acceptance | None:
        """As the speculative result's `acceptance_rate` and `mean_acceptance_length` give them (1 + accepted per
        round that drafted)."""
        if not self.counted:
            return None
        rate = self.accepted / self.drafted if self.drafted else None
        return Acceptance(rate, 1 + self.accepted / self.rounds if self.rounds else None)
