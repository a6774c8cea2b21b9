"""The core's modules import each other without a circle, whatever is imported first.

A static check: the module-level imports of every module of `decodekit` (imports inside
functions and under `if TYPE_CHECKING:` run later, or never) form a graph with no cycle.
It catches a circle that a lucky import order would hide.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import decodekit

PACKAGE = Path(decodekit.__file__).parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _top_level_imports(tree: ast.Module) -> list[str]:
    """The modules a module imports when it is itself imported (not in functions or TYPE_CHECKING)."""
    found: list[str] = []
    pending: list[ast.stmt] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.If) and not _is_type_checking(node):
            pending += node.body + node.orelse
        elif isinstance(node, ast.Try):
            pending += node.body + node.orelse + node.finalbody + [s for h in node.handlers for s in h.body]
        elif isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append(node.module)
            found += [f"{node.module}.{alias.name}" for alias in node.names]  # `from pkg import submodule`
    return found


def import_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        imported = _top_level_imports(ast.parse(path.read_text()))
        graph[name] = {m for m in imported if m in MODULES and m != name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle as a list of modules (first == last), or None; iterative depth-first search."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for root in sorted(graph):
        if state.get(root):
            continue
        path, stack = [root], [iter(sorted(graph[root]))]
        state[root] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            elif not state.get(nxt):
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(graph[nxt])))
    return None


def test_the_cycle_finder_finds_a_planted_cycle() -> None:
    """The check can fail: the old circle chain -> plugins -> decoding -> chain is found."""
    graph = import_graph()
    assert find_cycle(graph) is None
    planted = {**graph, "decodekit.plugins": graph["decodekit.plugins"] | {"decodekit.loop"}}
    cycle = find_cycle(planted)
    assert cycle is not None and cycle[0] == cycle[-1]
    assert {"decodekit.plugins", "decodekit.loop", "decodekit.chain"} <= set(cycle)


def test_no_module_imports_itself_back() -> None:
    graph = import_graph()
    assert len(graph) > 25  # every module was read
    assert find_cycle(graph) is None


def test_the_registry_and_the_chain_stand_below_the_loop() -> None:
    """Layering: the registry knows nothing of chains or decoding; the chain nothing of decoding."""
    graph = import_graph()

    def reachable(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for m in graph[todo.pop()] - seen:
                seen.add(m)
                todo.append(m)
        return seen

    decoding = {"decodekit.loop", "decodekit.beam", "decodekit.strategies", "decodekit.request"}
    assert not reachable("decodekit.registry") & (decoding | {"decodekit.chain", "decodekit.plugins"})
    assert not reachable("decodekit.plugins") & (decoding | {"decodekit.chain"})
    assert not reachable("decodekit.chain") & decoding


def test_the_chain_imports_first_in_a_fresh_interpreter() -> None:
    """The dynamic counterpart for the ordering that used to break: `decodekit.chain` first."""
    code = "import decodekit.chain, decodekit as dk; assert callable(dk.generate) and dk.Chain().selector"
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)


def test_listing_plugins_imports_no_torch() -> None:
    """Plugins register by import path and the registry imports nothing heavy: `decodekit plugins` stays fast."""
    code = (
        "import sys\n"
        "from decodekit_cli.listing import plugins_report\n"
        "report = plugins_report()\n"
        "assert report['plugins'] and not report['failures'], report['failures']\n"
        "assert 'torch' not in sys.modules, 'listing plugins imported torch'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
