"""Conformance checks for selectors (`[B, V] -> LongTensor [B]`) and their pytest suite.

What is checked, in every float dtype: token ids `[B]` in range that are never -inf; the same
tokens for the same per-row seeds, whatever the other rows; a view as input; `select_candidates`
equal to the dense call; no failure on rows that cannot be sampled (which a chain then reports);
what a decode step calls reads nothing back from the device (`host_reads`); and, given the
distribution it should draw from, or the one its `distribution` attribute states (speculative decoding
relies on it), a chi-square goodness-of-fit test over many seeded draws.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import torch
from torch import Tensor
from typing_extensions import Unpack

from decodekit.context import DecodeContext, row_generators
from decodekit.stage import Candidates, densify
from decodekit.testing.assertions import NEW_TENSOR, ROW_DRAWS, first_rows, history_kept
from decodekit.testing.host_reads import assert_reads_nothing
from decodekit.testing.inputs import (
    DISTRIBUTION_LOGITS,
    NEG,
    ContextFactory,
    TokenHistory,
    candidates_from,
    has_ties,
    selector_logits,
)
from decodekit.testing.suite import (
    Conformance,
    KitOptions,
    KitSettings,
    check_spec_round_trip,
    each_fake_case,
    warn_unchecked,
)

__all__ = [
    "SelectorConformance",
    "check_selector",
    "check_selector_candidates",
    "check_selector_contract",
    "check_selector_distribution",
    "check_selector_reads_nothing",
    "check_selector_unsampleable",
    "check_selector_view_input",
]

_DRAWS = 20_000  # draws of the chi-square test
_MIN_P_VALUE = 1e-3


def check_selector_contract(selector: Any, logits: Tensor, history: TokenHistory, factory: ContextFactory) -> Tensor:
    """LongTensor `[B]` in range, never a removed token, repeatable, rows independent. Returns the tokens."""
    B, V = logits.shape
    what = f"{selector!r} on {logits.dtype} logits {tuple(logits.shape)}"
    before, ctx = logits.clone(), history.context(factory)
    kept = history_kept(ctx)
    tokens = selector(logits, ctx)
    kept(what)
    assert torch.equal(logits, before), f"{what}: modified its input in place; allowed: {NEW_TENSOR}"
    assert isinstance(tokens, Tensor) and tokens.dtype == torch.long, (
        f"{what}: returned {tokens!r}, expected a LongTensor"
    )
    assert tokens.shape == (B,), f"{what}: returned shape {tuple(tokens.shape)}, expected ({B},)"
    assert bool(((tokens >= 0) & (tokens < V)).all()), f"{what}: token ids {tokens.tolist()} outside [0, {V})"
    removed = torch.isneginf(logits.gather(1, tokens[:, None]))  # [B, 1]
    assert not bool(removed.any()), (
        f"{what}: picked a removed (-inf) token in rows {first_rows(removed)}: {tokens.tolist()}"
    )
    again = selector(logits.clone(), history.context(factory))
    assert torch.equal(again, tokens), (
        f"{what}: the same seeds gave {again.tolist()}, then {tokens.tolist()}; allowed: the same picks ({ROW_DRAWS})"
    )
    for b in range(B):
        alone = selector(logits[b : b + 1].clone(), history.context(factory, [b]))
        assert int(alone[0]) == int(tokens[b]), (
            f"{what}: row {b} picks {int(alone[0])} alone but {int(tokens[b])} in a batch of {B} (same row seed); "
            f"allowed: the same pick ({ROW_DRAWS})"
        )
    perm = list(range(B))[::-1]
    permuted = selector(logits[perm].clone(), history.context(factory, perm))
    assert torch.equal(permuted, tokens[perm]), (
        f"{what}: rows reversed pick {permuted.tolist()}, expected {tokens[perm].tolist()}"
    )
    return tokens


def check_selector_candidates(selector: Any, logits: Tensor, history: TokenHistory, factory: ContextFactory) -> None:
    """`select_candidates`, where defined, picks what the dense call picks on the same logits and seeds."""
    select_candidates = getattr(selector, "select_candidates", None)
    if select_candidates is None:
        return
    B, V = logits.shape
    c = candidates_from(logits, max(2, V // 4))
    tied = "tied " if has_ties(logits) else ""
    what = f"{selector!r}.select_candidates on {tied}{logits.dtype} candidates {tuple(c.values.shape)}"
    ctx = history.context(factory)
    kept = history_kept(ctx)
    fast = select_candidates(c, ctx)
    kept(what)
    assert isinstance(fast, Tensor) and fast.dtype == torch.long and fast.shape == (B,), (
        f"{what}: returned {fast!r}, expected a LongTensor [{B}]"
    )
    dense = selector(densify(c, V), history.context(factory))
    assert torch.equal(fast, dense), (
        f"{what}: picked {fast.tolist()}, the dense call on the same logits and seeds {dense.tolist()}"
    )


def check_selector_reads_nothing(selector: Any, logits: Tensor, history: TokenHistory, factory: ContextFactory) -> None:
    """What a chain's step calls reads nothing back from the device: the selector on logits and
    `select_candidates` on candidates. Raises `host_reads.UncheckedError` when the selector cannot run on fake
    tensors for another reason."""
    assert_reads_nothing(selector, f" on {logits.dtype} logits", selector, logits, history.context(factory))
    select_candidates = getattr(selector, "select_candidates", None)
    if select_candidates is not None:
        c = candidates_from(logits, max(2, logits.shape[1] // 4))
        what = f".select_candidates on {logits.dtype} candidates"
        assert_reads_nothing(selector, what, select_candidates, c, history.context(factory))


def check_selector_view_input(selector: Any, logits: Tensor, history: TokenHistory, factory: ContextFactory) -> None:
    """A strided view as input (every other column of a wider tensor) picks what its contiguous copy picks."""
    view = torch.stack([logits, torch.zeros_like(logits)], -1)[..., 0]
    what = f"{selector!r} on a strided view of {logits.dtype} logits"
    try:
        tokens = selector(view, history.context(factory))
    except RuntimeError as error:
        raise AssertionError(f"{what}: raised {error!r}") from None
    expected = selector(logits.clone(), history.context(factory))
    assert torch.equal(tokens, expected), f"{what}: picked {tokens.tolist()}, its copy {expected.tolist()}"


def check_selector_unsampleable(
    selector: Any, vocab_size: int, history: TokenHistory, factory: ContextFactory, dtype: torch.dtype, seed: int = 0
) -> None:
    """On rows that cannot be sampled (a NaN logit, +inf, every token removed) the selector does not
    fail and returns ids in range, dense and on candidates; the others' tokens are what they are alone;
    and in a chain those rows are a `NumericsError` naming the first of them."""
    from decodekit.chain import Chain
    from decodekit.errors import NumericsError

    B = history.tokens.shape[0]
    logits = selector_logits(B, vocab_size, seed=seed, dtype=dtype)
    bad = {0: float("nan"), 1: float("inf")}  # one logit of row 0 NaN, one of row 1 +inf; row 2 all removed
    for row, value in bad.items():
        if row < B:
            logits[row, vocab_size // 3] = value
    if B > 2:
        logits[2] = NEG
    runs: list[tuple[str, Callable[[DecodeContext], Tensor]]] = [("dense", lambda ctx: selector(logits.clone(), ctx))]
    select_candidates = getattr(selector, "select_candidates", None)
    if select_candidates is not None:
        c = candidates_from(logits, max(2, vocab_size // 4))
        runs.append(("select_candidates", lambda ctx: select_candidates(c, ctx)))
    for path, run in runs:
        what = f"{selector!r} ({path}) on {dtype} logits with rows that cannot be sampled"
        try:
            tokens = run(history.context(factory))
        except Exception as error:
            raise AssertionError(f"{what}: raised {error!r}") from None
        assert tokens.shape == (B,) and bool(((tokens >= 0) & (tokens < vocab_size)).all()), (
            f"{what}: returned {tokens.tolist()}, expected {B} ids in [0, {vocab_size})"
        )
        for b in range(3, B):
            alone = selector(logits[b : b + 1].clone(), history.context(factory, [b]))
            assert int(tokens[b]) == int(alone[0]), f"{what}: row {b} picks {int(tokens[b])}, alone {int(alone[0])}"
    try:
        Chain([], selector=selector)(logits.clone(), history.context(factory))
    except NumericsError as error:
        assert "row 0" in str(error), f"{selector!r} in a chain: {error} names another row than 0"
    else:
        raise AssertionError(f"{selector!r} in a chain: no NumericsError for a NaN row")


def check_selector_distribution(
    selector: Any,
    distribution: Callable[[Tensor], Tensor],
    *,
    logits: Tensor = DISTRIBUTION_LOGITS,
    draws: int = _DRAWS,
    seed: int = 0,
    ctx_factory: ContextFactory | None = None,
) -> None:
    """Chi-square goodness of fit of `draws` seeded picks, dense and on candidates, to `distribution(logits)`.

    logits: `[1, V]`. Categories expected fewer than 5 times are pooled; a token of
    probability 0 must never be drawn. Each draw is one row with its own generator.
    """
    from scipy.stats import chisquare

    factory: ContextFactory = ctx_factory or DecodeContext
    V = logits.shape[1]
    probs = distribution(logits).double()[0]
    assert probs.shape == (V,) and abs(float(probs.sum()) - 1) < 1e-6, f"distribution(logits) is {probs.tolist()}"
    probs = probs / probs.sum()  # float32 probabilities sum to 1 +- 1e-7; scipy's chisquare wants 1.5e-8
    expected = probs * draws
    finite = candidates_from(logits, int(torch.isfinite(logits).sum()), seed=seed)  # every finite token
    candidates = Candidates(finite.values.expand(draws, -1), finite.indices.expand(draws, -1))
    runs: list[tuple[str, Callable[[DecodeContext], Tensor]]] = [
        ("dense", lambda ctx: selector(logits.expand(draws, -1), ctx))
    ]
    select_candidates = getattr(selector, "select_candidates", None)
    if select_candidates is not None:
        runs.append(("select_candidates", lambda ctx: select_candidates(candidates, ctx)))
    for i, (path, run) in enumerate(runs):
        tokens = torch.zeros(draws, 1, dtype=torch.long)
        ctx = factory(tokens=tokens, prompt_lengths=None, step=0, generators=row_generators(seed + i, draws))
        counts = torch.bincount(run(ctx), minlength=V).double()
        what = f"{selector!r} ({path}), {draws} draws from {logits[0].tolist()}"
        impossible = (expected == 0) & (counts > 0)
        assert not bool(impossible.any()), (
            f"{what}: drew tokens of probability 0: {impossible.nonzero().flatten().tolist()}; counts {counts.tolist()}"
        )
        big = expected >= 5
        obs = torch.cat([counts[big], counts[~big].sum(-1, keepdim=True)])
        exp = torch.cat([expected[big], expected[~big].sum(-1, keepdim=True)])
        obs, exp = obs[exp > 0], exp[exp > 0]
        if len(exp) == 1:  # a deterministic selector: every draw is the one possible token
            assert float(obs[0]) == draws, f"{what}: counts {counts.tolist()}, expected {expected.tolist()}"
            continue
        p_value = float(chisquare(obs.numpy(), exp.numpy()).pvalue)
        assert p_value > _MIN_P_VALUE, (
            f"{what}: counts {counts.tolist()} do not fit the expected {[round(e, 1) for e in expected.tolist()]} "
            f"(chi-square p = {p_value:.2g} <= {_MIN_P_VALUE})"
        )


def _stated(selector: object) -> Callable[[Tensor], Tensor] | None:
    """The probabilities a selector's `distribution` attribute promises: softmax of the logits, or all on their first
    maximum (argmax); None where it states none."""
    stated = getattr(selector, "distribution", None)
    if stated == "softmax":
        return lambda logits: logits.double().softmax(-1)
    if stated == "argmax":
        return lambda logits: torch.zeros_like(logits, dtype=torch.double).scatter(
            1, logits.argmax(-1, keepdim=True), 1
        )
    return None


def _check_stated(selector: Any, distribution: Callable[[Tensor], Tensor], seed: int, factory: ContextFactory) -> None:
    """The chi-square test against what the selector's `distribution` attribute states, which a failure names."""
    try:
        check_selector_distribution(selector, distribution, seed=seed, ctx_factory=factory)
    except AssertionError as exc:
        raise AssertionError(
            f"{exc}; allowed: draws as its distribution = {selector.distribution!r} states (speculative decoding "
            "relies on it), or distribution = None"
        ) from None


