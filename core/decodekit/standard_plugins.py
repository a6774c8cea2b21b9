"""The plugin distributions of this repository, by the names they register: what an unknown name's error (the
registry's, the command line's) tells a user to install when the name is a standard one, to enable when it is
installed but switched off (DECODEKIT_LOAD_PLUGINS, DECODEKIT_DISABLE_PLUGINS), or why it failed to load."""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Callable, Iterable
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlparse

if TYPE_CHECKING:
    from decodekit.registry import PluginFailure

__all__ = [
    "STANDARD_PLUGINS",
    "canonical_name",
    "checkout",
    "env_names",
    "failed_to_load",
    "folders",
    "install_hint",
    "installed",
    "installed_but",
    "switched_off",
]

# What each plugin distribution of this repository registers: its samplers, cache backends, strategies and models.
_REGISTERS: dict[str, str] = {
    "decodekit-adaptive": "adaptive_p dynamic_temperature gumbel mirostat mirostat_v2",
    "decodekit-beam": "beam",
    "decodekit-cache-dense": "dense",
    "decodekit-cache-gqa": "gqa",
    "decodekit-cache-int8": "int8",
    "decodekit-cache-scored": "h2o knorm snapkv streaming tova",
    "decodekit-cache-window": "window",
    "decodekit-constraints": (
        "allowed_tokens bad_words exponential_decay logit_bias min_new_tokens reasoning_budget sequence_bias"
    ),
    "decodekit-gpt": "gpt2",
    "decodekit-grammar": "grammar json json_schema regex",
    "decodekit-greedy": "greedy",
    "decodekit-guidance": "cfg",
    "decodekit-hf": "hf",
    "decodekit-penalties": "dry frequency_penalty no_repeat_ngram presence_penalty",
    "decodekit-repetition-penalty": "repetition_penalty",
    "decodekit-shakespeare": "tiny-shakespeare tiny-shakespeare-draft",
    "decodekit-shakespeare-llama": "tiny-shakespeare-llama",
    "decodekit-speculative": "speculative",
    "decodekit-temperature": "temperature",
    "decodekit-top-k": "top_k",
    "decodekit-top-p": "top_p",
    "decodekit-truncation": "epsilon eta min_p top_a top_h top_n_sigma typical xtc",
    "decodekit-watermark": "watermark",
}
STANDARD_PLUGINS: dict[str, str] = {name: dist for dist, names in _REGISTERS.items() for name in names.split()}

# The plugins each plugin needs at run time (its pyproject's dependencies): from a checkout, pip finds
# them on no index, so an install hint names their folders too.
PLUGIN_NEEDS: dict[str, tuple[str, ...]] = {
    "decodekit-shakespeare": ("decodekit-gpt", "decodekit-cache-window"),
    "decodekit-shakespeare-llama": ("decodekit-hf",),
    "decodekit-ray": ("decodekit-cli",),
}


def canonical_name(name: str) -> str:
    """PEP 503 normalised distribution name."""
    return re.sub(r"[-_.]+", "-", name.strip()).lower()


def env_names(name: str) -> set[str] | None:
    """A comma-separated list of distribution names (None when the variable is unset)."""
    raw = os.environ.get(name)
    return None if raw is None else {canonical_name(n) for n in raw.split(",") if n.strip()}


def installed(distribution: str) -> bool:
    try:
        metadata.distribution(distribution)
    except metadata.PackageNotFoundError:
        return False
    return True


def checkout() -> Path | None:
    """The checkout decodekit was installed from (pip's direct_url.json, PEP 610), or None (an index, a wheel)."""
    try:
        url = json.loads(metadata.distribution("decodekit").read_text("direct_url.json") or "{}").get("url", "")
    except (metadata.PackageNotFoundError, ValueError, AttributeError):
        return None
    parsed = urlparse(url)
    root = Path(unquote(parsed.path))
    return root if parsed.scheme == "file" and (root / "plugins").is_dir() else None


def with_needs(distributions: Iterable[str], is_installed: Callable[[str], bool] = installed) -> list[str]:
    """The distributions and the plugins they need, in turn, that are not installed."""
    local = set(distributions)
    while needed := {n for d in local for n in PLUGIN_NEEDS.get(d, ()) if not is_installed(n)} - local:
        local |= needed
    return sorted(local)


def folders(
    distributions: Iterable[str], checkout: Path | None = None, is_installed: Callable[[str], bool] = installed
) -> str:
    """The plugins' folders and those they need, quoted for a shell (a checkout may sit in "my checkout")."""
    prefix = f"{checkout}/" if checkout else ""
    return " ".join(shlex.quote(f"{prefix}plugins/{d}") for d in with_needs(distributions, is_installed))


def install_hint(
    distributions: Iterable[str],
    root: Path | None,
    is_installed: Callable[[str], bool] = installed,
    pip: str = "pip install",
) -> str:
    """Both ways: `pip install NAMES` from an index; from a checkout (whose plugins no index knows), their folders
    and those of the plugins they need that are not installed: absolute ones in `root` (`checkout()`, passed by
    every caller, so none gives relative folders where the checkout is known), else relative to it.
    pip: the command ("pip install --force-reinstall": a broken install)."""
    names = sorted(set(distributions))
    where = "from a checkout" if root else "from a checkout of decodekit, in its folder"
    return f"{pip} {' '.join(names)} ({where}: {pip} {folders(names, root, is_installed)})"


def switched_off(distributions: Iterable[str]) -> str | None:
    """How to enable those of `distributions` that are installed but left out by DECODEKIT_DISABLE_PLUGINS or
    DECODEKIT_LOAD_PLUGINS (None: none is): a pip install would change nothing."""
    names = sorted({canonical_name(d) for d in distributions if installed(d)})
    allowed, denied = env_names("DECODEKIT_LOAD_PLUGINS"), env_names("DECODEKIT_DISABLE_PLUGINS") or set()
    listed = [d for d in names if d in denied]
    unlisted = [d for d in names if allowed is not None and d not in allowed]
    words = []
    if listed:
        var, them = "DECODEKIT_DISABLE_PLUGINS", _them(listed)
        words.append(f"{var} lists {', '.join(listed)}; remove {them} from {var} to enable {them}")
    if unlisted:
        var, them = "DECODEKIT_LOAD_PLUGINS", _them(unlisted)
        words.append(
            f"{var} does not list {', '.join(unlisted)}; add {them} to {var} (or unset {var}) to enable {them}"
        )
    return "; ".join(words) or None


def failed_to_load(distributions: Iterable[str], failures: Iterable[PluginFailure]) -> str | None:
    """The load errors (the registry's `failures`) of those of `distributions` that are installed and enabled but
    failed to load (None: none did): a pip install would change nothing."""
    names = {canonical_name(d) for d in distributions}
    return "; ".join(f.message() for f in failures if f.distribution in names) or None


def installed_but(distribution: str, failures: Iterable[PluginFailure]) -> str | None:
    """Why an installed standard distribution's names are missing, as the words after "NAME is": disabled, with how
    to enable it, or failed to load, with the error (None: neither, so it is to be installed)."""
    if enable := switched_off([distribution]):
        return f"installed but disabled: {enable}"
    if failed := failed_to_load([distribution], failures):
        return f"installed, but {failed}"
    return None


def _them(names: list[str]) -> str:
    return "it" if len(names) == 1 else "them"
