"""Conformance checks for decode strategies (policies over the engine), one property per test.

A strategy plugin subclasses `StrategyConformance` and names its strategy::

    class TestBestOfN(StrategyConformance):
        strategy = "best_of_n(n=3)"

Every check decodes with `dk.decode` (and `dk.stream`) on the kit's `TinyLM` with a letter
tokenizer, so stop strings and text are exercised too: one row per prompt, token ids in range,
`max_new_tokens` respected, finish reasons that say what happened, stop tokens and strings
honoured, a prompt's output the same alone as in its batch, seeds reproducible, the stream equal
to the result, `logprobs=n` reported for every token as the model gives them, and a `max_new_tokens` per
prompt honoured (or refused). Failures name the strategy, the check and the row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import torch

from decodekit.cache import PreallocatedKVCache
from decodekit.errors import ParameterError
from decodekit.model import Model, model_device_dtype
from decodekit.results import Generation
from decodekit.strategies import decode
from decodekit.testing.tiny_lm import Letters, TinyLM

__all__ = ["StrategyConformance", "check_strategy"]

PROMPTS = [[1, 2, 3, 4, 5], [7], [9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9], [4, 2]]
SEEDS = [11, 22, 33, 44]
SEEDED_ROWS = (  # what makes a prompt's output its seed's alone
    "the same tokens (each row draws from its own generator, seeded from its prompt's seed: decoding.pick, "
    "decoding.ctx.generators; never torch's global generator, nor one the batch shares)"
)


def kit_model() -> Model:
    """The kit's model: a two-layer `TinyLM` with rotary positions, GQA and a letter tokenizer."""
    model = TinyLM(26, dim=16, n_layers=2, n_heads=2, n_kv_heads=1, max_positions=64, seed=0)
    model.tokenizer = Letters(26)  # type: ignore[assignment]
    return model


