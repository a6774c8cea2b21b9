"""A policy of one's own over the scored caches' machinery (docs/caches.md, "A scoring policy of your own"): one that
reads attention (`observes`) over a cache class without `observe` is refused when the cache is made, naming the class
to subclass. Until 2026-12-06 it decoded one forward and then blamed the model ("needs a model that calls observe"),
which was decodekit's own GPT. And an observing cache whose policy reads no query of a long block (`Policy.rows`'
default of 0, key-norm's) compresses its prompt by the scores it has (it raised a reshape's RuntimeError)."""

from __future__ import annotations

import pytest
from decodekit_cache_scored.cache import ObservingScoredCache, ScoredCache
from decodekit_cache_scored.params import ScoredParams
from decodekit_cache_scored.policies import H2O, KeyNorm

import decodekit as dk

SPEC = dk.CacheSpec(n_layers=1, n_heads=2, n_kv_heads=2, head_dim=4, batch_size=1, capacity=8, max_positions=32)


class Unobserved(ScoredCache):
    name = "unobserved"
    policy = H2O()


def test_a_policy_that_reads_attention_over_a_cache_that_never_sees_it_is_refused() -> None:
    with pytest.raises(dk.PluginError) as refused:
        Unobserved(SPEC, ScoredParams(budget=4, recent=1, sinks=1))
    assert str(refused.value) == (
        "cache unobserved: policy H2O reads attention (observes=True), but Unobserved has no observe(), so no model "
        "hands it the queries; allowed: a subclass of decodekit_cache_scored.cache.ObservingScoredCache"
    )


class Observed(ObservingScoredCache):
    name = "observed"
    policy = H2O()


class NormObserved(ObservingScoredCache):  # observing with a policy that does not: SnapKV's decode="knorm" does it
    name = "norm_observed"
    policy = KeyNorm()


@pytest.mark.parametrize("cls", [Observed, NormObserved])
def test_the_classes_that_fit_their_policy_decode(cls: type[ScoredCache]) -> None:
    model = dk.load_model("tiny-shakespeare")
    out = dk.generate(model, "ROMEO:", cache=lambda spec: cls(spec, ScoredParams(budget=16)), max_new_tokens=40)
    assert len(out.tokens[0]) == 40
