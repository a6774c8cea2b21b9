"""Beam search: keep the `num_beams` most likely continuations of every prompt.

The semantics are those of Hugging Face transformers 5 (`GenerationMixin._beam_search` in
`transformers/generation/utils.py`) for decoder-only models:

- a beam's score is the sum of the log-probabilities of its tokens, `log_softmax(logits)`
  after the chain's processors (HF runs its logits processors on log-softmaxed scores too);
- each step ranks the `K = max(2, 1 + n_stop) · num_beams` best (beam, token) candidates of a
  prompt; the best `num_beams` that do not end the row keep running, and those among the first
  `num_beams` that do end it (a stop token, a stop string, a stage of the chain such as a complete
  grammar, or `max_new_tokens`) become finished
  hypotheses scored `sum_logprobs / generated_length ** length_penalty`, where the generated
  length counts the new tokens including the stop token;
- a prompt keeps its `num_beams` best finished hypotheses and closes when they cannot be beaten
  (`early_stopping`, see `beam_search`).

It is a policy over the engine (`decodekit.engine`): `num_beams` rows per prompt, which follow
the beams with `Decoding.reorder` (history, cache, and each beam's output: its text for stop
strings, its logprobs). A hypothesis is such an output, copied when its beam branches.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor
from typing_extensions import Unpack

from decodekit.chain import numerics_error
from decodekit.engine import Decoding
from decodekit.errors import NumericsError, ParameterError
from decodekit.model import Model
from decodekit.outputs import RowOutput
from decodekit.params import Params
from decodekit.prompts import Prompts
from decodekit.request import DecodeOptions
from decodekit.results import Generation, token_logprobs
from decodekit.strategies import run_decode
from decodekit_beam.params import BeamParams, EarlyStopping

__all__ = ["BeamGeneration", "BeamParams", "beam_policy", "beam_search"]

_NEG_INF = float("-inf")


@dataclass
class BeamGeneration(Generation):
    """A `Generation` whose row `b` is the best hypothesis of prompt `b`, plus, per prompt, the best
    `num_return_sequences` hypotheses (`sequences[b]`, best first) and their `scores[b]`
    (sum of log-probabilities / generated length ** length_penalty); each hypothesis's text, finish reason, stop
    token or string and logprobs as `Generation` reports a row's (`sequence_texts[b]`, ...: a caller showing every
    hypothesis, as the command line does, needs them as much as the best one's)."""

    sequences: list[list[list[int]]] = field(default_factory=list)
    scores: list[list[float]] = field(default_factory=list)
    sequence_texts: list[list[str | None]] = field(default_factory=list)
    sequence_finish_reasons: list[list[str | None]] = field(default_factory=list)
    sequence_stopped_by: list[list[int | str | None]] = field(default_factory=list)
    sequence_logprobs: list[list[list[Any] | None]] = field(default_factory=list)


def beam_search(
    model: Model,
    prompts: Prompts,
    *,
    num_beams: int = 4,
    length_penalty: float = 1.0,
    early_stopping: EarlyStopping = False,
    num_return_sequences: int = 1,
    **options: Unpack[DecodeOptions],
) -> BeamGeneration:
    """Beam search with Hugging Face's semantics; returns the best hypothesis of each prompt.

    length_penalty: finished hypotheses score `sum_logprobs / generated_length ** length_penalty`;
        > 0 favours longer ones, < 0 shorter ones, 0 compares raw sums (-10 <= length_penalty <= 10).
    early_stopping: when a prompt holding `num_beams` finished hypotheses is done —
        True: at once; False: when the best running beam, scored at its current length, cannot
        beat the worst kept hypothesis (HF's heuristic); "never": the same test with the running
        beam scored at `max_new_tokens` when length_penalty > 0 (the exact bound).
    The other options are `dk.generate`'s (`DecodeOptions`), read as follows. chain: only its
    processors are used (on the log-probabilities); its selector is ignored. Stateful stages
    see one row per beam; their per-row state does not follow the beams. stop_tokens and
    stop_strings finish a hypothesis. seed: for chain stages that draw random numbers.
    logprobs: each token of the returned hypothesis, as `dk.generate` reports them.

    `tokens[b]` is the best hypothesis (a stop token that ended it is its last token) and
    `sequences[b]`, `scores[b]` the best `num_return_sequences`, best first.
    """
    own = {
        "num_beams": num_beams,
        "length_penalty": length_penalty,
        "early_stopping": early_stopping,
        "num_return_sequences": num_return_sequences,
    }
    out = run_decode(model, prompts, "beam", {**own, **options}, "beam_search")
    assert isinstance(out, BeamGeneration)
    return out


