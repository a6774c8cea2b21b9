"""The conformance kit on every truncation sampler (float32 and bfloat16, plain and ragged histories)."""

from __future__ import annotations

from typing import ClassVar

import torch

from decodekit.testing import ProcessorConformance


class _Truncation(ProcessorConformance):
    dtypes: ClassVar[tuple[torch.dtype, ...]] = (torch.float32, torch.bfloat16)


class TestMinP(_Truncation):
    spec = ("min_p", {"p": 0.1})


class TestMinPMinKeep(_Truncation):
    spec = ("min_p", {"p": 0.9, "min_keep": 3})


class TestTypical(_Truncation):
    spec = ("typical", {"mass": 0.5})


class TestTypicalMinKeep(_Truncation):
    spec = ("typical", {"mass": 0.2, "min_keep": 3})


class TestEpsilon(_Truncation):
    spec = ("epsilon", {"epsilon": 0.01})


class TestEta(_Truncation):
    spec = ("eta", {"epsilon": 0.01, "min_keep": 2})


class TestTopNSigma(_Truncation):
    spec = ("top_n_sigma", {"n": 1.0})


class TestTopA(_Truncation):
    spec = ("top_a", {"a": 0.5})


class TestXTC(_Truncation):
    spec = ("xtc", {"probability": 0.5, "threshold": 0.05})


class TestXTCSpecialTokens(_Truncation):
    spec = ("xtc", {"probability": 0.5, "threshold": 0.05, "special_tokens": [0, 3]})
