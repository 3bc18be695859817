"""A private `redis-server` (Debian's) on a free loopback port, for the tests and `tao bench coordinator --ha`.

By default it keeps nothing on disk (`--save '' --appendonly no`); with `directory` and `appendonly=True` it keeps an
append-only file there, so a restarted server (`restart()`, same port and directory) comes back with its data.
`start()` returns once the server answers PING; `stop()` sends SIGTERM and, after `stop_timeout_s`, SIGKILL. The
server's log goes to `redis.log` in `directory` (a temporary directory when none is given) and is quoted when the
server does not start.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

import redis
import redis.exceptions

from ..local_coordinator import free_port


class RedisNotInstalled(RuntimeError):
    """`redis-server` is not on PATH."""


class LocalRedis:
    """One `redis-server` process; `with LocalRedis() as server:` starts it and stops it."""

    def __init__(
        self,
        port: int | None = None,
        *,
        directory: Path | None = None,
        appendonly: bool = False,
        appendfsync: str = "always",
        executable: str = "redis-server",
        start_timeout_s: float = 10.0,
        stop_timeout_s: float = 5.0,
    ) -> None:
        found = shutil.which(executable)
        if found is None:
            raise RedisNotInstalled(
                f"`{executable}` is not installed: `apt-get install redis-server` (Debian's package; .ci/run does it)"
            )
        self.executable = found
        self.port = port or free_port()
        self._pick_port = port is None
        self._temporary: tempfile.TemporaryDirectory[str] | None = None
        if directory is None:
            self._temporary = tempfile.TemporaryDirectory(prefix="tao-redis-")
            directory = Path(self._temporary.name)
        self.directory = directory
        self.appendonly = appendonly
        self.appendfsync = appendfsync
        self.start_timeout_s = start_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def log_path(self) -> Path:
        return self.directory / "redis.log"

    def command(self) -> list[str]:
        command = [self.executable, "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
        command += ["--dir", str(self.directory), "--appendonly", "yes" if self.appendonly else "no"]
        if self.appendonly:
            command += ["--appendfsync", self.appendfsync]
        return command

    def start(self) -> LocalRedis:
        """Start the server and wait until it answers PING (a taken port, when we picked it, is picked again)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        for _ in range(3):
            with self.log_path.open("ab") as log:
                self.process = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT)
            if self._wait_ready():
                return self
            self.stop()
            if not self._pick_port or "Address already in use" not in self._log_tail():
                break
            self.port = free_port()
        raise RuntimeError(f"redis-server on port {self.port} did not start; its log ends:\n{self._log_tail()}")

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after `stop_timeout_s`; a no-op when not running."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def kill(self) -> None:
        """SIGKILL at once (a crash: nothing flushed beyond what `appendfsync` already wrote)."""
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None

    def restart(self) -> None:
        """Stop, then start again on the same port and directory."""
        self.stop()
        self._pick_port = False
        self.start()

    def close(self) -> None:
        self.stop()
        if self._temporary is not None:
            self._temporary.cleanup()

    def __enter__(self) -> LocalRedis:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    def _wait_ready(self) -> bool:
        assert self.process is not None
        client = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=1, socket_connect_timeout=1)
        deadline = time.monotonic() + self.start_timeout_s
        try:
            while self.process.poll() is None and time.monotonic() < deadline:
                try:
                    if client.ping():
                        return True
                except redis.exceptions.ConnectionError:  # also BusyLoadingError: still reading its file
                    time.sleep(0.02)
            return False
        finally:
            client.close()

    def _log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"
