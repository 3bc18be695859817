"""The pure core imports no I/O, no clock and nothing from the drivers (docs/design.md#one-core-two-drivers)."""

import ast
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "server" / "tao_coordinator" / "core"
FORBIDDEN_MODULES = {"asyncio", "aiohttp", "httpx", "httpx2", "zmq", "time", "datetime", "socket", "threading"}
FORBIDDEN_PACKAGES = ("tao_coordinator.web", "tao_coordinator.fleet", "tao_coordinator.sim", "tao_coordinator.fakevllm")
FORBIDDEN_RELATIVE = {"web", "fleet", "sim", "fakevllm"}


def _imports(path: Path, root: Path = CORE) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                # climbing out of core/ (`from ... import`) lands in tao_coordinator; check what it reaches for
                depth = len(path.relative_to(root).parts) - 1
                if node.level > depth + 1:
                    module = "tao_coordinator." + module if module else "tao_coordinator"
                    found += [(node.lineno, f"{module}.{alias.name}") for alias in node.names]
                    continue
            found.append((node.lineno, module))
    return found


def test_core_has_python_files():
    assert len(list(CORE.rglob("*.py"))) > 10


def test_core_imports_no_io_clock_or_drivers():
    offenders = []
    for path in sorted(CORE.rglob("*.py")):
        for line, module in _imports(path):
            top = module.split(".")[0]
            bad = top in FORBIDDEN_MODULES or module.startswith(FORBIDDEN_PACKAGES)
            bad = bad or (module.startswith("tao_coordinator.") and module.split(".")[1] in FORBIDDEN_RELATIVE)
            if bad:
                offenders.append(f"{path.relative_to(CORE)}:{line} imports {module}")
    assert offenders == []


def test_the_check_itself_catches_a_forbidden_import(tmp_path):
    fake_core = tmp_path / "core"
    (fake_core / "sub").mkdir(parents=True)
    (fake_core / "sub" / "bad.py").write_text("import time\nfrom ...sim import engine\nfrom ..model import Session\n")
    modules = [module for _, module in _imports(fake_core / "sub" / "bad.py", fake_core)]
    assert "time" in modules
    assert "tao_coordinator.sim.engine" in modules
    assert "model" in modules
