"""llama.cpp's sampler chain (`common_params_sampling`, llama-cli / llama-server flags) against the decodekit
chain docs/samplers.md names for it ("Coming from another library", llama.cpp), one option at a time and together.

`llama_cpp_probs` re-implements what llama.cpp does to one row, written from its source: src/llama-sampler.cpp
(llama-sampling.cpp before its rename: `llama_sampler_{penalties,top_n_sigma,top_k,typical,top_p,min_p,xtc,temp_ext,
dist}_apply`, `softmax_impl`, `temp_impl`) and common/sampling.cpp `common_sampler_init` (the chain: logit bias,
then `--samplers`, default `penalties;dry;top_n_sigma;top_k;typ_p;top_p;min_p;xtc;temperature`, then `dist`). Like
llama.cpp it works on a candidate array that samplers shrink and sort, and takes probabilities by a softmax over
what is left, so a later threshold reads renormalised probabilities. Its sorts are stable (ties by id): llama.cpp's
`std::partial_sort` leaves the order of ties open, so the random cases have none and the tie tests pin both sides.
llama.cpp itself is not imported. `--mirostat 2`'s chain is checked by its first step's draws; DRY in
plugins/decodekit-penalties/tests/test_dry.py, the penalties' window in test_parity_llama_cpp.py there, mirostat 1
in plugins/decodekit-adaptive/tests/test_mirostat.py.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np
import pytest
import torch

import decodekit as dk

F32 = np.float32
NEG_INF = float("-inf")


@dataclass
class Params:
    """`common_params_sampling`'s fields that change the distribution, with common/common.h's defaults."""

    temp: float = 0.8
    dynatemp_range: float = 0.0
    dynatemp_exponent: float = 1.0
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    typ_p: float = 1.0
    top_n_sigma: float = -1.0
    xtc_probability: float = 0.0
    xtc_threshold: float = 0.1
    min_keep: int = 0
    penalty_last_n: int = 64  # 0: off; libllama clamps a negative to 0 (off), llama-cli and llama-server refuse one
    penalty_repeat: float = 1.0
    penalty_freq: float = 0.0
    penalty_present: float = 0.0
    dry_multiplier: float = 0.0
    logit_bias: dict[int, float] = field(default_factory=dict)


class Cands:
    """`llama_token_data_array`: ids, logits, probabilities and whether they are sorted by logit."""

    def __init__(self, logits: np.ndarray) -> None:
        self.id = np.arange(len(logits))
        self.logit = logits.astype(F32)
        self.p = np.zeros(len(logits), F32)
        self.sorted = False

    def take(self, index: np.ndarray) -> None:
        self.id, self.logit, self.p = self.id[index], self.logit[index], self.p[index]

    def sort(self, n: int | None = None) -> None:  # partial_sort_inplace: the n largest, descending
        self.take(np.argsort(-self.logit, kind="stable")[:n])
        self.sorted = True

    def softmax(self, do_sort: bool) -> None:
        if do_sort and not self.sorted:
            self.sort()
        e = np.exp(self.logit - self.logit.max()).astype(F32)
        self.p = (e / e.sum(dtype=F32)).astype(F32)


def penalties(c: Cands, history: list[int], sp: Params) -> None:
    # llama_sampler_init_penalties: max(penalty_last_n, 0). Since llama.cpp PR 26524 (Aug 2026) -1 is no longer
    # "the whole context": common refuses it, and libllama's clamp makes it 0, the sampler off.
    last_n = max(sp.penalty_last_n, 0)
    if last_n == 0 or (sp.penalty_repeat == 1 and sp.penalty_freq == 0 and sp.penalty_present == 0):
        return
    counts = Counter(history[-last_n:])
    for i, token in enumerate(c.id):
        if counts[int(token)]:
            x = c.logit[i]
            x = x * F32(sp.penalty_repeat) if x <= 0 else x / F32(sp.penalty_repeat)
            c.logit[i] = x - (F32(counts[int(token)]) * F32(sp.penalty_freq) + F32(sp.penalty_present))
    c.sorted = False


def top_n_sigma(c: Cands, n: float) -> None:
    if n <= 0 or len(c.id) <= 1:
        return
    valid = c.logit[c.logit != NEG_INF]
    top = max(c.logit[0], valid.max())
    std = np.sqrt(((valid - valid.mean(dtype=F32)) ** 2).mean(dtype=F32))
    c.logit[c.logit < top - F32(n) * std] = NEG_INF  # masked, not removed: the array keeps its size
    c.softmax(True)


def top_k(c: Cands, k: int) -> None:
    if k <= 0:
        return
    k = min(k, len(c.id))
    if not c.sorted:
        c.sort(k)
    c.take(np.arange(k))


def typical(c: Cands, p: float, min_keep: int) -> None:
    if p >= 1:
        return
    c.softmax(True)
    # A p of 0 in the array (a token masked to -inf, or one that underflowed) makes llama.cpp's entropy NaN and
    # its sort's order undefined: no case here may rely on that.
    assert (c.p > 0).all(), "llama.cpp's typical would read a NaN entropy"
    entropy = -(c.p * np.log(c.p)).sum(dtype=F32)
    order = np.argsort(np.abs(-np.log(c.p) - entropy), kind="stable")
    cum = np.cumsum(c.p[order], dtype=F32)
    last = len(order)
    for i in range(len(order)):
        if cum[i] > p and (min_keep == 0 or i >= min_keep - 1):  # strictly above p
            last = i + 1
            break
    c.take(order[:last])
    c.sorted = False


def top_p(c: Cands, p: float, min_keep: int) -> None:
    if p >= 1:
        return
    c.softmax(False)
    if not c.sorted:
        c.sort()
    cum = np.cumsum(c.p, dtype=F32)
    last = len(c.id)
    for i in range(len(c.id)):
        if cum[i] >= p and i + 1 >= min_keep:  # the token that reaches p stays
            last = i + 1
            break
    c.take(np.arange(last))


def min_p(c: Cands, p: float, min_keep: int) -> None:
    if p <= 0 or not len(c.id):
        return
    if not c.sorted:
        keep = np.flatnonzero(c.logit >= c.logit.max() + F32(np.log(p)))
        if len(keep) and len(keep) >= min_keep:
            c.take(keep)
            return
        c.sort()
    floor = c.logit[0] + F32(np.log(p))
    i = 1
    while i < len(c.id) and not (c.logit[i] < floor and i >= min_keep):
        i += 1
    c.take(np.arange(i))


def xtc(c: Cands, probability: float, threshold: float, min_keep: int, chance: float) -> None:
    if probability <= 0 or threshold > 0.5 or len(c.id) < 2 or chance > probability:
        return
    c.softmax(True)
    pos_last = 0
    for i in range(len(c.id)):
        if c.p[i] < threshold:
            break
        pos_last = i
    if len(c.id) - pos_last >= min_keep and pos_last > 0:
        c.take(np.arange(pos_last, len(c.id)))


def temp_impl(c: Cands, t: float) -> None:
    if t <= 0:  # the first maximum in the array's current order keeps its logit
        keep = int(np.argmax(c.logit))
        c.logit[np.arange(len(c.id)) != keep] = NEG_INF
        return
    c.logit = (c.logit / F32(t)).astype(F32)


def temp_ext(c: Cands, temp: float, delta: float, exponent: float) -> None:
    if delta <= 0:
        temp_impl(c, temp)
        return
    low, high = max(0.0, temp - delta), temp + delta
    if len(c.id) <= 1:
        return
    max_entropy = -np.log(F32(1.0) / F32(len(c.id)))  # the array's size: masked (-inf) tokens count
    c.softmax(True)
    p = c.p[c.p > 0]
    entropy = -(p * np.log(p)).sum(dtype=F32)
    temp_impl(c, low + (high - low) * float(entropy / max_entropy) ** exponent)


def llama_cpp_probs(x: torch.Tensor, history: list[int], sp: Params, xtc_chance: float = 0.0) -> torch.Tensor:
    """What `dist` samples from: the final candidates' softmax, by token id (0 for the removed)."""
    c = Cands(x.numpy().copy())
    for token, bias in sp.logit_bias.items():
        c.logit[token] += F32(bias)
    penalties(c, history, sp)  # dry: off (dry_multiplier 0) in every case here
    top_n_sigma(c, sp.top_n_sigma)
    top_k(c, sp.top_k)
    typical(c, sp.typ_p, sp.min_keep)
    top_p(c, sp.top_p, sp.min_keep)
    min_p(c, sp.min_p, sp.min_keep)
    xtc(c, sp.xtc_probability, sp.xtc_threshold, sp.min_keep, xtc_chance)
    temp_ext(c, sp.temp, sp.dynatemp_range, sp.dynatemp_exponent)
    c.softmax(False)
    out = torch.zeros(x.shape[0])
    out[torch.from_numpy(c.id)] = torch.from_numpy(c.p.astype(np.float32))
    return out


