"""What `pip install .` ships: every package directory is a regular package (setuptools' finder skips the others,
so a missing `__init__.py` silently drops a whole subpackage from the wheel), and nothing named `server`."""

import tomllib
from pathlib import Path

from tao_integrations.opencode_install import PLUGIN_SOURCE

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = [ROOT / "tao_sdk", ROOT / "server" / "tao_coordinator", ROOT / "integrations" / "tao_integrations"]


def test_every_python_directory_is_a_regular_package():
    missing = [
        str(directory.relative_to(ROOT))
        for package in PACKAGES
        for directory in [package, *package.rglob("*")]
        if directory.is_dir()
        and "__pycache__" not in directory.parts
        and any(directory.glob("*.py"))
        and not (directory / "__init__.py").exists()
    ]
    assert missing == []


def test_no_top_level_server_package():
    assert not (ROOT / "server" / "__init__.py").exists()


def test_the_opencode_plugin_ships_inside_the_python_package():
    # `tao install opencode` copies it: a plain (non-editable) install must carry it as package data
    assert PLUGIN_SOURCE.resolve() == ROOT / "integrations" / "opencode" / "src" / "index.ts"
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert PLUGIN_SOURCE.name in package_data["tao_integrations"]