class StrategyConformance:
    """pytest suite for a decode strategy: set `strategy` ("name" or "name(args)"); override `options`
    to decode with options of your own (a chain, a cache: the core's `PreallocatedKVCache` by default, a draft)
    and `make_model` with another model."""

    strategy: ClassVar[str] = ""
    max_new_tokens: ClassVar[int] = 12
    tolerance: ClassVar[float] = 1e-4  # reported log-probabilities agree this closely with one uncached forward

    def make_model(self) -> Model:
        return kit_model()

    def options(self) -> dict[str, Any]:
        """Options every check decodes with (beside its own)."""
        return {}

    def _given(self) -> dict[str, Any]:
        # The core's cache unless `options` names one: the kit needs no cache plugin (`dense` is one).
        return {"max_new_tokens": self.max_new_tokens, "cache": PreallocatedKVCache, **self.options()}

    def _decode(self, prompts: Sequence[Sequence[int]], **options: Any) -> Generation:
        if not self.strategy:
            raise NotImplementedError(f"{type(self).__name__} must set strategy = 'name' or 'name(args)'")
        given = {**self._given(), **options}
        return decode(self.make_model(), [list(p) for p in prompts], strategy=self.strategy, **given)

    def _where(self, check: str, row: int | None = None) -> str:
        return f"strategy {self.strategy}, {check}" + ("" if row is None else f", row {row}")

    def test_rows_ids_lengths_and_reasons(self) -> None:
        """One row per prompt, ids in range, at most max_new_tokens, a finish reason that says what happened."""
        out = self._decode(PROMPTS, seed=SEEDS)
        V, M = self.make_model().spec.vocab_size, self.max_new_tokens
        assert len(out.tokens) == len(PROMPTS), self._where(f"{len(out.tokens)} rows for {len(PROMPTS)} prompts")
        for row, (tokens, reason) in enumerate(zip(out.tokens, out.finish_reasons)):
            where = self._where("output", row)
            assert all(isinstance(t, int) and 0 <= t < V for t in tokens), f"{where}: ids out of [0, {V}): {tokens}"
            assert len(tokens) <= M, f"{where}: {len(tokens)} tokens for max_new_tokens={M}"
            assert reason in ("stop", "length"), f"{where}: finish reason {reason!r}"
            assert reason == "stop" or len(tokens) == M, f"{where}: 'length' after {len(tokens)} of {M} tokens"

    def test_stop_tokens_end_rows(self) -> None:
        """A row ends at its first stop token, which is its last token."""
        free = self._decode(PROMPTS, seed=SEEDS)
        stops = sorted({t[len(t) // 2] for t in free.tokens if t})
        out = self._decode(PROMPTS, seed=SEEDS, stop_tokens=stops)
        for row, (tokens, reason, by) in enumerate(zip(out.tokens, out.finish_reasons, out.stopped_by)):
            where = self._where(f"stop_tokens={stops}", row)
            inner = [t for t in tokens[:-1] if t in stops]
            assert not inner, f"{where}: stop token {inner[0]} inside {tokens}"
            if reason == "stop":
                assert tokens and tokens[-1] in stops and by == tokens[-1], f"{where}: 'stop' but ends {tokens[-1:]}"

    def test_stop_strings_are_honoured(self) -> None:
        """A row whose text reaches a stop string ends there; its text stops before it."""
        free = self._decode(PROMPTS, seed=SEEDS)
        assert free.text is not None, self._where("the kit's model has a tokenizer, but text is None")
        strings = sorted({t[1:3] for t in free.text if len(t) >= 3})
        out = self._decode(PROMPTS, seed=SEEDS, stop_strings=strings)
        assert out.text is not None
        for row, (text, reason, by) in enumerate(zip(out.text, out.finish_reasons, out.stopped_by)):
            where = self._where(f"stop_strings={strings}", row)
            found = [s for s in strings if s in text]
            assert not found, f"{where}: text {text!r} contains stop string {found[0]!r}"
            if reason == "stop" and isinstance(by, str):
                assert by in strings, f"{where}: stopped_by {by!r} is not a stop string"

    def test_stop_strings_per_prompt_end_only_their_rows(self) -> None:
        """Stop strings given per prompt end each prompt's rows by its own strings, never another prompt's."""
        free = self._decode(PROMPTS, seed=SEEDS)
        assert free.text is not None, self._where("the kit's model has a tokenizer, but text is None")
        own = [[t[1:3]] if len(t) >= 3 else ["\x00never"] for t in free.text]
        out = self._decode(PROMPTS, seed=SEEDS, stop_strings=own)
        assert out.text is not None
        for row, (text, reason, by) in enumerate(zip(out.text, out.finish_reasons, out.stopped_by)):
            where = self._where(f"stop_strings={own}", row)
            assert own[row][0] not in text, f"{where}: text {text!r} contains its stop string {own[row][0]!r}"
            if reason == "stop" and isinstance(by, str):
                assert by in own[row], f"{where}: stopped_by {by!r}, not one of its prompt's {own[row]}"

    def test_a_prompt_alone_decodes_as_in_its_batch(self) -> None:
        """With one seed per prompt, a prompt's output does not depend on what else is in its batch."""
        batch = self._decode(PROMPTS, seed=SEEDS)
        for row, (prompt, seed) in enumerate(zip(PROMPTS, SEEDS)):
            alone = self._decode([prompt], seed=[seed])
            assert alone.tokens[0] == batch.tokens[row], self._where(
                f"alone != in the batch; allowed: {SEEDED_ROWS}", row
            )

    def test_seeds_reproduce(self) -> None:
        """The same seed gives the same output."""
        first, second = self._decode(PROMPTS, seed=5), self._decode(PROMPTS, seed=5)
        assert first.tokens == second.tokens, self._where(f"seed=5 twice gave different tokens; allowed: {SEEDED_ROWS}")

    def test_logprobs_are_the_models(self) -> None:
        """With `logprobs=n` every token has its `TokenLogprobs`: `raw` and the `n` of `raw_top` are the model's
        on the returned text (one forward without a cache; the checks' cache keeps every token exactly). A strategy
        that does not define them refuses `logprobs` with a ParameterError naming it."""
        n = 3
        try:
            out = self._decode(PROMPTS, seed=SEEDS, logprobs=n, cache=PreallocatedKVCache)
        except ParameterError as exc:
            assert "logprobs" in str(exc), self._where(f"logprobs={n} refused without naming it")
            return
        assert out.logprobs is not None, self._where("logprobs=3 asked, but Generation.logprobs is None")
        model = self.make_model()
        device = model_device_dtype(model)[0]
        for row, (prompt, tokens, lps) in enumerate(zip(PROMPTS, out.tokens, out.logprobs)):
            where = self._where(f"logprobs={n}", row)
            assert len(lps) == len(tokens), (
                f"{where}: {len(lps)} TokenLogprobs for {len(tokens)} tokens; allowed: one per token, handed on with "
                "it: emit(row, token, picked.logprobs[row]) (advance does), finish(prompt, tokens, logprobs)"
            )
            if not tokens:
                continue
            ids = torch.tensor([list(prompt) + tokens], device=device)
            with torch.no_grad():
                logits = model(ids, torch.arange(ids.shape[1], device=device)[None], None)[0, len(prompt) - 1 : -1]
            want = torch.log_softmax(logits.float(), -1)
            top = want.topk(n, -1).values.tolist()
            for i, (token, lp) in enumerate(zip(tokens, lps)):
                at = f"{where}, token {i}"
                assert len(lp.raw_top) == n, (
                    f"{at}: raw_top holds {len(lp.raw_top)} entries, not {n}; allowed: the request's top n, picked "
                    "with them: pick(logits, logprobs=d.request.logprobs or 0), sample_steps(d, logprobs=...) alike"
                )
                assert abs(lp.raw - want[i, token].item()) <= self.tolerance, (
                    f"{at}: raw={lp.raw:.6f}, but the model gives token {token} {want[i, token].item():.6f}"
                )
                got = [v for _, v in lp.raw_top]
                assert max(abs(a - b) for a, b in zip(got, top[i])) <= self.tolerance, (
                    f"{at}: raw_top {got} != {top[i]}"
                )

    def test_max_new_tokens_per_prompt(self) -> None:
        """One `max_new_tokens` per prompt: each prompt's output ends by its own and equals its output alone with
        that int; a strategy that cannot honour different limits refuses them with a ParameterError naming them."""
        M = self.max_new_tokens
        limits = [M, 2, M // 2, 0]
        try:
            out = self._decode(PROMPTS, seed=SEEDS, max_new_tokens=limits)
        except ParameterError as exc:
            assert "max_new_tokens" in str(exc), self._where(f"max_new_tokens={limits} refused without naming it")
            return
        for row, (prompt, seed, limit) in enumerate(zip(PROMPTS, SEEDS, limits)):
            where = self._where(f"max_new_tokens={limits}", row)
            tokens, reason = out.tokens[row], out.finish_reasons[row]
            assert len(tokens) <= limit, f"{where}: {len(tokens)} tokens"
            assert reason == "stop" or len(tokens) == limit, f"{where}: 'length' after {len(tokens)} tokens"
            alone = self._decode([prompt], seed=[seed], max_new_tokens=limit)
            assert alone.tokens[0] == tokens, f"{where}: alone with max_new_tokens={limit} != in the batch"

    def test_stream_equals_the_result(self) -> None:
        """`dk.stream` yields the result's tokens, row by row, each event's step counting the row's tokens."""
        from decodekit.loop import stream

        out = self._decode(PROMPTS, seed=SEEDS)
        rows: list[list[int]] = [[] for _ in PROMPTS]
        with torch.no_grad():
            events = list(stream(self.make_model(), PROMPTS, strategy=self.strategy, seed=SEEDS, **self._given()))
        for event in events:
            assert event.step == len(rows[event.row]), self._where(f"event step {event.step}", event.row)
            rows[event.row].append(event.token)
        assert rows == out.tokens, self._where("stream's tokens != decode's")


def check_strategy(strategy: str, **options: Any) -> None:
    """Run every check of the suite on `strategy`, outside pytest."""
    suite = type("Suite", (StrategyConformance,), {"strategy": strategy, "options": lambda self: options})()
    for name in dir(suite):
        if name.startswith("test_"):
            getattr(suite, name)()