def chain_for(sp: Params) -> str:
    """The chain docs/samplers.md's llama.cpp table gives for `sp`, in llama.cpp's default order."""
    keep = max(sp.min_keep, 1)  # llama.cpp's min_keep 0 and 1 both keep at least the top token
    stages = []
    banned = [[t] for t, b in sp.logit_bias.items() if b == NEG_INF]  # `TOKEN-inf`, --ignore-eos: a ban
    bias = {t: b for t, b in sp.logit_bias.items() if b != NEG_INF}
    if bias:
        stages.append("logit_bias({" + ", ".join(f"{t}: {b}" for t, b in bias.items()) + "})")
    if banned:
        stages.append(f"bad_words({banned})")
    if sp.penalty_last_n > 0:  # 0 is off, and so is a negative n (refused by llama-cli, clamped to 0 by libllama)
        n = sp.penalty_last_n
        if sp.penalty_repeat != 1:
            stages.append(f"repetition_penalty({sp.penalty_repeat}, {n})")
        if sp.penalty_freq:
            stages.append(f"frequency_penalty({sp.penalty_freq}, {n}, true)")
        if sp.penalty_present:
            stages.append(f"presence_penalty({sp.penalty_present}, {n}, true)")
    if sp.dry_multiplier:  # llama.cpp's defaults: base 1.75, allowed length 2, the last 64 tokens (no breakers: ids)
        stages.append(f"dry({sp.dry_multiplier}, 1.75, 2, 64)")
    if sp.top_n_sigma > 0:
        stages.append(f"top_n_sigma({sp.top_n_sigma})")
    if sp.top_k > 0:
        stages.append(f"top_k({sp.top_k})")
    if sp.typ_p < 1:
        stages.append(f"typical({sp.typ_p}, {keep})")
    if sp.top_p < 1:
        stages.append(f"top_p({sp.top_p}, {keep})")
    if sp.min_p > 0:
        stages.append(f"min_p({sp.min_p}, {keep})")
    if sp.xtc_probability > 0 and sp.xtc_threshold <= 0.5:
        stages.append(f"xtc({sp.xtc_probability}, {sp.xtc_threshold}, {keep})")
    if sp.dynatemp_range > 0:
        stages.append(f"dynamic_temperature({sp.temp}, {sp.dynatemp_range}, {sp.dynatemp_exponent})")
    else:
        stages.append(f"temperature({max(sp.temp, 0.0)})")  # llama.cpp's temp <= 0: greedy
    return " | ".join(stages)


