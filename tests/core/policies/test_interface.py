"""The policy interface is typed end to end: callers call hooks, never look them up by name, and every policy's hooks
have the signatures `core/policies/base.py` declares (a misspelt hook would be a silent no-op otherwise)."""

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

from tao_coordinator import baselines
from tao_coordinator.core import policies
from tao_coordinator.core.policies import POLICIES, make_policy
from tao_coordinator.core.policies.base import Feed, Policy

ROOT = Path(__file__).resolve().parents[3]
SOURCES = ("server", "tao_sdk", "integrations")
LOOKUP_PENDING = {"server/tao_coordinator/web/decisions.py"}
"""Its `getattr(policy, "values")` goes with the read API change to the web layer (the plan carries the values)."""
HOOKS = ("plan", "route", "observe", "wake_times", "admit", "node_target", "cache_kept")


def _names_a_policy(node: ast.expr) -> bool:
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return "policy" in name.lower()


def policy_lookups(path: Path) -> list[int]:
    """Lines where `getattr`/`hasattr` reads an attribute of something named like a policy."""
    return [
        node.lineno
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("getattr", "hasattr")
        and node.args
        and _names_a_policy(node.args[0])
    ]


def test_no_code_looks_a_policy_hook_up_by_name():
    found = []
    for source in SOURCES:
        for path in sorted((ROOT / source).rglob("*.py")):
            where = path.relative_to(ROOT).as_posix()
            if where not in LOOKUP_PENDING:
                found += [f"{where}:{line}" for line in policy_lookups(path)]
    assert found == []


def test_the_lookup_check_sees_a_lookup(tmp_path):
    code = tmp_path / "c.py"
    code.write_text("getattr(policy, 'admit', None)\nhasattr(self.policy, 'x')\ngetattr(event, 'session_id')\n")
    assert policy_lookups(code) == [1, 2]


def test_the_core_reaches_the_baselines_only_through_the_registrys_dotted_paths():
    core = ROOT / "server" / "tao_coordinator" / "core"
    found = []
    for path in sorted(core.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                names = [("." * node.level) + (node.module or "")]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            found += [f"{path.name}:{node.lineno}" for name in names if "baselines" in name]
    assert found == []


def _every_policy_class() -> set[type[Policy]]:
    for package in (policies, baselines):
        for module in pkgutil.iter_modules(package.__path__, f"{package.__name__}."):
            importlib.import_module(module.name)
    found: set[type[Policy]] = set()
    todo = [Policy]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub.__module__.startswith("tao_coordinator.") and sub not in found:
                found.add(sub)
                todo.append(sub)
    return found


def _shape(function: object) -> list[tuple[str, object]]:
    return [(p.name, p.kind) for p in inspect.signature(function).parameters.values()]


def test_every_policy_class_overrides_hooks_with_the_bases_signature():
    classes = _every_policy_class()
    assert len(classes) >= 12
    for cls in classes:
        for hook in HOOKS:
            assert _shape(inspect.getattr_static(cls, hook)) == _shape(inspect.getattr_static(Policy, hook)), (
                f"{cls.__qualname__}.{hook}"
            )


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_every_registered_policy_is_a_policy_reading_typed_feeds(name):
    policy = make_policy(name)
    assert isinstance(policy, Policy)
    assert all(isinstance(feed, Feed) for feed in policy.inputs)
    assert isinstance(policy.plans, bool)
