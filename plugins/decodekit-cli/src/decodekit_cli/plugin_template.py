"""The files `decodekit new-plugin` writes: a complete distribution per kind of plugin.

Each text is a `string.Template` (`$name`, `$dist`, `$pkg`, `$cls`, `$module`, and the kind's
`SUMMARY`, `USAGE`, `PARAMS` and `REGISTRATION` fields); the generated code uses only decodekit's
public API, states each thing once (`plugin.py` declares the name, the parameters and the
description; the implementation is a class or a function and nothing more), registers by import
path (listing plugins stays torch-free), and its tests run the conformance kit where one exists
for the kind.
"""

from __future__ import annotations

from string import Template
from typing import NamedTuple

__all__ = ["KINDS", "NEEDS", "files_for"]

PYPROJECT = """\
[build-system]
requires = ["setuptools>=77"]
build-backend = "setuptools.build_meta"

[project]
name = "$dist"
version = "0.1.0"
description = "$summary"
readme = "README.md"
requires-python = ">=3.11"
license = "MIT"
dependencies = [$dependencies]

[project.optional-dependencies]
test = ["decodekit[testing]"]

# The entry point: decodekit imports `$pkg.plugin` and calls its hooks.
[project.entry-points.decodekit]
$name = "$pkg.plugin"

[tool.setuptools.packages.find]
where = ["src"]

[tool.setuptools.package-data]
$pkg = ["py.typed"]

[tool.pytest.ini_options]
testpaths = ["tests"]

# The files are written this wide: `ruff check`, `ruff format --check` and `mypy --strict src` pass as written
# (a NAME too long for a line: `ruff check --fix . && ruff format .` wraps it).
[tool.ruff]
line-length = 120
"""

README = """\
# $dist

$summary. A decodekit plugin: installed, it registers the $kind `$name`.

```bash
pip install -e '.[test]'  # from this folder; decodekit finds it through its entry point; [test] brings pytest
pytest                    # the tests: decodekit's conformance kit, run on this plugin
decodekit plugins         # lists $dist
```

It needs $needs, which pip finds on an index. From a checkout of decodekit (no index), install them
first by their folders: `pip install $folders`.

$usage

Files: `src/$pkg/plugin.py` declares it: its parameters with their bounds (error messages are
built from them) and its registration, by import path, so listing plugins imports no torch;
`$module.py` is the implementation; `tests/` checks it.
"""

INIT = '''\
"""$dist: $summary."""
'''

PARAMS = {
    "sampler": """\
class ${cls}Params(Params):
    # le: a cap past float32's range is inf there, and inf * tanh(logits / inf) is NaN
    cap: float = Field(default=30.0, gt=0, le=10_000, description="logits are squashed into (-cap, cap)")
""",
    "cache": """\
class ${cls}Params(Params):
    headroom: int = Field(default=0, ge=0, description="extra positions allocated beyond what the decode loop asks for")
""",
    "model": '''\
class ${cls}Params(Params):
    """The model's shape: a small reference GPT."""

    n_layer: int = Field(default=2, ge=1, description="transformer blocks")
    n_head: int = Field(default=4, ge=1, description="attention heads")
    n_kv_head: int = Field(default=2, ge=1, description="key/value heads (grouped-query attention)")
    n_embd: int = Field(default=64, ge=1, description="width; a multiple of n_head")
    block_size: int = Field(default=256, ge=1, description="the context, in tokens")
''',
    "strategy": """\
class ${cls}Params(Params):
    n: int = Field(default=4, ge=1, description="samples drawn per prompt; the most likely one is kept")
""",
}

# The parameter model sits beside its registration rather than in a params.py: it imports only
# pydantic, so listing plugins still imports no torch, and everything `decodekit plugins` and
# `decodekit samplers` show about the plugin is declared in this one file. (A plugin with several
# samplers, whose parameters would crowd the hook, keeps them in a params.py, as decodekit's own do.)
PLUGIN = '''\
"""The `$name` $what, declared: its parameters and its registration (by import path, so listing
plugins imports no torch)."""

from decodekit import Params, hookimpl
from decodekit.hookspecs import $registrar
from pydantic import Field


$params_model

@hookimpl
def $hook(register: $registrar) -> None:
    register(
        "$name",
        "$pkg.$module:$target",
        ${cls}Params,
        "$description",
    )
'''


class Registration(NamedTuple):
    """What a kind's `plugin.py` registers: `what` it is called, its `hook`, the `target` it names in the
    implementation module (a template, like `USAGE`) and its `description`."""

    what: str
    hook: str
    target: str
    description: str
    registrar: str = "Registrar"  # the type of the hook's `register` (decodekit.hookspecs)