def decodekit_probs(
    x: torch.Tensor, history: list[int], sp: Params, seed: int = 0, path: str = "process"
) -> torch.Tensor:
    """The chain's distribution: `process` (every stage on the whole row) or `distribution` (the candidate fast
    path `dk.generate` takes where the stages offer one)."""
    ctx = dk.DecodeContext(tokens=torch.tensor([history or [0]]), generators=dk.context.row_generators([seed], 1))
    run: Callable[[torch.Tensor, dk.DecodeContext], torch.Tensor] = getattr(dk.Chain.parse(chain_for(sp)), path)
    return run(x[None], ctx)[0].softmax(-1)


def assert_same(ours: torch.Tensor, theirs: torch.Tensor) -> None:
    assert (ours > 0).tolist() == (theirs > 0).tolist(), "the kept tokens differ"
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)


V = 100
HISTORY = [3, 7, 7, 12, 30, 7, 21, 21, 21, 5, 30, 64, 2, 2, 88]  # prompt and output: llama.cpp accepts both
OFF = Params(top_k=0, top_p=1.0, min_p=0.0, temp=1.0)  # every sampler off: the logits' own softmax

CASES = {
    "defaults": Params(),
    "all_off": OFF,
    "temp": replace(OFF, temp=0.6),
    "top_k": replace(OFF, top_k=7),
    "top_k_0_off": replace(OFF, top_k=0, temp=0.9),
    "top_k_negative_off": replace(OFF, top_k=-1),
    "top_p": replace(OFF, top_p=0.7),
    "top_p_1_off": replace(OFF, top_p=1.0, temp=1.2),
    "min_p": replace(OFF, min_p=0.1),
    "min_p_0_off": replace(OFF, min_p=0.0, temp=0.7),
    "typical": replace(OFF, typ_p=0.6),
    "typical_1_off": replace(OFF, typ_p=1.0, temp=1.1),
    "top_n_sigma": replace(OFF, top_n_sigma=1.5),
    "top_n_sigma_off": replace(OFF, top_n_sigma=-1.0, temp=1.3),
    "xtc": replace(OFF, xtc_probability=1.0, xtc_threshold=0.02),
    "xtc_0_off": replace(OFF, xtc_probability=0.0, xtc_threshold=0.02),
    "xtc_threshold_above_half_off": replace(OFF, xtc_probability=1.0, xtc_threshold=0.51),
    "dynatemp": replace(OFF, temp=0.9, dynatemp_range=0.5, dynatemp_exponent=1.5),
    "repeat_penalty": replace(OFF, penalty_repeat=1.4, penalty_last_n=8),
    "repeat_penalty_1_off": replace(OFF, penalty_repeat=1.0, penalty_last_n=8),
    "penalties_negative_last_n_off": replace(
        OFF, penalty_repeat=1.3, penalty_freq=0.4, penalty_present=0.3, penalty_last_n=-1
    ),
    "penalties_last_n_0_off": replace(OFF, penalty_repeat=1.3, penalty_freq=0.4, penalty_present=0.3, penalty_last_n=0),
    "logit_bias": replace(OFF, logit_bias={4: 3.0, 21: -2.5, 9: NEG_INF}),
    "min_keep": replace(OFF, top_p=0.3, min_p=0.5, typ_p=0.2, min_keep=5),
    "renormalised_thresholds": Params(top_k=12, top_p=0.6, min_p=0.2, xtc_probability=1.0, xtc_threshold=0.15),
    "greedy": replace(Params(), temp=0.0),
    "greedy_after_xtc": replace(OFF, temp=0.0, xtc_probability=1.0, xtc_threshold=0.05),  # the argmax may go
    "greedy_negative": replace(OFF, temp=-1.0, penalty_repeat=1.5),
    "everything": Params(
        temp=0.7,
        top_k=30,
        top_p=0.9,
        min_p=0.03,
        typ_p=0.95,
        top_n_sigma=4.0,
        xtc_probability=1.0,
        xtc_threshold=0.08,
        penalty_repeat=1.2,
        penalty_freq=0.2,
        penalty_present=0.1,
        penalty_last_n=10,
        logit_bias={1: 2.0},
        dynatemp_range=0.3,
    ),
}


