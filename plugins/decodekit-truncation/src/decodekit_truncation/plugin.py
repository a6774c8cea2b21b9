"""Registers the truncation samplers; imports no torch (implementations load on first use)."""

from __future__ import annotations

from decodekit import hookimpl
from decodekit.hookspecs import SamplerRegistrar
from decodekit_truncation.params import (
    EpsilonParams,
    EtaParams,
    MinPParams,
    TopAParams,
    TopHParams,
    TopNSigmaParams,
    TypicalParams,
    XTCParams,
)


@hookimpl
def register_samplers(register: SamplerRegistrar) -> None:
    register("min_p", "decodekit_truncation.min_p:MinP", MinPParams, "Keep tokens with p >= p_min * p_max")
    register(
        "typical",
        "decodekit_truncation.typical:Typical",
        TypicalParams,
        "Locally typical sampling: keep the tokens whose surprise is closest to the entropy, up to a mass",
    )
    register("epsilon", "decodekit_truncation.epsilon:Epsilon", EpsilonParams, "Remove tokens with p < epsilon")
    register(
        "eta",
        "decodekit_truncation.eta:Eta",
        EtaParams,
        "Remove tokens with p < min(epsilon, sqrt(epsilon) * exp(-entropy))",
    )
    register(
        "top_n_sigma",
        "decodekit_truncation.top_n_sigma:TopNSigma",
        TopNSigmaParams,
        "Keep tokens whose logit is >= max - n * std of the logits",
    )
    register("top_a", "decodekit_truncation.top_a:TopA", TopAParams, "Keep tokens with p >= a * p_max**2")
    register(
        "top_h",
        "decodekit_truncation.top_h:TopH",
        TopHParams,
        "Top-H: keep the most probable tokens while their entropy terms stay within h times the top-n entropy",
    )
    register(
        "xtc",
        "decodekit_truncation.xtc:XTC",
        XTCParams,
        "Exclude top choices: with some chance, remove all tokens with p >= threshold but the least probable",
    )
