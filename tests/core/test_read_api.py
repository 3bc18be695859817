"""Outside `core/`, the core is read through the Coordinator's read API only, and `web/` has no import cycle.

Five checks: the Coordinator's public surface (class and instance) is exactly `READ_API` (its docstring in
`core/coordinator.py` describes each name), so its internals cannot be reached by a public name; no module outside
`core/` reads a private `_name` of another object (only `self.`, `cls.` and `super().` may), so they cannot be
reached by a private one either; no test outside `tests/core/` reads a private attribute or method of a class of
`core/` (they assert through the read API and what the core returns, as the product does); the observers of
`web/` (metrics, timelines, decision log, replica) read none of the core's settings, state or planner, only what it
returned and its read figures; and no module of `web/` imports, even for type checking only, a module that imports
it back.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tao_coordinator.core.coordinator import Coordinator
from tao_coordinator.core.policies import make_policy

ROOT = Path(__file__).resolve().parents[2]
SERVER = ROOT / "server" / "tao_coordinator"
TESTS = ROOT / "tests"
PRODUCT = (SERVER, ROOT / "tao_sdk", ROOT / "integrations")

READ_API = {
    # driving
    "on_event",
    "next_wakeup",
    "take_touched",
    "restore",
    # reading
    "settings",
    "readiness_rule",
    "sessions",
    "session",
    "nodes",
    "holders",
    "waiting",
    "queue_position",
    "used_cells",
    "used_tokens",
    "cannot_avoid",
    "plan_stats",
    "plan_in_flight",
    "plan_pending",
    "horizon_s",
    "mean_horizon_s",
    "demotion",
    "membership",
    "credit_half_life",
    "half_life_fit",
    "retention_observations",
}


def _public(names: object) -> set[str]:
    return {name for name in names if not name.startswith("_")}  # type: ignore[attr-defined]


def test_the_coordinators_public_surface_is_its_read_api():
    coordinator = Coordinator(make_policy("tao"))
    assert _public(vars(Coordinator)) | _public(vars(coordinator)) == READ_API


def private_reads(path: Path, root: Path = ROOT) -> list[str]:
    """Every `x._name` in `path` whose `x` is not `self`, `cls` or `super()`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Attribute) or not node.attr.startswith("_") or node.attr.startswith("__"):
            continue
        owner = node.value
        if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
            continue
        if isinstance(owner, ast.Call) and isinstance(owner.func, ast.Name) and owner.func.id == "super":
            continue
        found.append(f"{path.relative_to(root)}:{node.lineno} reads {ast.unparse(node)}")
    return found


def test_no_module_outside_the_core_reads_a_private_name_of_another_object():
    offenders = []
    for root in PRODUCT:
        for path in sorted(root.rglob("*.py")):
            if SERVER / "core" not in path.parents:
                offenders += private_reads(path)
    assert offenders == []


def test_the_scan_catches_a_private_read(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f(core):\n    return core._state.sessions, self._x, super()._y()\n")
    (bad,) = [line.split(" reads ")[1] for line in private_reads(module, tmp_path)]
    assert bad == "core._state"


OBSERVERS = ("metrics", "fleet_metrics", "demotions", "timeline", "decisions", "replica")
"""The modules of `web/` that tell what happened: they learn it from what the service fed the core, what the core
returned (actions, plan records) and its read figures; the core's `settings`, state and planner are not theirs to
read."""
INTERNALS = ("settings", "state", "planner")


def internal_reads(path: Path) -> list[str]:
    """Every `x.settings`, `x.state` or `x.planner` in `path` whose `x` is not `self`."""
    return [
        f"{path.name}:{node.lineno} reads {ast.unparse(node)}"
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.Attribute) and node.attr in INTERNALS and not _on_self(node)
    ]


def test_the_observers_read_no_settings_state_or_planner_of_the_core():
    offenders = []
    for observer in OBSERVERS:
        offenders += internal_reads(SERVER / "web" / f"{observer}.py")
    assert offenders == []


def private_names_of_classes(root: Path) -> set[str]:
    """The private attributes (`self._name = ...`) and methods (`def _name`) the classes of the modules under `root`
    define; dunder names are not private."""
    names: set[str] = set()
    for path in root.rglob("*.py"):
        for cls in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(cls, ast.ClassDef):
                continue
            for node in ast.walk(cls):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    names.add(node.name)
                elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and _on_self(node):
                    names.add(node.attr)
    return {name for name in names if name.startswith("_") and not name.startswith("__")}


def _on_self(attribute: ast.Attribute) -> bool:
    return isinstance(attribute.value, ast.Name) and attribute.value.id == "self"


def test_no_test_outside_the_core_tests_reads_a_private_name_of_the_core():
    private = private_names_of_classes(SERVER / "core")
    offenders = []
    for path in sorted(TESTS.rglob("*.py")):
        if TESTS / "core" not in path.parents:
            offenders += [read for read in private_reads(path) if read.rsplit(".", 1)[1] in private]
    assert offenders == []


def test_the_private_names_of_classes_are_their_private_attributes_and_methods(tmp_path):
    (tmp_path / "m.py").write_text(
        "class C:\n    def __init__(self):\n        self._a, self.b = 1, 2\n    def _c(self):\n        return self._a\n"
        "def _d():\n    pass\n"
    )
    assert private_names_of_classes(tmp_path) == {"_a", "_c"}


def web_imports(web: Path) -> dict[str, set[str]]:
    """Each module of `web/` and the modules of `web/` it imports, `TYPE_CHECKING` blocks included."""
    modules = {path.stem for path in web.glob("*.py")}
    graph: dict[str, set[str]] = {}
    for path in web.glob("*.py"):
        imported: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                imported |= {node.module.split(".")[0]} if node.module else {alias.name for alias in node.names}
        graph[path.stem] = imported & modules
    return graph


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of `graph`, or None."""
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> list[str] | None:
        if module in path:
            return [*path[path.index(module) :], module]
        if module in done:
            return None
        for imported in sorted(graph[module]):
            if (found := visit(imported, [*path, module])) is not None:
                return found
        done.add(module)
        return None

    return next((found for module in sorted(graph) if (found := visit(module, [])) is not None), None)


def test_web_has_no_import_cycle():
    assert cycle(web_imports(SERVER / "web")) is None


def test_the_cycle_check_finds_one():
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