@pytest.mark.parametrize("path", ["process", "distribution"])
@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("seed", range(5))
def test_chain_samples_what_llama_cpp_samples(name: str, seed: int, path: str) -> None:
    x = torch.randn(V, generator=torch.Generator().manual_seed(seed)) * 2.5
    sp = CASES[name]
    assert_same(decodekit_probs(x, HISTORY, sp, path=path), llama_cpp_probs(x, HISTORY, sp))


def test_xtc_chance_is_llama_cpps_per_row_and_step() -> None:
    # llama.cpp applies XTC when its uniform draw <= probability; here each row draws its own: count applications.
    sp = replace(OFF, xtc_probability=0.3, xtc_threshold=0.1)
    x = torch.tensor([3.0, 2.8, 2.6, 0.0, -1.0])
    applied = llama_cpp_probs(x, [], sp, xtc_chance=0.0)
    assert llama_cpp_probs(x, [], sp, xtc_chance=0.5).tolist() == llama_cpp_probs(x, [], OFF).tolist()
    hits = sum(bool(decodekit_probs(x, [], sp, seed)[0] == 0) for seed in range(400))
    assert abs(hits - 120) < 4 * (400 * 0.3 * 0.7) ** 0.5  # 120 expected
    assert applied[0] == 0 and applied[2] > 0


