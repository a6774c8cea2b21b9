"""Registration, the chain string, parameter errors and the conformance kit of the watermark."""

from __future__ import annotations

from typing import ClassVar

import pytest
import torch

from decodekit.testing import ProcessorConformance
from decodekit.testing.registry import check_bad_parameters, check_chain_string, check_registered


def test_registered_by_this_distribution() -> None:
    check_registered("watermark", distribution="decodekit-watermark", kind="processor")


def test_chain_string_fills_parameters_in_order_and_round_trips() -> None:
    check_chain_string(
        "watermark(2.5, 0.3, 7, 'selfhash', 2)",
        {"bias": 2.5, "greenlist_ratio": 0.3, "hashing_key": 7, "seeding_scheme": "selfhash", "context_width": 2},
    )


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"greenlist_ratio": 1.0}, ["greenlist_ratio=1.0", "less than 1"]),
        ({"greenlist_ratio": 0.0}, ["greenlist_ratio=0.0", "greater than 0"]),
        ({"bias": float("inf")}, ["bias=inf", "finite"]),
        ({"seeding_scheme": "minhash"}, ["seeding_scheme='minhash'", "lefthash", "selfhash"]),
        ({"context_width": 0}, ["context_width=0", "1 <= context_width"]),
        ({"hashing_key": -(2**63) - 1}, ["hashing_key=-9223372036854775809", "-9223372036854775808 <= hashing_key"]),
    ],
)
def test_bad_parameters_name_parameter_value_and_range(params: dict[str, object], expected: list[str]) -> None:
    check_bad_parameters("watermark", params, expected)


class TestWatermark(ProcessorConformance):
    vocab_size: ClassVar[int] = 40
    dtypes: ClassVar[tuple[torch.dtype, ...]] = (torch.float32, torch.bfloat16)
    reads_back = "each row's green list is drawn by a generator seeded from its tokens, on the host (stage.py)"
    spec = ("watermark", {"bias": 2.0})


class TestWatermarkSelfHash(TestWatermark):
    spec = ("watermark", {"bias": 2.0, "seeding_scheme": "selfhash", "context_width": 2})
