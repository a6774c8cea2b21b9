"""The core's modules import each other without a circle, whatever is imported first.

A static check: every import of every module of `decodekit`, those inside functions included
(they only run later; a circle through one is still a circle), but not those under
`if TYPE_CHECKING:` (never run), forms a graph with no cycle. It catches a circle that a lucky
import order, or an import moved into a function, would hide.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from fresh_interpreter import loads_the_compiler

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


def _imports(tree: ast.Module) -> list[str]:
    """Every module a module imports, at its top or in a function (not under TYPE_CHECKING)."""
    found: list[str] = []
    pending: list[ast.AST] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.If) and _is_type_checking(node):
            pending += node.orelse
        elif isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append(node.module)
            found += [f"{node.module}.{alias.name}" for alias in node.names]  # `from pkg import submodule`
        else:
            pending += list(ast.iter_child_nodes(node))
    return found


def test_imports_inside_functions_are_counted() -> None:
    tree = ast.parse("def f():\n    import decodekit.chain\nif TYPE_CHECKING:\n    import decodekit.loop\n")
    assert _imports(tree) == ["decodekit.chain"]


def import_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        imported = _imports(ast.parse(path.read_text()))
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
    """The check can fail: a planted circle plugins -> loop -> ... -> plugins is found."""
    graph = import_graph()
    assert find_cycle(graph) is None
    planted = {**graph, "decodekit.plugins": graph["decodekit.plugins"] | {"decodekit.loop"}}
    cycle = find_cycle(planted)
    assert cycle is not None and cycle[0] == cycle[-1]
    assert {"decodekit.plugins", "decodekit.loop"} <= set(cycle)


def test_no_module_imports_itself_back() -> None:
    graph = import_graph()
    assert len(graph) > 25  # every module was read
    assert find_cycle(graph) is None


def test_the_registry_and_the_chain_stand_below_the_loop() -> None:
    """Layering: the registry knows nothing of chains or decoding; the chain nothing of decoding."""
    graph = import_graph()

    def reachable(start: str) -> set[str]:
        seen: set[str] = set()
        todo = [start]
        while todo:
            for m in graph[todo.pop()] - seen:
                seen.add(m)
                todo.append(m)
        return seen

    decoding = {"decodekit.loop", "decodekit.engine", "decodekit.strategies", "decodekit.request"}
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


def test_an_eager_decode_through_a_scored_cache_and_a_grammar_loads_no_compiler() -> None:
    """Importing torch's compiler costs ~1 s (a third of a short command): the scored caches and the grammar
    stages make their steps' disabled forms only when something compiles."""
    code = (
        "import decodekit as dk\n"
        "model = dk.load_model('tiny-shakespeare')\n"
        "out = dk.generate(model, ['ROMEO:'], chain=\"regex(pattern='[a-z ]+') | sample\", cache='h2o(budget=16)',\n"
        "                  max_new_tokens=6, seed=0)\n"
        "assert set(out.text[0]) <= set('abcdefghijklmnopqrstuvwxyz '), out.text\n"
    )
    assert not loads_the_compiler(code)