def _logits(settings: KitSettings, dtype: torch.dtype) -> Tensor:
    return selector_logits(settings.batch_size, settings.vocab_size, seed=settings.seed, dtype=dtype)


def check_selector(
    selector: Any,
    *,
    distribution: Callable[[Tensor], Tensor] | None = None,
    reads_back: str = "",
    **options: Unpack[KitOptions],
) -> None:
    """Every selector check; the chi-square test too when `distribution` (logits -> probabilities) is given, or when
    the selector's `distribution` attribute states one.

    options: as for `check_processor`, the fields of `KitSettings`; so is `reads_back`.
    """
    settings = KitSettings(**options)
    factory = settings.factory
    check_spec_round_trip(selector)
    for ragged in (False, True):
        history = settings.history(ragged)
        for dtype in settings.dtypes:
            logits = _logits(settings, dtype)
            check_selector_contract(selector, logits, history, factory)
            check_selector_view_input(selector, logits, history, factory)
    for logits, history in settings.cases(ragged=False):
        check_selector_candidates(selector, logits, history, factory)
        check_selector_unsampleable(selector, settings.vocab_size, history, factory, logits.dtype, settings.seed)
    if not reads_back:
        warn_unchecked(lambda: each_fake_case(settings, partial(check_selector_reads_nothing, selector)))
    if distribution is not None:
        check_selector_distribution(selector, distribution, seed=settings.seed, ctx_factory=factory)
    elif (stated := _stated(selector)) is not None:
        _check_stated(selector, stated, settings.seed, factory)


