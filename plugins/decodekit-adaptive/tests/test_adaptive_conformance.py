"""The conformance kit on the adaptive samplers, with the chi-square test of each selector."""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import Tensor

import decodekit as dk
from decodekit.testing import ProcessorConformance, SelectorConformance


class TestDynamicTemperature(ProcessorConformance):
    dtypes: ClassVar[tuple[torch.dtype, ...]] = (torch.float32, torch.bfloat16)

    def make(self) -> Any:
        return dk.create("dynamic_temperature", temp=0.7, delta=0.5, exponent=1.5)


class TestDynamicTemperatureGreedy(ProcessorConformance):
    def make(self) -> Any:
        return dk.create("dynamic_temperature", temp=0.0, delta=0.0)


class TestGumbel(SelectorConformance):
    def make(self) -> Any:
        return dk.create("gumbel")

    def distribution(self, logits: Tensor) -> Tensor:
        return logits.double().softmax(-1)


class TestMirostatV2(SelectorConformance):
    """A fresh context per draw: mu = 2 * tau = 4 bits, so tokens with p < 1/16 are cut before sampling."""

    def make(self) -> Any:
        return dk.create("mirostat_v2", tau=2.0, eta=0.1)

    def distribution(self, logits: Tensor) -> Tensor:
        p = logits.double().softmax(-1)
        p = torch.where(p >= 2.0**-4, p, 0.0)
        return p / p.sum(-1, keepdim=True)


class TestAdaptiveP(SelectorConformance):
    """A fresh context per draw: the average starts at the target, so the adapted target is the target itself and
    the draw is from softmax(5 - 10 d^2 / (1 + d)), d = |p - 0.3| / 0.3, over the tokens not removed."""

    def make(self) -> Any:
        return dk.create("adaptive_p", target=0.3, decay=0.9)

    def distribution(self, logits: Tensor) -> Tensor:
        x = logits.double()
        d = (x.softmax(-1) - 0.3).abs() / 0.3
        return torch.where(x == -torch.inf, -torch.inf, 5 - 10 * d * d / (1 + d)).softmax(-1)


class TestMirostat(SelectorConformance):
    """A fresh context per draw, mu = 2 * tau = 2 bits. On the default row (logits 2, 1, 0.5, -inf, -1, 1) the
    Zipf estimate is s = 1.507 and k = (0.507 * 2^2 / (1 - 6^-0.507))^(1/1.507) = 2.25: the top two, and the
    token tied with the second."""

    def make(self) -> Any:
        return dk.create("mirostat", tau=1.0, eta=0.1)

    def distribution(self, logits: Tensor) -> Tensor:
        x = logits.double()
        cut = x.sort(-1, descending=True).values[:, 1:2]
        p = torch.where(x >= cut, x.softmax(-1), 0.0)
        return p / p.sum(-1, keepdim=True)
