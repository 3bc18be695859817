"""One name per thing: no public top-level name is defined in two modules of a package for two things.

A top-level `class`, `def` or assignment defines a name; an import does not (a name defined once and imported
elsewhere is one thing). Private names (`_x`) are the module's own. Each of tao_sdk, tao_coordinator and
tao_integrations is checked on its own, and the SDK's classes against the coordinator's, since both are read side
by side. `ALLOWED` lists the names that are one interface implemented by several modules, with the reason.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SDK = REPO / "tao_sdk"
COORDINATOR = REPO / "server" / "tao_coordinator"
INTEGRATIONS = REPO / "integrations" / "tao_integrations"

ALLOWED = {
    # the command-module protocol: every `tao` command module has these three (tao_sdk/cli.py dispatches on them)
    "run",
    "add_arguments",
    "main",
    # the module's logger, `logging.getLogger(...)`: one idea, one per module by design
    "log",
    # tao_integrations: each harness module names its harness, and each installer module turns the harness's
    # settings into those with the hook (`installed`) or without it (`uninstalled`)
    "HARNESS",
    "installed",
    "uninstalled",
}


def top_level_names(path: Path, classes_only: bool = False) -> set[str]:
    names: set[str] = set()
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, ast.ClassDef):
            names.add(node.name)
        elif classes_only:
            continue
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(target.id for target in node.targets if isinstance(target, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {name for name in names if not name.startswith("_")}


def definitions(roots: Iterable[Path], classes_only: bool = False) -> dict[str, list[str]]:
    """Public name → the modules (paths from the package's parent directory) that define it."""
    found: dict[str, list[str]] = defaultdict(list)
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            for name in top_level_names(path, classes_only):
                found[name].append(str(path.relative_to(root.parent)))
    return found


def collisions(found: dict[str, list[str]]) -> dict[str, list[str]]:
    return {name: modules for name, modules in sorted(found.items()) if len(modules) > 1 and name not in ALLOWED}


def test_each_package_defines_each_name_once():
    for package in (SDK, COORDINATOR, INTEGRATIONS):
        found = collisions(definitions([package]))
        assert found == {}, package.name


def test_the_sdk_and_the_coordinator_name_their_classes_apart():
    sdk, coordinator = definitions([SDK], classes_only=True), definitions([COORDINATOR], classes_only=True)
    shared = {name: sdk[name] + coordinator[name] for name in sorted(sdk.keys() & coordinator.keys())}
    assert shared == {}


def test_the_check_catches_a_name_defined_twice(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "a.py").write_text("class Policy:\n    pass\n\n\ndef run():\n    pass\n\n\n_private = 1\n")
    (package / "b.py").write_text("from .a import Policy\n\nPolicy2 = Policy\n_private = 2\n")
    (package / "c.py").write_text("Policy: type = int\n\n\ndef run():\n    pass\n")
    found = {name: [Path(m).name for m in modules] for name, modules in definitions([package]).items()}
    assert found["Policy"] == ["a.py", "c.py"]
    assert {name: [Path(m).name for m in modules] for name, modules in collisions(definitions([package])).items()} == {
        "Policy": ["a.py", "c.py"]
    }