REGISTRATION = {
    "sampler": Registration(
        "sampler", "register_samplers", "$cls", "Soft-cap logits: cap * tanh(logits / cap)", "SamplerRegistrar"
    ),
    "cache": Registration(
        "cache backend", "register_cache_backends", "$cls", "Preallocated keys/values, one per kv-head"
    ),
    "model": Registration("model", "register_models", "load", "A small random-init byte-level GPT"),
    "strategy": Registration(
        "decode strategy", "register_strategies", "$module", "Best of n: the most likely of n samples per prompt"
    ),
}

IMPL = {
    "sampler": '''\
"""`$name`: soft-capping, cap * tanh(logits / cap) (Gemma 2); removed tokens stay removed."""

import torch
from decodekit import Candidates, DecodeContext, ProcessorBase

from $pkg.plugin import ${cls}Params


class $cls(ProcessorBase[${cls}Params]):  # its name, parameters and kind: the registration's
    def __call__(self, logits: torch.Tensor, ctx: DecodeContext) -> torch.Tensor:
        # logits: [B, V]; a new tensor, the input is never modified
        capped = torch.tanh(logits / self.params.cap) * self.params.cap
        return torch.where(logits == float("-inf"), logits, capped)

    def on_candidates(self, c: Candidates, ctx: DecodeContext) -> Candidates:
        # The candidate fast path: after a truncation (top_k, top_p) the chain carries only the kept
        # tokens, values and ids [B, K] with the values sorted descending. The same map on the values
        # never decreases, so they stay sorted; the kit checks this agrees with the dense call.
        return Candidates(self(c.values, ctx), c.indices)
''',
    "cache": '''\
"""`$cls`: one preallocated key and value buffer per kv-head, `[B, n_kv_heads, capacity, D]` per layer."""

import dataclasses

from decodekit import CacheSpec, PreallocatedKVCache
from decodekit.storage import FloatStorage

from $pkg.plugin import ${cls}Params


class $cls(PreallocatedKVCache):
    storage = FloatStorage  # its kv-heads as given; the storage also makes "$name" a `store=` of `window`

    def __init__(self, spec: CacheSpec, params: ${cls}Params | None = None) -> None:
        headroom = params.headroom if params is not None else 0
        super().__init__(dataclasses.replace(spec, capacity=spec.capacity + headroom), params)
''',
    "model": '''\
"""`$name`: a small reference GPT over bytes, random-init with a fixed seed (load your weights here)."""

import torch
from decodekit import ParameterError
from decodekit_gpt.gpt import GPT, GPTConfig

from $pkg.plugin import ${cls}Params


class ByteTokenizer:
    """One token per byte of UTF-8: 256 ids, any text encodes."""

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: list[int]) -> str:
        return bytes(ids).decode("utf-8", errors="replace")


class $cls(GPT):
    """The reference GPT with the tokenizer it reads: your own nn.Module goes here."""

    tokenizer = ByteTokenizer()


def load(argument: str | None, params: ${cls}Params) -> $cls:
    """`dk.load_model("$name(n_layer=4)")` (`--model "$name(n_layer=4)"`) or `dk.load_model("$name", n_layer=4)`;
    `"$name:ARG"` would pass ARG (a weights path, say), which this random-init model has no use for."""
    if argument is not None:  # refused, not ignored: "$name:n_layer=4" must not quietly load the default shape
        raise ParameterError(
            f"model $name: argument {argument!r} is invalid; allowed: none (random init: no weights to read); "
            f"parameters go in brackets: '$name(n_layer=4)'"
        )
    config = GPTConfig(vocab_size=256, **params.model_dump())  # params: always the validated instance
    with torch.random.fork_rng():
        torch.manual_seed(0)  # the same weights in every process
        model = $cls(config)
    return model.requires_grad_(False).eval()
''',
    "strategy": '''\
"""`$name`: draw n samples per prompt, keep the one the model finds most likely (sum of log-probabilities)."""

from collections.abc import Iterator

import decodekit as dk
from decodekit.chain import Picked
from decodekit.engine import sample_steps

from $pkg.plugin import ${cls}Params


def $module(d: dk.Decoding, params: ${cls}Params) -> Iterator[None]:
    """`dk.decode(model, prompts, strategy="$name", n=4, ...)`: a policy over decodekit's engine.

    n rows per prompt, each with a seed of its own derived from its prompt's (so a prompt's result
    does not depend on its batch); the engine applies stop tokens, stop strings and max_new_tokens.
    """
    d.open(copies=params.n, copies_option="n")
    # Open now and return the rounds (not a generator): dk.stream then refuses bad sizes at its call.
    return _rounds(d, params.n)


def _rounds(d: dk.Decoding, n: int) -> Iterator[None]:
    """The rounds of an opened best-of-n decoding, then each prompt's best sample."""
    score = [0.0] * (n * len(d.prompts))  # log-probability of each sample so far

    def add(picked: Picked) -> None:
        live = d.live
        for row, lp in enumerate(picked.logprobs or ()):  # every row's chosen token, and its top n when asked
            if live[row]:
                score[row] += lp.raw

    # At least the chosen tokens' logprobs (to score them); the request's top n, which `finish` reports, if it asks
    yield from sample_steps(d, logprobs=d.request.logprobs or 0, after=add)
    for b in range(len(d.prompts)):
        best = max(range(b * n, (b + 1) * n), key=score.__getitem__)
        d.finish(b, d.outputs[best].tokens, d.outputs[best].logprobs)
''',
}

