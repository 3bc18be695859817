"""No import cycle between the modules of tao_sdk, tao_coordinator and tao_integrations.

An edge A → B is an import statement at A's module level (also under `if TYPE_CHECKING:` or in a `try:`; not inside
a function) that names B: `import B`, `from B import x`, and `from P import B` when P.B is a module, which names
both P and P.B. So a submodule that imports a sibling through its package (`from . import sibling`) depends on the
package's `__init__`, which imports the submodule back: a cycle. Submodules import their siblings directly.
"""

from __future__ import annotations

import ast
import gc
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = {
    "tao_sdk": REPO / "tao_sdk",
    "tao_coordinator": REPO / "server" / "tao_coordinator",
    "tao_integrations": REPO / "integrations" / "tao_integrations",
}


def _modules(packages: Mapping[str, Path]) -> dict[str, tuple[Path, bool]]:
    """Dotted module name → (file, whether it is a package's `__init__`)."""
    found = {}
    for name, root in packages.items():
        for path in root.rglob("*.py"):
            parts = [name, *path.relative_to(root).with_suffix("").parts]
            is_package = parts[-1] == "__init__"
            found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


def _module_level_imports(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    blocks: list[list[ast.stmt]] = [tree.body]
    while blocks:
        for statement in blocks.pop():
            if isinstance(statement, ast.Import | ast.ImportFrom):
                yield statement
            elif isinstance(statement, ast.If):
                blocks += [statement.body, statement.orelse]
            elif isinstance(statement, ast.Try):
                blocks += [statement.body, statement.orelse, statement.finalbody]
                blocks += [handler.body for handler in statement.handlers]


def _parse(path: Path) -> ast.Module:
    """`ast.parse` with the garbage collector paused. On CPython 3.11 a finalizer that runs Python code while the
    tree is being built — a socket some earlier test left open, reported by pytest's unraisable-exception hook —
    breaks the build with `SystemError: AST constructor recursion depth mismatch` (gh-106905)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return ast.parse(path.read_text(), str(path))
    finally:
        if enabled:
            gc.enable()


def import_graph(packages: Mapping[str, Path]) -> dict[str, set[str]]:
    modules = _modules(packages)
    graph: dict[str, set[str]] = {}
    for name, (path, is_package) in modules.items():
        package = name if is_package else name.rpartition(".")[0]
        named: list[str] = []
        for statement in _module_level_imports(_parse(path)):
            if isinstance(statement, ast.Import):
                named += [alias.name for alias in statement.names]
                continue
            source = statement.module or ""
            if statement.level:
                base = package.split(".")[: len(package.split(".")) - statement.level + 1]
                source = ".".join([*base, source] if source else base)
            named += [source, *(f"{source}.{alias.name}" for alias in statement.names)]
        graph[name] = {module for module in named if module in modules and module != name}
    return graph


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            successor = next(successors, None)
            if successor is not None:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                elif successor in on_stack:
                    low[node] = min(low[node], index[successor])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_packages_are_found():
    graph = import_graph(PACKAGES)
    assert {"tao_sdk", "tao_sdk.sessions", "tao_coordinator.core.model", "tao_integrations"} <= graph.keys()
    assert "tao_coordinator.core.model" in graph["tao_coordinator.core.events"]
    assert "tao_sdk.protocol" in graph["tao_sdk.calls"]
    assert "tao_sdk.sessions" in graph["tao_sdk"]  # an import under `if TYPE_CHECKING:` is an edge


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_no_import_cycle(package):
    """Each package on its own line of the report; the graph is the three together, so a cycle through two of them
    (the coordinator's bench drives the SDK) is found too."""
    found = [cycle for cycle in cycles(import_graph(PACKAGES)) if any(m.split(".")[0] == package for m in cycle)]
    assert found == []


def test_the_check_catches_a_sibling_imported_through_its_package(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("from .a import A\n")
    (package / "a.py").write_text("from . import b\nA = 1\n")
    (package / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .c import C\n")
    (package / "c.py").write_text("from .b import B\n\n\ndef late():\n    from .a import A\n")
    graph = import_graph({"pkg": package})
    assert graph["pkg.a"] == {"pkg", "pkg.b"}
    assert sorted(cycles(graph)) == [["pkg", "pkg.a"], ["pkg.b", "pkg.c"]]