class SelectorConformance(Conformance):
    """Subclass and define `make()` (and `distribution()` for the chi-square test, where the selector's `distribution`
    attribute states none)."""

    def distribution(self, logits: Tensor) -> Tensor | None:
        """The probabilities `[1, V]` the selector should draw from on `logits`; None skips the test."""
        return None

    def test_contract_and_rows_independent(self) -> None:
        selector, settings = self.make(), self.settings
        for ragged in (False, True):
            for dtype in self.dtypes:
                check_selector_contract(selector, _logits(settings, dtype), settings.history(ragged), self.make_context)

    def test_view_input(self) -> None:
        selector, settings = self.make(), self.settings
        for dtype in self.dtypes:
            check_selector_view_input(selector, _logits(settings, dtype), settings.history(True), self.make_context)

    def test_candidates_agree_with_dense(self) -> None:
        selector = self.make()
        if not hasattr(selector, "select_candidates"):
            import pytest

            pytest.skip("the selector has no select_candidates")
        for logits, history in self.settings.cases(False):
            check_selector_candidates(selector, logits, history, self.make_context)

    def test_unsampleable_rows(self) -> None:
        selector = self.make()
        for dtype in self.dtypes:
            check_selector_unsampleable(
                selector, self.vocab_size, self.settings.history(False), self.make_context, dtype, self.seed
            )

    def test_reads_nothing_back(self) -> None:
        selector = self.make()
        self._unless_reads_back(lambda: each_fake_case(self.settings, partial(check_selector_reads_nothing, selector)))

    def test_distribution(self) -> None:
        import pytest

        selector = self.make()
        if self.distribution(DISTRIBUTION_LOGITS) is not None:
            check_selector_distribution(selector, self._distribution, seed=self.seed, ctx_factory=self.make_context)
        elif (stated := _stated(selector)) is not None:
            _check_stated(selector, stated, self.seed, self.make_context)
        else:
            pytest.skip("distribution() is not defined, nor the selector's distribution attribute")

    def _distribution(self, logits: Tensor) -> Tensor:
        probs = self.distribution(logits)
        assert probs is not None, f"{type(self).__name__}.distribution() returned None"
        return probs
