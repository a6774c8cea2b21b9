"""README.md and docs/ cannot drift: every example runs, every shown CLI output is what the command prints.

The machinery is `tests/doc_examples.py`; `make docs-outputs` regenerates the outputs after a change.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import doc_examples as dx
import pytest
import torch


def _rel(page: Path) -> str:
    return str(page.relative_to(dx.ROOT))


pytestmark = pytest.mark.xdist_group("docs")  # the pages' plugins are installed once, in one worker


@pytest.fixture(scope="module")
def example_plugins(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Path], Path]:
    """The example plugins the pages show, written out and installed: (their folders, the install target)."""
    root = tmp_path_factory.mktemp("doc-plugins")
    dists = dx.write_plugins(root / "src")
    dx.install_plugins(dists, root / "site")
    return dists, root / "site"


def _env(site: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DECODEKIT_", "PYTEST_"))}
    env["PYTHONPATH"] = str(site)
    return env


PAGES = [p for p in dx.pages() if dx.code_blocks(p)]


@pytest.fixture(scope="module")
def page_runs(
    example_plugins: tuple[list[Path], Path], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, tuple[int, str]]:
    """Every page's examples, each page in a process of its own: {page: (exit status, what it printed)}."""
    work = tmp_path_factory.mktemp("pages")
    report = work / "report.json"
    r = subprocess.run(
        [sys.executable, dx.__file__, "--run", *map(str, PAGES), "--report", str(report)],
        cwd=work,
        env=_env(example_plugins[1]),
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    return {page: (status, output) for page, (status, output) in json.loads(report.read_text()).items()}


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_page_examples_run_in_order(page: Path, page_runs: dict[str, tuple[int, str]]) -> None:
    status, output = page_runs[str(page)]
    assert status == 0, f"{_rel(page)}: an example failed\n{output}"
    for line in output.splitlines():
        if line.startswith("skipped "):
            print(line)  # shown by `pytest -rA`; the block says why on its first line


def test_example_plugins_pass_their_own_tests(example_plugins: tuple[list[Path], Path], tmp_path: Path) -> None:
    dists, site = example_plugins
    assert dists, "the docs show no example plugin"
    tests = [str(dist / "tests") for dist in dists]  # one pytest for all: each a test folder of its own
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "--import-mode=importlib", *tests],
        cwd=tmp_path,
        env=_env(site),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, f"{r.stdout}\n{r.stderr}"
    passed = [line for line in r.stdout.splitlines() if line.startswith("PASSED")]  # -rA lists each test
    for test_file in (f for dist in dists for f in (dist / "tests").glob("test_*.py")):
        assert any(f"{test_file.name}::" in line for line in passed), f"{test_file}: no test ran\n{r.stdout}"


def mismatches(shown: list[dx.Shown], outputs: list[str]) -> list[str]:
    """A diff per shown output that is not what its command printed (timings masked, floats to 1e-5)."""
    found = []
    for s, out in zip(shown, outputs):
        if not dx.agree(s.output, out):
            diff = difflib.unified_diff(s.output.split("\n"), out.split("\n"), "shown", "printed", lineterm="")
            found.append(f"{s.block.where}: $ {s.command}\n" + "\n".join(diff))
    return found


def test_shown_cli_outputs_are_what_the_commands_print(tmp_path: Path) -> None:
    shown = [s for page in dx.pages() for s in dx.shown_commands(page)]
    assert len(shown) > 10
    outputs = dx.run_commands(shown, dx.scratch_dir(tmp_path))
    problems = mismatches(shown, outputs)
    assert not problems, "run `make docs-outputs`:\n\n" + "\n\n".join(problems)


