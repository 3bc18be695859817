"""A coordinator in a process of its own on a free loopback port, for the demo and the benchmarks.

It runs without tokens (loopback only) unless given one, with a throw-away state directory unless given one; the
context manager waits until at least one node is healthy, yields the base URL (`local_coordinator`) or the process
(`coordinator_process`, which the fault runs and tests pause, resume and kill), and stops the process on the way
out, whatever happened inside.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_ready(url: str, process: subprocess.Popen[Any], timeout: float = 180.0) -> None:
    """Until the coordinator `process` serves `url` with a healthy node. The first start after an install compiles
    the planner's kernels (tens of seconds on a slow machine; later starts load them from Numba's cache), so the
    wait is long, and it ends at once if the process exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the coordinator for {url} exited with status {process.returncode} before it was ready")
        try:
            if httpx2.get(url + "/healthz").json()["healthy_nodes"] > 0:
                return
        except (httpx2.HTTPError, ValueError, KeyError):
            pass
        time.sleep(0.1)
    raise RuntimeError(f"the coordinator at {url} did not become ready within {timeout:g} s")


def tracebacks_in(log: Path) -> int:
    """Tracebacks in the log file `log` (none when it does not exist)."""
    text = log.read_text(errors="replace") if log.exists() else ""
    return text.count("Traceback (most recent call last)")


@dataclass
class CoordinatorProcess:
    """A running `tao coordinator` process: its URL, and the signals the fault runs send it."""

    url: str
    process: subprocess.Popen[Any]
    log_path: Path | None = None
    """Where its standard error (the log, one JSON object a line) goes, when asked for."""

    def log_lines(self) -> list[str]:
        return self.log_path.read_text(errors="replace").splitlines() if self.log_path else []

    def tracebacks(self) -> int:
        """Tracebacks in its log so far: a fault the service handles logs one line, never one of these."""
        return tracebacks_in(self.log_path) if self.log_path else 0

    def pause(self) -> None:
        """SIGSTOP: the process keeps its sockets (connections still complete in the backlog) and answers nothing."""
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.process.send_signal(signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL: no shutdown, no flush."""
        self.process.kill()
        self.process.wait(10)


@contextmanager
def coordinator_process(
    nodes: Sequence[str],
    state_dir: Path | None = None,
    *,
    token: str | None = None,
    policy: str | None = None,
    log_path: Path | None = None,
    extra_args: Sequence[str] = (),
) -> Iterator[CoordinatorProcess]:
    """A coordinator process over `nodes` (`NAME=URL[,CAPACITY]`, as `--node` takes them), with `token` or, without
    one, no auth (loopback); `state_dir` defaults to a throw-away directory; its log goes to `log_path` if given,
    else nowhere; `extra_args` are more `tao coordinator` flags. Stopped on the way out, even if paused."""
    with tempfile.TemporaryDirectory() as scratch:
        state = state_dir or Path(scratch)
        port = free_port()
        command = [sys.executable, "-m", "tao_sdk.cli", "coordinator", "--port", str(port), "--state-dir", str(state)]
        command += ["--token", token] if token else ["--insecure-no-auth"]
        command += ["--log-format", "json"] + (["--policy", policy] if policy else [])
        for spec in nodes:
            command += ["--node", spec]
        command += list(extra_args)
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        with open(log_path, "ab") if log_path else contextlib.nullcontext(subprocess.DEVNULL) as log:
            server = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=log)  # the child holds it
        running = CoordinatorProcess(f"http://127.0.0.1:{port}", server, log_path)
        try:
            wait_ready(running.url, server)
            yield running
        finally:
            if server.poll() is None:
                server.send_signal(signal.SIGCONT)
                server.terminate()
                server.wait(10)


@contextmanager
def local_coordinator(nodes: Sequence[str], policy: str | None = None) -> Iterator[str]:
    """`nodes` are `NAME=URL[,CAPACITY]` specs, as `tao coordinator --node` takes them."""
    with coordinator_process(nodes, policy=policy) as running:
        yield running.url