TESTS = {
    "sampler": '''\
"""The conformance kit on `$name`, made directly and by name, and its numbers by hand."""

import decodekit as dk
import torch
from decodekit.testing import ProcessorConformance

from $pkg.$module import $cls


class Test${cls}(ProcessorConformance):
    def make(self):
        return $cls(cap=5.0)


class Test${cls}ByName(ProcessorConformance):  # through the entry point: name and parameters
    spec = ("$name", {"cap": 5.0})


def test_values_by_hand():
    logits = torch.tensor([[10.0, -10.0, 0.0, float("-inf")]])
    out = $cls(cap=5.0)(logits, dk.DecodeContext(tokens=torch.zeros(1, 1, dtype=torch.long)))
    # 5 * tanh(2) = 4.8201; 0 stays 0; a removed token stays removed
    torch.testing.assert_close(out, torch.tensor([[4.8201379, -4.8201379, 0.0, float("-inf")]]))


def test_bad_value_names_parameter_and_bound():
    try:
        dk.create("$name", cap=-1)
    except dk.ParameterError as exc:
        assert "cap=-1" in str(exc) and "0 < cap" in str(exc)
    else:
        raise AssertionError("cap=-1 was accepted")
''',
    "cache": '''\
"""The conformance kit on the `$name` cache backend, and its registration."""

import decodekit as dk
from decodekit.testing import CacheConformance

from $pkg.$module import $cls


class Test${cls}(CacheConformance):
    def make(self, spec):
        return $cls(spec)

    def stored_heads(self, spec):
        return spec.n_kv_heads


def test_headroom_adds_positions():
    spec = dk.CacheSpec(n_layers=1, n_heads=4, n_kv_heads=2, head_dim=8, batch_size=1, capacity=10)
    assert dk.create_cache("$name(headroom=6)", spec).capacity == 16


def test_registered_through_the_entry_point():
    assert dk.get_registry().caches["$name"].distribution == "$dist"
''',
    "model": '''\
"""The `$name` model: the conformance kit, and loading by name."""

import decodekit as dk
import pytest
from decodekit.testing import ModelConformance


def test_loads_by_name_and_generates():
    model = dk.load_model("$name")
    out = dk.generate(model, ["Hello"], max_new_tokens=8, seed=0, cache="none")
    assert len(out.tokens[0]) == 8 and out.text is not None


def test_parameters_shape_the_model():
    assert len(dk.load_model("$name", n_layer=1).h) == 1  # h: the transformer blocks
    assert len(dk.load_model("$name(n_layer=1)").h) == 1  # the form `--model` takes
    with pytest.raises(dk.ParameterError, match="argument 'n_layer=1' is invalid"):  # refused, not ignored
        dk.load_model("$name:n_layer=1")
    try:
        dk.load_model("$name", n_layer=0)
    except dk.ParameterError as exc:
        assert "n_layer=0" in str(exc)
    else:
        raise AssertionError("n_layer=0 was accepted")


class Test${cls}(ModelConformance):  # the kit: rows independent of their padding, the cache agreeing with a forward
    def make(self):
        return dk.load_model("$name")


def test_registered_through_the_entry_point():
    assert dk.get_registry().models["$name"].distribution == "$dist"
''',
    "strategy": '''\
"""The `$name` strategy: by name through `dk.decode`, against `dk.generate` on the same seeds."""

import decodekit as dk
from decodekit.context import mix_seed
from decodekit.testing.strategies import StrategyConformance
from decodekit.testing.tiny_lm import TinyLM

CACHE = dk.PreallocatedKVCache  # the core's cache, which keeps every token: no cache plugin needed


class TestConformance(StrategyConformance):
    """The kit's rules for every strategy: rows, ids, lengths, stops, seeds, batches, the stream."""

    strategy = "$name(n=3)"


def test_keeps_the_most_likely_of_n_samples():
    model = TinyLM(64)
    prompts, seeds = [[1, 2, 3], [4, 5]], [11, 22]
    out = dk.decode(model, prompts, strategy="$name", n=3, max_new_tokens=6, seed=seeds, cache=CACHE)
    for prompt, seed, tokens in zip(prompts, seeds, out.tokens):
        # the prompt's n samples: copy 0 is seeded with the prompt's seed, copy i > 0 with mix_seed(it, i)
        copies = [seed] + [mix_seed(seed, i) for i in range(1, 3)]
        samples = dk.generate(model, [prompt] * 3, max_new_tokens=6, seed=copies, logprobs=0, cache=CACHE)
        scores = {tuple(t): sum(lp.raw for lp in lps) for t, lps in zip(samples.tokens, samples.logprobs)}
        assert tuple(tokens) in scores and scores[tuple(tokens)] == max(scores.values())
    alone = dk.decode(model, [prompts[1]], strategy="$name", n=3, max_new_tokens=6, seed=[22], cache=CACHE)
    assert alone.tokens == out.tokens[1:]  # a prompt's result does not depend on its batch


def test_too_many_samples_are_refused_at_the_streams_call():
    """The policy opens its decoding before it returns its rounds: dk.stream refuses n now, not at the first event."""
    try:
        dk.stream(TinyLM(64), [[1]], strategy="$name", n=2**40, max_new_tokens=4, cache=CACHE)
    except dk.ParameterError as exc:
        assert str(exc).startswith("strategy $name: n=1099511627776 is invalid: its 1,099,511,627,776 rows")
    else:
        raise AssertionError("n=2**40 was accepted at dk.stream's call")


def test_bad_option_names_parameter_and_bound():
    try:
        dk.decode(TinyLM(64), [[1]], strategy="$name", n=0)
    except dk.ParameterError as exc:
        assert "n=0" in str(exc)
    else:
        raise AssertionError("n=0 was accepted")


def test_registered_through_the_entry_point():
    assert dk.get_registry().strategies["$name"].distribution == "$dist"
''',
}

