"""`tao --help`, `tao --version` and `tao COMMAND --help` load no more than the parser needs: no compiled planner
kernels, no numeric stack, no HTTP server (on a fresh install numba compiling the kernels made `--help` take 45 s).
Each case runs in a fresh interpreter and lists the heavy modules left in `sys.modules`. And every option's help
shows its default, once, whether written from a configuration field or added by `DefaultsShown`."""

import argparse
import importlib
import json
import subprocess
import sys

import pytest

from tao_sdk.cli import COMMANDS, DefaultsShown

HEAVY = (
    "numba",
    "numpy",
    "scipy",
    "aiohttp",
    "tao_coordinator.core.solver",
    "tao_coordinator.core.planner",
    "tao_coordinator.core.coordinator",
)

PROBE = """
import contextlib, io, json, sys
from tao_sdk.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    try:
        main(sys.argv[1:])
    except SystemExit:
        pass
print(json.dumps(sorted(name for name in sys.modules if name.split('.')[0] in ('numba', 'numpy', 'scipy', 'aiohttp')
    or name.startswith('tao_coordinator.core.'))))
"""


def loaded_after(*args: str) -> set[str]:
    run = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    modules = set(json.loads(run.stdout))
    return {name for name in modules if any(name == heavy or name.startswith(heavy + ".") for heavy in HEAVY)}


@pytest.mark.parametrize("args", [["--help"], ["--version"], ["bench", "--help"]])
def test_the_command_list_and_the_version_load_nothing_heavy(args):
    assert loaded_after(*args) == set()


@pytest.mark.parametrize(
    "words",
    COMMANDS,
    ids=" ".join,
)
def test_a_commands_help_loads_nothing_heavy(words):
    assert loaded_after(*words, "--help") == set()


def shown(default: object) -> str | None:
    """How a default reads in help; None when there is nothing to show."""
    if default is None or default is False or default is argparse.SUPPRESS or default in ([], ""):
        return None
    if default is True:
        return "on"
    return f"{default:g}" if isinstance(default, float) else str(default)


@pytest.mark.parametrize("words", list(COMMANDS), ids=" ".join)
def test_every_option_shows_its_default_once(words):
    parser = argparse.ArgumentParser(formatter_class=DefaultsShown)
    importlib.import_module(COMMANDS[words][0]).add_arguments(parser)
    formatter = DefaultsShown("tao")
    for action in parser._actions:
        if not action.help or not action.option_strings:
            continue
        text = formatter._expand_help(action)
        assert text.count("(default") <= 1, (action.option_strings, text)
        if (default := shown(action.default)) is not None:
            assert default in text, (action.option_strings, text)
