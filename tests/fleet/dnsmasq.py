"""A private `dnsmasq` (Debian's `dnsmasq-base`) on a free loopback port, serving the records a test writes.

It answers only from its hosts file (`--no-resolv --no-hosts`, no upstream server), for names under `.test`
(`--local=/test/`: an unknown name there is NXDOMAIN; a name elsewhere is REFUSED), and listens on 127.0.0.1 only,
on a port above 1024 — never port 53, never the system's resolv.conf (`--conf-file=/dev/null`: Debian's
/etc/dnsmasq.conf is not read). `--no-daemon` keeps it in the foreground and under the test's own user (it changes
user only when it daemonizes). A test changes the records with `write()` then `reload()` (SIGHUP: dnsmasq re-reads
its hosts file).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import dns.exception
import dns.message
import dns.query
import pytest

EXECUTABLE = shutil.which("dnsmasq") or shutil.which("dnsmasq", path="/usr/sbin:/sbin")
"""Found on PATH, or where Debian puts it (/usr/sbin is not on a user's PATH)."""


def free_udp_and_tcp_port() -> int:
    """A loopback port free for both UDP and TCP right now (dnsmasq listens on both)."""
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
            udp.bind(("127.0.0.1", 0))
            port = int(udp.getsockname()[1])
            with socket.socket() as tcp:
                try:
                    tcp.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
    raise RuntimeError("no loopback port free for both UDP and TCP")


class LocalDnsmasq:
    def __init__(self, directory: Path, records: Mapping[str, Sequence[str]], *options: str) -> None:
        if EXECUTABLE is None:
            if os.environ.get("TAO_REQUIRE_HARNESSES"):
                pytest.fail("dnsmasq is not installed, and TAO_REQUIRE_HARNESSES is set", pytrace=False)
            pytest.skip("dnsmasq is not installed: `apt-get install dnsmasq-base` (.ci/run does it)")
        self.directory = directory
        self.hosts = directory / "hosts"
        self.log_path = directory / "dnsmasq.log"
        self.options = options
        self.port = free_udp_and_tcp_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.write(records)

    @property
    def address(self) -> tuple[str, int]:
        return "127.0.0.1", self.port

    def write(self, records: Mapping[str, Sequence[str]]) -> None:
        """Replace the hosts file: name → its addresses; served after the next start or `reload()`."""
        lines = [f"{address} {name}\n" for name, addresses in records.items() for address in addresses]
        self.hosts.write_text("".join(lines))

    def start(self) -> None:
        assert EXECUTABLE is not None
        for _ in range(3):
            command = [
                EXECUTABLE,
                "--no-daemon",
                "--conf-file=/dev/null",
                "--no-resolv",
                "--no-hosts",
                "--local=/test/",
                f"--port={self.port}",
                "--listen-address=127.0.0.1",
                "--bind-interfaces",
                f"--addn-hosts={self.hosts}",
                "--log-facility=-",
                "--log-queries",
                *self.options,
            ]
            with self.log_path.open("ab") as log:
                self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
            if self._wait_ready():
                return
            self.stop()
            if "Address already in use" not in self.log():
                break
            self.port = free_udp_and_tcp_port()
        raise RuntimeError(f"dnsmasq did not start; its log:\n{self.log()}")

    def reload(self, timeout_s: float = 10.0) -> None:
        """SIGHUP: dnsmasq re-reads its hosts file; returns once its log says it has (the signal is handled
        asynchronously, and a lookup sent before that would still see the old records)."""
        assert self.process is not None
        done = f"read {self.hosts}"
        before = self.log().count(done)
        self.process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + timeout_s
        while self.log().count(done) <= before:
            if time.monotonic() > deadline:
                raise RuntimeError(f"dnsmasq did not re-read {self.hosts}; its log:\n{self.log()}")
            time.sleep(0.01)

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(5)
            self.process = None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def queries(self, name: str, kind: str = "A") -> int:
        """How many `kind` queries of `name` dnsmasq received so far."""
        return self.log().count(f"query[{kind}] {name} from")

    def _wait_ready(self, timeout_s: float = 10.0) -> bool:
        assert self.process is not None
        deadline = time.monotonic() + timeout_s
        while self.process.poll() is None and time.monotonic() < deadline:
            try:
                dns.query.udp(dns.message.make_query("ready.test", "A"), "127.0.0.1", port=self.port, timeout=0.2)
                return True
            except (dns.exception.Timeout, OSError):
                time.sleep(0.02)
        return False
