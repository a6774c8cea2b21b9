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


class TestTopH(_Truncation):
    spec = ("top_h", {"h": 0.5})


class TestTopHFewCandidates(_Truncation):  # 2 * top_n < V = 64: the fast path is taken
    spec = ("top_h", {"h": 1.0, "top_n": 3})


class TestTopHFastPath(_Truncation):
    spec = ("top_h", {"h": 0.7, "top_n": 20})


class TestXTC(_Truncation):
    spec = ("xtc", {"probability": 0.5, "threshold": 0.05})


class TestXTCSpecialTokens(_Truncation):
    spec = ("xtc", {"probability": 0.5, "threshold": 0.05, "special_tokens": [0, 3]})


def test_every_sampler_of_this_distribution_has_a_suite() -> None:
    from decodekit import get_registry

    suites = {
        cls.spec[0]  # type: ignore[index]  # a tuple: the condition below checks it
        for cls in globals().values()
        if isinstance(cls, type) and issubclass(cls, _Truncation) and isinstance(getattr(cls, "spec", None), tuple)
    }
    registered = {
        name for name, entry in get_registry().samplers.items() if entry.distribution == "decodekit-truncation"
    }
    assert registered == suites
