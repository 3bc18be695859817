"""A coordinator in a process of its own on a free loopback port, for the demo and the benchmarks.

It runs without tokens (loopback only) and with a throw-away state directory; the context manager waits until at
least one node is healthy, yields the base URL, and stops the process on the way out, whatever happened inside.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
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


@contextmanager
def local_coordinator(nodes: Sequence[str], policy: str | None = None) -> Iterator[str]:
    """`nodes` are `NAME=URL[,CAPACITY]` specs, as `tao coordinator --node` takes them."""
    port = free_port()
    with tempfile.TemporaryDirectory() as state:
        command = [sys.executable, "-m", "tao_sdk.cli", "coordinator", "--insecure-no-auth", "--port", str(port)]
        command += ["--state-dir", state, "--log-format", "json"]
        command += ["--policy", policy] if policy else []
        for spec in nodes:
            command += ["--node", spec]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        server = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            url = f"http://127.0.0.1:{port}"
            wait_ready(url, server)
            yield url
        finally:
            server.terminate()
            server.wait(10)