def test_renormalisation_between_samplers_moves_the_xtc_cut() -> None:
    # Probabilities 0.4, 0.3, 0.2, 0.1; top_k 2 leaves 4/7 and 3/7, both >= 0.4: XTC removes the first.
    # Read on the whole row (0.3 < 0.4) there would be one top choice and nothing to remove.
    x = torch.tensor([0.4, 0.3, 0.2, 0.1]).log()
    sp = replace(OFF, top_k=2, xtc_probability=1.0, xtc_threshold=0.4)
    assert llama_cpp_probs(x, [], sp).tolist() == [0.0, 1.0, 0.0, 0.0]
    assert decodekit_probs(x, [], sp).tolist() == [0.0, 1.0, 0.0, 0.0]
    without_top_k = replace(sp, top_k=0)
    assert_same(decodekit_probs(x, [], without_top_k), torch.tensor([0.4, 0.3, 0.2, 0.1]))
    assert_same(llama_cpp_probs(x, [], without_top_k), torch.tensor([0.4, 0.3, 0.2, 0.1]))


def test_renormalisation_moves_the_top_p_cut() -> None:
    # Probabilities 0.35, 0.25, 0.2, 0.2. llama.cpp's order, top_p 0.55 then min_p 0.6: 0.35 + 0.25 reaches
    # 0.55 at the second token, and min_p keeps both (0.25 >= 0.6 * 0.35). In the other order min_p leaves
    # 0.35 and 0.25, renormalised 7/12 and 5/12, and top_p stops at the first (7/12 >= 0.55).
    x = torch.tensor([0.35, 0.25, 0.2, 0.2]).log()
    sp = replace(OFF, min_p=0.6, top_p=0.55)
    assert_same(llama_cpp_probs(x, [], sp), torch.tensor([7 / 12, 5 / 12, 0.0, 0.0]))
    assert_same(decodekit_probs(x, [], sp), torch.tensor([7 / 12, 5 / 12, 0.0, 0.0]))
    reordered = dk.Chain.parse("min_p(0.6) | top_p(0.55)").process(
        x[None], dk.DecodeContext(tokens=torch.tensor([[0]]))
    )
    assert reordered.softmax(-1)[0].tolist() == [1.0, 0.0, 0.0, 0.0]  # the order of the chain matters


def test_greedy_tie_lowest_id_when_nothing_sorted() -> None:
    # temp <= 0 keeps the first maximum in the array's order: token-id order while no sampler sorted it.
    x = torch.tensor([0.0, 2.0, 1.0, 2.0])
    for temp in (0.0, -0.5):
        sp = replace(OFF, temp=temp)
        assert llama_cpp_probs(x, [], sp).tolist() == [0.0, 1.0, 0.0, 0.0]
        assert decodekit_probs(x, [], sp).tolist() == [0.0, 1.0, 0.0, 0.0]


def test_top_k_keeps_ties_llama_cpp_keeps_exactly_k() -> None:
    # The documented difference: llama.cpp's partial sort keeps k tokens (which of the tied: its sort's choice).
    x = torch.tensor([3.0, 1.0, 2.0, 2.0, 0.0])
    sp = replace(OFF, top_k=2)
    assert (llama_cpp_probs(x, [], sp) > 0).sum() == 2
    assert (decodekit_probs(x, [], sp) > 0).tolist() == [True, False, True, True, False]


def test_top_p_keeps_ties_llama_cpp_stops_at_the_count() -> None:
    x = torch.zeros(4)  # four tokens of 0.25: top_p 0.5 is reached at the second
    sp = replace(OFF, top_p=0.5)
    assert (llama_cpp_probs(x, [], sp) > 0).sum() == 2
    assert (decodekit_probs(x, [], sp) > 0).sum() == 4


def test_typical_stops_where_mass_is_exceeded_in_llama_cpp() -> None:
    # p = 0.5, 0.25, 0.125, 0.125 (exact in float32): H = 1.75 ln 2; |surprise - H| = 0.75, 0.25, 1.25, 1.25 (x ln 2).
    # In typical order the mass runs 0.25, 0.75, ...: mass 0.75 is reached at the second token (decodekit, HF:
    # `cumulative < mass`) and exceeded only at the third (llama.cpp: `cum_sum > p`), one of the two tied.
    x = torch.tensor([0.5, 0.25, 0.125, 0.125]).log()
    sp = replace(OFF, typ_p=0.75)
    assert (decodekit_probs(x, [], sp) > 0).tolist() == [True, True, False, False]
    assert (llama_cpp_probs(x, [], sp) > 0).sum() == 3
    # Any mass not met exactly gives the same set in both: 0.76 needs the third token in each.
    above = replace(sp, typ_p=0.76)
    assert (decodekit_probs(x, [], above) > 0).sum() == 4  # both tied tokens
    assert (llama_cpp_probs(x, [], above) > 0).sum() == 3