def beam_policy(d: Decoding, params: Params) -> Iterator[None]:
    """The "beam" strategy (see `beam_search`)."""
    assert isinstance(params, BeamParams)
    if params.num_return_sequences > params.num_beams:
        raise ParameterError(
            f"num_return_sequences={params.num_return_sequences} is invalid; "
            f"allowed: an integer, 1 <= num_return_sequences <= num_beams={params.num_beams}"
        )
    if len(set(d.request.limits or ())) > 1:  # every beam's last step is the one max_new_tokens
        raise ParameterError(
            f"strategy beam: max_new_tokens={list(d.request.limits or ())} differ between prompts; allowed: one int "
            "for every prompt (decode prompts with different limits apart)"
        )
    # `open` refuses rows that cannot fit (naming num_beams); hypotheses, like outputs, grow only as generated.
    # It runs now, not in a generator: `stream` refuses at its call.
    d.open(copies=params.num_beams, needs=("reorder",), copies_option="num_beams")
    return _beam_rounds(d, params)


def _beam_rounds(d: Decoding, params: BeamParams) -> Iterator[None]:
    """The rounds of a beam search on an opened decoding, then its results."""
    search = _Search(d, params)
    logits = d.prefill()  # and the prompt's logprobs, when asked for
    if d.request.max_new_tokens == 0:  # the chain still runs once, as `sample`'s: a chain it refuses is refused here
        search.log_probs(logits.float(), 0)
    for step in range(d.request.max_new_tokens):
        if search.step(logits, step):
            break
        logits = d.forward()
        yield
    # No hypothesis (max_new_tokens=0): the prompt's first row, untouched, is its one empty sequence, text and all.
    kept = [
        entries[: params.num_return_sequences] or [(0.0, d.outputs[b * params.num_beams])]
        for b, entries in enumerate(search.finished)
    ]
    for b, best in enumerate(kept):
        d.finish(b, best[0][1].tokens, best[0][1].logprobs)
    d.result_type = BeamGeneration
    logprobs = d.request.logprobs is not None
    d.extras = {
        "sequences": [[out.tokens for _, out in best] for best in kept],
        "scores": [[score for score, _ in best] for best in kept],
        "sequence_texts": [[out.text for _, out in best] for best in kept],
        "sequence_finish_reasons": [[out.finish_reason for _, out in best] for best in kept],
        "sequence_stopped_by": [[out.stopped_by for _, out in best] for best in kept],
        "sequence_logprobs": [[out.logprobs if logprobs else None for _, out in best] for best in kept],
    }