SUMMARY = {
    "sampler": "Soft-capped logits, cap * tanh(logits / cap)",
    "cache": "A KV-cache backend with one key and value per kv-head",
    "model": "A small byte-level reference GPT",
    "strategy": "Best-of-n decoding: the most likely of n samples per prompt",
}

USAGE = {
    "sampler": 'Use it by name: `dk.Chain.parse("$name(20) | temperature(0.8)")`, '
    '`decodekit generate "Hello" --chain "$name(20)"`.',
    "cache": 'Use it by name: `dk.generate(model, prompts, cache="$name")`, `decodekit generate --cache $name`.',
    "model": 'Use it by name, parameters in brackets: `dk.load_model("$name(n_layer=4)")`, '
    '`decodekit generate "Hello" --model "$name(n_layer=4)"`.',
    "strategy": 'Use it by name: `dk.decode(model, prompts, strategy="$name", n=4)`.',
}

KINDS = tuple(IMPL)
NEEDS = {kind: ("decodekit-gpt",) if kind == "model" else () for kind in KINDS}  # the plugins a kind builds on


def files_for(kind: str, name: str) -> dict[str, str]:
    """The distribution's files, by path relative to its folder."""
    pkg = "decodekit_" + name
    values = {
        "name": name,
        "kind": kind,
        "dist": "decodekit-" + name.replace("_", "-"),
        "pkg": pkg,
        "cls": "".join(part.capitalize() for part in name.split("_")),
        "module": name,
        "summary": SUMMARY[kind],
        "dependencies": ", ".join(
            f'"{d}"' for d in ("decodekit>=0.1", "torch>=2.5", *(f"{n}>=0.1" for n in NEEDS[kind]))
        ),
    }
    values["usage"] = Template(USAGE[kind]).substitute(values)
    values["needs"] = " and ".join(("decodekit", *NEEDS[kind]))
    values["folders"] = " ".join(("/path/to/decodekit", *(f"/path/to/decodekit/plugins/{n}" for n in NEEDS[kind])))
    values.update(REGISTRATION[kind]._asdict())
    values["target"] = Template(values["target"]).substitute(values)
    values["params_model"] = Template(PARAMS[kind]).substitute(values)
    texts = {
        "pyproject.toml": PYPROJECT,
        "README.md": README,
        f"src/{pkg}/__init__.py": INIT,
        f"src/{pkg}/py.typed": "",
        f"src/{pkg}/plugin.py": PLUGIN,
        f"src/{pkg}/{name}.py": IMPL[kind],
        f"tests/test_{name}.py": TESTS[kind],
    }
    return {path: Template(text).substitute(values) for path, text in sorted(texts.items())}
