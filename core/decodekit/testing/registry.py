"""Registry checks for a plugin: registered by its distribution, chain strings and specs that
round-trip, parameter errors that name the parameter, the value and the range, and a hook that
registers by import path without importing torch.

    check_registered("min_p", distribution="decodekit-truncation", kind="processor")
    check_chain_string("min_p(0.05)", {"p": 0.05, "min_keep": 1})
    check_bad_parameters("min_p", {"p": 1.5}, ["p=1.5", "0 <= p <= 1"])
    check_bad_parameters("window", {"size": 0}, ["size=0", "1 <= size"], category="cache backend")
    check_hook_imports_no_torch("decodekit_truncation.plugin", "register_samplers")
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

from decodekit.chain import Chain
from decodekit.errors import ParameterError
from decodekit.plugins import cache_factory, create, get_registry
from decodekit.registry import Category
from decodekit.strategies import strategy_params

__all__ = ["check_bad_parameters", "check_chain_string", "check_hook_imports_no_torch", "check_registered"]


def check_registered(name: str, *, distribution: str, kind: str | None = None, category: Category = "sampler") -> None:
    """`name` is registered by `distribution` in `category` with a description (a sampler as a
    `kind`, "processor" or "selector"), and its implementation imports."""
    entry = get_registry().lookup(category, name)
    assert entry.distribution == distribution, f"{name}: registered by {entry.distribution}, expected {distribution}"
    assert entry.kind == kind, f"{name}: registered as a {entry.kind}, expected a {kind}"
    assert entry.description, f"{name}: registered without a description"
    assert callable(entry.load()), f"{name}: {entry.impl!r} is not callable"


def check_chain_string(text: str, params: dict[str, Any]) -> None:
    """`text` (one stage, a processor or a selector) parses into a stage with `params`, and the chain
    round-trips through its spec (also through JSON, where object keys become strings) and its string."""
    chain = Chain.parse(text)
    stage = chain.processors[0] if chain.processors else chain.selector
    assert stage.params.model_dump() == params, f"{text}: parsed as {stage!r}"  # type: ignore[attr-defined]
    assert Chain.from_spec(chain.to_spec()) == chain, f"{text}: the spec does not rebuild the chain"
    assert Chain.from_spec(json.loads(json.dumps(chain.to_spec()))) == chain, f"{text}: the spec's JSON does not"
    assert Chain.parse(str(chain)) == chain, f"{text}: the string form {str(chain)!r} does not"


def check_bad_parameters(
    name: str, params: dict[str, Any], expected: Sequence[str], *, category: Category = "sampler"
) -> None:
    """Building `name` of `category` with `params` raises a `ParameterError` whose message contains
    every string of `expected`."""
    build = {"sampler": create, "cache backend": cache_factory, "strategy": strategy_params}[category]
    try:
        build(name, **params)
    except ParameterError as error:
        message = str(error)
    else:
        raise AssertionError(f"{name}({params}): no ParameterError")
    for text in expected:
        assert text in message, f"{name}({params}): {text!r} not in the error {message!r}"


_HOOK_CALL = """\
import json, sys
import {module} as plugin
calls = []
plugin.{hook}(lambda name, impl, *args, **kwargs: calls.append((name, impl)))
assert 'torch' not in sys.modules, '{module} imported torch'
print(json.dumps(calls))
"""


def check_hook_imports_no_torch(module: str, hook: str) -> list[tuple[str, str]]:
    """Importing the plugin module `module` and calling its `hook` (a `register_*` hookimpl) with a
    recording registrar, in a fresh interpreter, imports no torch. Returns what it registered:
    (name, import path) of each call."""
    code = _HOOK_CALL.format(module=module, hook=hook)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    failure = (run.stderr.strip().splitlines() or [f"exit status {run.returncode}"])[-1]
    assert run.returncode == 0, f"{module}.{hook} in a fresh interpreter: {failure}"
    return [(name, path) for name, path in json.loads(run.stdout)]