class _Search:
    """The state of one beam search: running beams (the decoding's rows) and finished hypotheses."""

    def __init__(self, d: Decoding, params: BeamParams) -> None:
        self.d = d
        self.B, self.N, self.M = len(d.prompts), params.num_beams, d.request.max_new_tokens
        self.length_penalty, self.early_stopping = params.length_penalty, params.early_stopping
        if self.N == 1:  # greedy search, as transformers runs num_beams=1: the first stop token picked ends the row
            self.early_stopping = True
        stops = d.request.stop_tokens
        V = d.model.spec.vocab_size
        self.stop_mask = torch.zeros(self.B, V, dtype=torch.bool, device=d.device)  # [B, V]: True at a stop token
        for b, s in enumerate(stops):
            self.stop_mask[b, list(s)] = True
        # K candidates per prompt: enough that num_beams survive even if every beam's best tokens end it.
        self.K = min(max(2, 1 + max(len(s) for s in stops)) * self.N, self.N * V)
        # running: [B, N] cumulative log-probs; only beam 0 is live at first, so step 0 picks distinct tokens.
        self.running = torch.full((self.B, self.N), _NEG_INF, device=d.device)
        self.running[:, 0] = 0.0
        self.finished: list[list[tuple[float, RowOutput]]] = [[] for _ in range(self.B)]  # best first, <= N each
        # open_rows: [B] prompts whose finished hypotheses may still improve (HF: early-stop heuristic unsatisfied).
        self.open_rows = torch.ones(self.B, dtype=torch.bool, device=d.device)

    def step(self, logits: Tensor, step: int) -> bool:
        """Extend the beams by one token; True when the search is over."""
        d, B, N, K = self.d, self.B, self.N, self.K
        raw = logits.float()
        logp = self.log_probs(raw, step)  # [B*N, V]
        V = logp.shape[-1]
        # The K best (beam, token) continuations of each prompt, by cumulative log-prob.
        cand = (logp.view(B, N, V) + self.running[:, :, None]).view(B, N * V)
        top_scores, top_idx = cand.topk(K, dim=-1)  # [B, K], best first
        _check_sums(top_scores[:, 0], self.open_rows, step)
        src, tok = top_idx // V, top_idx % V  # the beam each extends, and the new token
        hits = self.stop_mask.gather(1, tok)
        if any(d.request.stop_strings) or d.chain.ends_rows:
            hits |= self._output_hits(src, tok)
        if step == self.M - 1:
            hits = torch.ones_like(hits)  # the last step finishes every candidate ("length")
        self._add_finished(top_scores, src, tok, hits, raw, logp, step)
        # Running beams for the next step: the best N candidates that did not finish.
        self.running, keep = torch.where(hits, _NEG_INF, top_scores).topk(N, dim=-1)  # [B, N]
        beam_rows = src.gather(1, keep) + torch.arange(B, device=src.device)[:, None] * N
        new = tok.gather(1, keep).flatten()
        over = not bool(self.open_rows.any()) or bool(hits.all())  # no candidate of any prompt can continue
        if not over:
            self._extend(beam_rows.flatten(), new, raw, logp)
        self._update_open_rows(step)
        full = all(len(f) == N for f in self.finished)
        return over or not bool(self.open_rows.any()) or (self.early_stopping is True and full)

    def log_probs(self, raw: Tensor, step: int) -> Tensor:
        """`[B*N, V]`: log_softmax of the raw logits after the chain's processors (HF's order)."""
        logp = torch.log_softmax(raw, -1)
        if not self.d.chain.processors:
            _check_numerics(raw, logp, self.running, step)
            return logp
        live = self.running.isfinite().flatten().tolist()
        try:
            return self.d.chain.distribution(logp, self.d.ctx, live=live)
        except NumericsError:  # say which prompt and beam
            _check_numerics(raw, self.d.chain.process(logp, self.d.ctx.fork()), self.running, step)
            raise

    def _output_hits(self, src: Tensor, tok: Tensor) -> Tensor:
        """`[B, K]`: candidates whose output the new token ends (a stop string, a stage of the chain)."""
        hits = torch.zeros_like(tok, dtype=torch.bool)
        for b, (beams, tokens) in enumerate(zip(src.tolist(), tok.tolist())):
            for k, (i, t) in enumerate(zip(beams, tokens)):
                out = self.d.outputs[b * self.N + i].copy()
                hits[b, k] = out.push(t).finish_reason == "stop"
        return hits

    def _extend(self, beam_rows: Tensor, tokens: Tensor, raw: Tensor, logp: Tensor) -> None:
        """The running beams follow their sources, and each takes its new token."""
        d = self.d
        lps = self._logprobs(beam_rows, tokens, raw, logp)
        d.reorder(beam_rows.tolist())
        d.append(tokens)
        for row, token in enumerate(tokens.tolist()):
            d.outputs[row].push(token, None if lps is None else lps[row])

    def _logprobs(self, rows: Tensor, tokens: Tensor, raw: Tensor, logp: Tensor) -> list[Any] | None:
        n = self.d.request.logprobs
        if n is None:
            return None
        return token_logprobs(raw.index_select(0, rows), logp.index_select(0, rows), tokens, n)

    def _add_finished(
        self, top_scores: Tensor, src: Tensor, tok: Tensor, hits: Tensor, raw: Tensor, logp: Tensor, step: int
    ) -> None:
        """Merge the candidates that just finished into each prompt's N best finished hypotheses."""
        N, K = self.N, self.K
        rank = torch.arange(K, device=tok.device)
        # Only the first N candidates may finish (the rest are spares to keep N beams running),
        # only in open prompts, not once a prompt is full under early_stopping=True, and not at -inf.
        eligible = hits & (rank < N) & self.open_rows[:, None] & top_scores.isfinite()
        if self.early_stopping is True:
            full = torch.tensor([len(f) == N for f in self.finished], device=tok.device)
            eligible &= ~full[:, None]
        if not bool(eligible.any()):
            return
        scores = top_scores / ((step + 1) ** self.length_penalty)
        where = eligible.nonzero().tolist()
        rows = torch.tensor([b * N + int(src[b, k]) for b, k in where], device=tok.device)
        tokens = torch.stack([tok[b, k] for b, k in where])
        lps = self._logprobs(rows, tokens, raw, logp)
        for j, (b, k) in enumerate(where):
            hypothesis = self.d.outputs[int(rows[j])].copy()
            hypothesis.push(int(tokens[j]), None if lps is None else lps[j])
            kept = self.finished[b]
            kept.append((float(scores[b, k]), hypothesis))
            kept.sort(key=lambda entry: -entry[0])  # stable: an earlier hypothesis wins a tie
            del kept[N:]

    def _update_open_rows(self, step: int) -> None:
        """HF's early-stop heuristic: a full prompt closes once its best running beam, at its best
        hypothetical length, cannot beat its worst kept hypothesis; one with no live beam closes too."""
        lp = self.length_penalty
        best_length = self.M if self.early_stopping == "never" and lp > 0 else step + 1
        best_possible = self.running[:, 0] / (best_length**lp)  # running is sorted: beam 0 is the best
        worst = torch.tensor(
            [f[-1][0] if len(f) == self.N else _NEG_INF for f in self.finished], device=self.running.device
        )
        full = torch.tensor([len(f) == self.N for f in self.finished], device=self.running.device)
        can_improve = ~full | (best_possible > worst)
        self.open_rows &= can_improve & self.running[:, 0].isfinite()