def test_an_output_edited_by_hand_is_caught(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    version = dx.run_command("decodekit --version", tmp_path)
    for shown_output, differs in ((version, False), (version + ".1", True)):
        page.write_text(f"```console\n$ decodekit --version\n{shown_output}\n```\n")
        shown = list(dx.shown_commands(page))
        assert len(mismatches(shown, [version])) == int(differs)


def test_a_decodekit_command_cut_by_head_or_tail_runs_in_this_process(tmp_path: Path) -> None:
    """`decodekit plugins --check | tail -2` ran in bash, a process of its own (5-20 s): its stdout is cut here."""
    assert dx.decodekit_command("decodekit plugins --check | tail -2") == dx.DecodekitCommand(
        {}, ["plugins", "--check"], None, 2
    )
    assert dx.decodekit_command("X=1 decodekit plugins | head -n 3") == dx.DecodekitCommand({"X": "1"}, ["plugins"], 3)
    assert dx.decodekit_command("decodekit plugins | tail -2 | cat") is None
    lines = dx.run_command("decodekit samplers --json top_p", tmp_path).split("\n")
    assert len(lines) > 4
    assert dx.run_command("decodekit samplers --json top_p | tail -3", tmp_path) == "\n".join(lines[-3:])
    assert dx.run_command("decodekit samplers --json top_p | head -2", tmp_path) == "\n".join(lines[:2])


def test_timings_are_the_only_masked_numbers() -> None:
    assert dx.masked('"tokens_per_second": 18.94, "seconds": 4.33') == '"tokens_per_second": …, "seconds": …'
    assert dx.masked("12 tokens · 0.4 s · 690.1 tokens/s") == "12 tokens · 0.4 s · … tokens/s"
    assert dx.masked('"entropy": 0.7629') == '"entropy": 0.7629'


def test_full_floats_agree_to_their_float32_precision_only() -> None:
    shown = '"entropy": 0.45340263843536377, "probs": [0.003388509852811694, 1e-05]'
    assert dx.agree(shown, '"entropy": 0.453402578830719, "probs": [0.003388506593182683, 1e-05]')
    assert not dx.agree(shown, '"entropy": 0.45341263843536377, "probs": [0.003388509852811694, 1e-05]')
    assert not dx.agree(shown, '"entropy": 0.45340263843536377, "probs": [0.003388509852811694, 2e-05]')
    assert not dx.agree(shown, '"entropy": 0.45340263843536377, "probs": [0.003388509852811694]')


def test_the_index_links_every_page() -> None:
    """docs/index.md once left out the caches, speculative and reliability pages."""
    index = (dx.ROOT / "docs" / "index.md").read_text()
    pages = sorted(p.name for p in (dx.ROOT / "docs").glob("*.md") if p.name != "index.md")
    assert [p for p in pages if f"]({p})" not in index] == []


def _local_needs(folder: str) -> set[str]:
    """The checkout's plugin folders `folder` needs at run time (its pyproject's decodekit-* dependencies)."""
    text = (dx.ROOT / folder / "pyproject.toml").read_text()
    deps = re.search(r"^dependencies = \[(.*?)^\]", text, re.S | re.M)
    names = re.findall(r'"(decodekit-[a-z0-9-]+)', deps[1] if deps else "")
    return {f"plugins/{n}" for n in names}


def test_a_pip_install_of_checkout_folders_names_the_folders_they_need() -> None:
    """README's `pip install . plugins/decodekit-shakespeare ...` failed on a machine with only the checkout:
    'No matching distribution found for decodekit-gpt' (a dependency no index has)."""
    missing = []
    for page in dx.pages():
        # a command continued with \, or an inline one wrapped; not the command line's own hints (test_install_hints)
        text = re.sub(r"pip\s+install\s+", "pip install ", page.read_text().replace("\\\n", " "))
        text = re.sub(r"^decodekit: .*$", "", text, flags=re.M)
        for command in re.findall(r"pip install ([^`#;\n]*)", text):
            folders = {f"plugins/{name}" for name in re.findall(r"plugins/(decodekit-[a-z0-9-]+)", command)}
            if "*" in command or not folders:
                continue  # every plugin, or none
            need = set().union(*(_local_needs(f) for f in folders)) - folders
            missing += [f"{_rel(page)}: 'pip install {command.strip()}' lacks {sorted(need)}"] if need else []
    assert not missing, "\n".join(missing)


_FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
_LINK = re.compile(r"\]\(([\w./-]*\.md)?#([^)\s]+)\)")


def _anchors(page: Path) -> set[str]:
    """The heading anchors mkdocs gives `page`: pymdownx's slugify (case: lower, as mkdocs.yml sets it), a repeated
    heading's with `_1`, `_2`..."""
    seen: dict[str, int] = {}
    for title in re.findall(r"^#{1,6} (.+?)\s*$", _FENCE.sub("", page.read_text()), re.M):
        text = re.sub(r"[^\w\s-]", "", re.sub(r"\[([^]]*)\]\([^)]*\)", r"\1", title)).strip().lower()
        slug = re.sub(r"\s", "-", text)  # each space a hyphen: "a — b" is "a--b"
        seen[slug] = seen.get(slug, -1) + 1
    return {slug if i == 0 else f"{slug}_{i}" for slug, n in seen.items() for i in range(n + 1)}


def test_every_anchor_link_names_a_heading() -> None:
    """`mkdocs build --strict` (its `validation: anchors`) let `[below](#window)` through, where the heading's anchor
    is `#window-attention-sinks-plus-a-sliding-window`: every `(#x)` and `(page.md#x)` in the docs names a heading."""
    docs = dx.ROOT / "docs"
    broken = []
    for page in sorted(docs.glob("*.md")):
        for target, anchor in _LINK.findall(_FENCE.sub("", page.read_text())):
            linked = docs / target if target else page
            if linked.exists() and anchor not in _anchors(linked):
                broken.append(f"{page.name}: ({target}#{anchor})")
    assert broken == []


def test_plugins_md_quotes_the_key_load_state_dict_misses_after_save_model(tmp_path: Path) -> None:
    """plugins.md ("A model plugin") quoted `Missing key(s) in state_dict: "lm_head.weight"` for the template's
    `load_state_dict(load_file(...))` of tied weights; `save_model` keeps the first of the tied names by sort order,
    so the reference GPT the template builds misses `wte.weight` (a model's own names decide which)."""
    from decodekit_gpt.gpt import GPT, GPTConfig
    from safetensors.torch import load_file, save_model

    config = GPTConfig(vocab_size=64, n_layer=1, n_head=2, n_embd=16)
    save_model(GPT(config), str(tmp_path / "weights.safetensors"))
    with pytest.raises(RuntimeError) as raised:
        GPT(config).load_state_dict(load_file(str(tmp_path / "weights.safetensors")))
    missing = re.search(r'Missing key\(s\) in state_dict: ("[^"]+")', str(raised.value))
    assert missing is not None, str(raised.value)
    page = " ".join((dx.ROOT / "docs" / "plugins.md").read_text().split())
    assert f"Missing key(s) in state_dict: {missing[1]}" in page


def _directives() -> list[tuple[str, str]]:
    """Every `::: module` of the API reference (docs/api/*.md), with its options block."""
    found: list[tuple[str, str]] = []
    for page in sorted((dx.ROOT / "docs" / "api").glob("*.md")):
        found += re.findall(r"^::: ([\w.]+)\n((?:    .*\n)*)", page.read_text(), re.M)
    return found


def _rendered(module: str) -> set[str] | None:
    """The names of `module` the API reference (docs/api/*.md) renders: None for all of them (a `::: module` without
    `members`), else those of its `members` lists; an empty set where no page renders it."""
    names: set[str] = set()
    for name, options in _directives():
        if name != module:
            continue
        members = re.search(r"members: \[(.*?)\]", options)
        if members is None:
            return None
        names |= {name.strip() for name in members[1].split(",")}
    return names


def _renders(module: str, name: str) -> bool:
    """Whether the API reference renders `module`'s public `name`: as a member of `module` (the whole module, or its
    `members`), of a package above it that shows its submodules, or of one that renders it re-exported (the
    same object in its `__all__`, as `::: decodekit` renders `decodekit.cache.KVCache`)."""
    import importlib

    obj = getattr(importlib.import_module(module), name)
    for shown, options in _directives():
        members = _rendered(shown)
        if shown == module and (members is None or name in members):
            return True
        if module.startswith(f"{shown}.") and members is None and "show_submodules: true" in options:
            return True
        package = importlib.import_module(shown)
        exported = name in getattr(package, "__all__", ()) and getattr(package, name) is obj
        if exported and (members is None or name in members):
            return True
    return False


@pytest.mark.parametrize("module", ["decodekit.storage", "decodekit.cache", "decodekit.copies"])
def test_the_api_reference_renders_the_modules_the_guides_send_cache_authors_to(module: str) -> None:
    """docs/caches.md ("Storage and eviction are separate") and docs/plugins.md ("A cache plugin, complete") send a
    storage's author to `decodekit.storage.Storage`, `take_slots`, `StorageFactory`, `lookup_storage`, `check_memory`,
    none of which the API reference rendered; the standard caches check `reorder` and `crop_rows` with
    `decodekit.cache.row_index` and `row_ends` and name a cache with `cache_name`, which it did not render either,
    nor docs/caches.md's `decodekit.copies.CopiesView`: every public name of the module is rendered (here or, the same
    object, at the top level)."""
    import importlib

    public = importlib.import_module(module).__all__
    assert [name for name in public if not _renders(module, name)] == []


def _guides() -> list[Path]:
    """The pages of the site's Guide and Plugins sections (mkdocs.yml's nav): where a reader is sent to the API."""
    nav = (dx.ROOT / "mkdocs.yml").read_text().split("\nnav:\n", 1)[1]
    pages, section = [], ""
    for line in nav.splitlines():
        if heading := re.fullmatch(r"  - ([\w ]+):", line):
            section = heading[1]
        elif section in ("Guide", "Plugins") and (page := re.search(r": (\S+\.md)$", line)):
            pages.append(dx.ROOT / "docs" / page[1])
    return pages


def _imports(module: str) -> bool:
    import importlib

    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def test_the_api_reference_renders_the_names_the_guides_send_readers_to() -> None:
    """docs/caches.md sent a model's author to `decodekit.copies.CopiesView`, docs/strategies.md a strategy's to
    `decodekit.engine.check_rows`, and the API reference rendered neither: every `decodekit.module.name` a guide
    names exists and is rendered."""
    import importlib

    missing = []
    for page in _guides():
        for ref in sorted(set(re.findall(r"`(decodekit(?:\.\w+)+)", page.read_text()))):
            parts = ref.split(".")
            at = next(i for i in range(len(parts), 0, -1) if _imports(".".join(parts[:i])))
            if at == len(parts):
                continue  # a module: its page is what the guide names
            module, name = ".".join(parts[:at]), parts[at]
            if not hasattr(importlib.import_module(module), name) or not _renders(module, name):
                missing.append(f"{page.name}: {module}.{name}")
    assert missing == []


def test_the_cache_of_writing_a_cache_is_built_by_name_as_registered() -> None:
    """docs/caches.md ("Writing a cache") said a cache is registered like a sampler, with a parameter model, and showed
    a class taking `(spec, n=5, store="gqa")`, registering nothing: a backend is called `impl(spec, params)`, so the
    class registered as the page said got `NoParams` for `n` (`TypeError` from `torch.zeros`). The page's block
    registers its cache, which `dk.create_cache` builds by name with parameters."""
    import decodekit as dk

    page = dx.ROOT / "docs" / "caches.md"
    text = page.read_text()
    section = text.index("\n## Writing a cache\n")
    end = text.index("\n## ", section + 1)
    lines = text.count("\n", 0, section), text.count("\n", 0, end)
    [block] = [b for b in dx.blocks(page) if b.lang == "python" and lines[0] < b.line < lines[1]]
    body = block.body.replace("check_cache(RecentSuite())", "")  # the kit: the page's own run does it
    try:
        exec(compile(body, block.where, "exec"), {})
        cache = dk.create_cache("recent(n=3, store='int8')", dk.CacheSpec(2, 4, 2, 8, 1, 64))
        k = torch.randn(1, 2, 4, 8)
        for layer in range(2):
            keys = cache.update(layer, k, k)[0]
        assert getattr(cache, "n", None) == 3 and cache.length == 4 and keys.shape == (1, 2, 4, 8)
        assert cache.update(0, k[:, :, :1], k[:, :, :1])[0].shape == (1, 2, 4, 8)  # the ring's 3 and the new one
    finally:
        if "recent" in dk.plugins.get_registry().caches:
            dk.unregister_plugin("recent")


def test_the_pages_that_list_the_shared_decode_options_list_every_one() -> None:
    """docs/strategies.md ("Adding a strategy from a plugin") listed the options every strategy shares as `chain`,
    `max_new_tokens`, `cache`, `stop_tokens`, `stop_strings`, `seed`, `logprobs`, `compile`: a strategy's author
    read nothing of `include_stop_str_in_output` and `prompt_logprobs`, which `dk.DecodeOptions` has too (and the
    engine honours for a policy, or refuses it where it prefills otherwise). Every list after `dk.DecodeOptions` is
    whole."""
    import decodekit as dk

    options = set(dk.DecodeOptions.__required_keys__ | dk.DecodeOptions.__optional_keys__)
    lists = []
    for page in sorted((dx.ROOT / "docs").glob("*.md")):
        text = " ".join(page.read_text().split())
        for run in re.findall(r"`dk\.DecodeOptions`[^:`]*(?:`[^`]*`[^:`]*)*?: ((?:`\w+`(?:, |;|\)|$))+)", text):
            listed = set(re.findall(r"`(\w+)`", run))
            lists.append(page.name)
            assert sorted(options - listed) == [], f"{page.name}: dk.DecodeOptions listed as {sorted(listed)}"
    assert sorted(lists) == ["concepts.md", "strategies.md"]  # the lists this test reads
