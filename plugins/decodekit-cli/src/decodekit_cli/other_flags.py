"""llama.cpp's sampling flags, which `generate` and `explain` lack, and what gives each here.

click's own guess misleads for them (`--n-predict` was "Possible options: --no-echo", `--min-p` "--input",
`--mirostat` "--strategy"); docs/samplers.md ("Coming from another library", llama.cpp) has the whole table.
"""

from __future__ import annotations

__all__ = ["other_flag_hint"]

_SAMPLERS = "--chain, the stages in that order (default: 'top_k(40) | top_p(0.95) | min_p(0.05) | temperature(0.8)')"
_MIROSTAT = "--chain 'temperature(t) | mirostat(tau, eta)' (mode 1) or 'temperature(t) | mirostat_v2(tau, eta)' (2)"
_DRY = (
    "--chain 'dry(multiplier, base, allowed_length, last_n, breakers) | ...' (llama.cpp's defaults: "
    'dry(multiplier, 1.75, 2, 64, the ids of its breakers \\n : " *); last_n None is the whole context)'
)
_XTC = "--chain '... | xtc(probability, threshold) | temperature(t)'"
_DYNATEMP = "--chain '... | dynamic_temperature(t, range, exponent)' in temperature's place"

_ADAPTIVE = "--chain '... | adaptive_p(target, decay)' in sample's place (llama.cpp appends it last)"

# Each flag under every name llama.cpp's common/arg.cpp declares for it (`--typical-p` got click's "--top-p").
OTHER_FLAGS = {
    "--n-predict": "--max-new-tokens N (its -n; -n here is the number of samples)",
    "--predict": "--max-new-tokens N (its -n; -n here is the number of samples)",
    # The flat flags build vLLM's order, where llama.cpp truncates first (and by default): same flag, other tokens.
    "--temp": "--temperature T, which comes before --top-k and --top-p here (vLLM's order); llama.cpp tempers last, "
    "after its default truncations: --chain 'top_k(40) | top_p(0.95) | min_p(0.05) | temperature(t)'",
    "--repeat-penalty": "--repetition-penalty R (over the whole context; over its 64 last tokens: "
    "--chain 'repetition_penalty(r, 64) | ...')",
    "--repeat-last-n": "the penalty stage's window: --chain 'repetition_penalty(r, n) | ...'",
    "--presence-penalty": "--chain 'presence_penalty(p, 64, true) | ...' (llama.cpp's window, prompt included)",
    "--frequency-penalty": "--chain 'frequency_penalty(f, 64, true) | ...' (llama.cpp's window, prompt included)",
    "--samplers": _SAMPLERS,
    "--sampling-seq": _SAMPLERS,
    "--sampler-seq": _SAMPLERS,
    "--min-p": "--chain '... | min_p(p) | temperature(t)'",
    "--typical": "--chain '... | typical(mass) | ...'",
    "--typical-p": "--chain '... | typical(mass) | ...'",
    "--top-nsigma": "--chain 'top_n_sigma(n) | ...'",
    "--top-n-sigma": "--chain 'top_n_sigma(n) | ...'",
    "--xtc-probability": _XTC,
    "--xtc-threshold": _XTC,
    "--dry-multiplier": _DRY,
    "--dry-base": _DRY,
    "--dry-allowed-length": _DRY,
    "--dry-penalty-last-n": _DRY,
    "--dry-sequence-breaker": _DRY,
    "--mirostat": _MIROSTAT,
    "--mirostat-lr": _MIROSTAT,
    "--mirostat-ent": _MIROSTAT,
    "--adaptive-target": _ADAPTIVE,
    "--adaptive-decay": _ADAPTIVE,
    "--dynatemp-range": _DYNATEMP,
    "--dynatemp-exp": _DYNATEMP,
    "--logit-bias": "--chain 'logit_bias({id: bias}) | ...' (a ban, TOKEN-inf: bad_words([[id]]))",
    "--n-probs": "--logprobs N --json (top: the model's; processed_top: after the chain, llama-server's "
    "post_sampling_probs)",
    "--min-keep": "the min_keep of top_p, min_p, typical and xtc in --chain",
}


def other_flag_hint(flag: str) -> str | None:
    """What gives llama.cpp's `flag` here, in one clause; None for a flag that is not one of its."""
    hint = OTHER_FLAGS.get(flag)
    return None if hint is None else f"llama.cpp's {flag} is {hint} (docs/samplers.md)"