def test_dynatemp_after_top_n_sigma_counts_llama_cpps_masked_tokens() -> None:
    # top_n_sigma sets logits to -inf without shrinking llama.cpp's array, so temp_ext's maximum entropy is
    # log(array size), not log(finite tokens); decodekit's `dynamic_temperature` counts finite logits.
    x = torch.tensor([2.0, 1.9, 1.8, -5.0, -5.2, -5.4, -5.6, -5.8])
    sp = replace(OFF, top_n_sigma=0.5, temp=1.0, dynatemp_range=0.8)
    ours, theirs = decodekit_probs(x, [], sp), llama_cpp_probs(x, [], sp)
    assert (ours > 0).tolist() == (theirs > 0).tolist() == [True] * 3 + [False] * 5
    assert ours[0] < theirs[0]  # llama.cpp's normalised entropy is H/log 8 < H/log 3: a colder temperature
    # With a shrinking sampler between (top_k, top_p, min_p or typical) the arrays agree again.
    shrunk = replace(sp, top_k=3)
    assert_same(decodekit_probs(x, [], shrunk), llama_cpp_probs(x, [], shrunk))


def llama_cpp_mirostat_v2_first_step(x: torch.Tensor, temp: float, tau: float) -> torch.Tensor:
    """`--mirostat 2`'s chain (logit bias, `temp`, `mirostat_v2`; no penalties, DRY or truncations): what its first
    step draws from. Sorted descending, the tokens up to the first whose surprise -log2 p exceeds mu = 2 tau stay
    (at least one), renormalised."""
    c = Cands(x.numpy().copy())
    temp_impl(c, temp)
    c.softmax(True)
    over = np.flatnonzero(-np.log2(c.p) > 2 * tau)  # surprise ascends along the sorted array
    c.take(np.arange(max(1, over[0]) if len(over) else len(c.id)))
    c.softmax(True)
    out = torch.zeros(x.shape[0])
    out[torch.from_numpy(c.id)] = torch.from_numpy(c.p.astype(np.float32))
    return out


def test_mirostat_2_first_step_draws_from_llama_cpps_distribution() -> None:
    # The table's chain `temperature(T) | mirostat_v2(tau, eta)`; mu = 2 tau = 3 bits keeps p >= 1/8 after T.
    x = torch.tensor([2.0, 1.5, 1.2, 0.3, -0.5, -2.0])
    theirs = llama_cpp_mirostat_v2_first_step(x, 0.8, 1.5)
    assert (theirs > 0).tolist() == [True, True, True, False, False, False]
    chain = dk.Chain.parse("temperature(0.8) | mirostat_v2(1.5, 0.1)")
    n = 3000
    counts = torch.zeros(6)
    for seed in range(n):
        ctx = dk.DecodeContext(tokens=torch.tensor([HISTORY]), generators=dk.context.row_generators([seed], 1))
        counts[int(chain(x[None], ctx).item())] += 1
    assert counts[3:].sum() == 0
    sd = (n * theirs * (1 - theirs)).sqrt()
    assert bool(((counts - n * theirs).abs() <= 5 * sd + 1e-9).all()), (counts / n, theirs)


@pytest.mark.parametrize("path", ["process", "distribution"])
@pytest.mark.parametrize(
    "sp", [Params(), replace(OFF, top_p=0.99, min_p=1e-4, temp=0.7)], ids=["defaults", "wide_nucleus"]
)
def test_a_vocabulary_of_32000(sp: Params, path: str) -> None:
    # Past llama.cpp's 1024-candidate bucket sort, and a nucleus (1917 tokens) past the fast path's 256-token search.
    x = torch.randn(32000, generator=torch.Generator().manual_seed(7)) * 4
    assert_same(decodekit_probs(x, HISTORY, sp, path=path), llama_cpp_probs(x, HISTORY, sp))
