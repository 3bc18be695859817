"""The state directory's files belong to the coordinator's user alone, whatever existed before.

The session-token key signs every session's token (anyone who reads it can act on any session), and the store holds
what the fleet runs. Invariants:

- a file this module creates has mode 0600 from its first byte (`create_private`, `write_private`): the umask can
  only remove bits, and a key is written to a new file that replaces the old one, so no loose mode is inherited;
- SQLite gives a database's `-wal` and `-shm` files the mode of the database file, so a database file created here
  keeps its companions private too;
- `tighten` removes every group and other permission bit from the files that exist, and the caller logs what it
  changed in one line (`log_tightened`), so a loose mode is fixed and said once: the next start finds it fixed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from collections.abc import Iterable
from pathlib import Path

log = logging.getLogger("tao.state")

PRIVATE = 0o600
OWNER_ONLY = 0o700
"""Mode of a state directory this module creates (an existing one is left as the operator made it)."""


def make_directory(directory: Path) -> None:
    directory.mkdir(mode=OWNER_ONLY, parents=True, exist_ok=True)


def tighten(paths: Iterable[Path]) -> list[str]:
    """Remove group and other bits from each existing file; what changed, as `name 0644 → 0600`."""
    changed = []
    for path in paths:
        try:
            mode = stat.S_IMODE(path.stat().st_mode)
        except FileNotFoundError:
            continue
        if mode & 0o077:
            os.chmod(path, mode & PRIVATE)
            changed.append(f"{path.name} {mode:04o} → {mode & PRIVATE:04o}")
    return changed


def log_tightened(directory: Path, changed: list[str]) -> None:
    if changed:
        log.warning(
            "%s: state files were readable by other users; now owner-only: %s. If others could read "
            "session-token.key, delete it to rotate it (sessions then register again)",
            directory,
            ", ".join(changed),
        )


def create_private(path: Path) -> None:
    """Create `path` empty with mode 0600 if it does not exist; an existing file is left as it is."""
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE))


def write_private(path: Path, content: bytes) -> None:
    """Replace `path` with `content` in a new file of mode 0600 (renamed over it, so a reader sees old or new)."""
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    partial.unlink(missing_ok=True)  # a leftover could have any mode: the new file must be created here
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(content)
            file.flush()
            os.fsync(file.fileno())
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
