"""`tao --version` and the `tao bench` group answer as a newcomer expects."""

import importlib.metadata
import subprocess
import sys

import pytest

BENCH_SUBCOMMANDS = ("planner", "coordinator", "faults", "sdk", "fake-vllm", "estimator", "memory", "compare")


def tao(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tao_sdk.cli", *args], capture_output=True, text=True, timeout=60)


def bench_lines(text: str) -> dict[str, str]:
    rows = [line.split(maxsplit=3) for line in text.splitlines() if line.startswith("  tao bench ")]
    return {row[2]: row[3] for row in rows}


def test_version_prints_the_installed_version():
    run = tao("--version")
    assert (run.returncode, run.stderr) == (0, "")
    assert run.stdout.strip() == f"tao {importlib.metadata.version('tao-sdk')}"


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_bench_help_lists_every_bench_subcommand_once(flag):
    run = tao("bench", flag)
    assert (run.returncode, run.stderr) == (0, "")
    lines = bench_lines(run.stdout)
    assert sorted(lines) == sorted(BENCH_SUBCOMMANDS)
    assert all(lines.values())
    assert "tao demo" not in run.stdout


def test_bench_alone_is_a_usage_error_listing_the_subcommands():
    run = tao("bench")
    assert (run.returncode, run.stdout) == (2, "")
    assert run.stderr.startswith("tao bench: a subcommand is required")
    assert sorted(bench_lines(run.stderr)) == sorted(BENCH_SUBCOMMANDS)
    assert "tao demo" not in run.stderr


def test_an_unknown_bench_subcommand_names_it_and_lists_the_real_ones():
    run = tao("bench", "plannr")
    assert run.returncode == 2
    assert run.stderr.startswith("tao: unknown command 'bench plannr'")
    assert sorted(bench_lines(run.stderr)) == sorted(BENCH_SUBCOMMANDS)
    assert "tao demo" not in run.stderr