def _check_sums(best: Tensor, open_rows: Tensor, step: int) -> None:
    """Each open prompt's best cumulative score `[B]` must be a number: a stage whose values lie far above 0 (not
    log-probabilities) can overflow the sums to +inf, which ranks no hypothesis (topk puts NaN first too)."""
    bad = open_rows & (torch.isnan(best) | torch.isposinf(best))
    if bool(bad.any()):
        b = int(bad.nonzero()[0, 0])
        raise NumericsError(
            f"step {step}, prompt {b}: the beams' cumulative log-probabilities reached {float(best[b])}: a stage of "
            "the chain gave values far above 0; allowed: a chain whose values stay log-probabilities within float "
            "range (beam search adds them up)"
        )


def _check_numerics(raw: Tensor, logp: Tensor, running: Tensor, step: int) -> None:
    """NaN or +inf anywhere, or a live beam (finite score) with every token removed, is an error."""
    B, N = running.shape
    bad = torch.isnan(logp).any(-1) | torch.isposinf(logp).any(-1)  # [B*N]
    bad |= running.isfinite().flatten() & ~(logp > _NEG_INF).any(-1)
    if bool(bad.any()):
        flat = int(bad.nonzero()[0, 0])
        b, i = divmod(flat, N)
        V = raw.shape[-1]
        err = numerics_error(raw.view(B, N, V)[:, i], logp.view(B, N, V)[:, i], b, step)
        raise NumericsError(f"{err} (beam {i})")
