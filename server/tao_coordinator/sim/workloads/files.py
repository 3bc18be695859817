"""Where the trace files are, and reading them as JSON records (one per line, gzip or not, or one JSON document)."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tao_sdk import environment

TRACES_ENV = "TAO_TRACES"
"""The variable `traces_dir` reads (through `tao_sdk.environment`)."""
AGENTX_DEV = Path("agentx_cc/dev.jsonl.gz")
AGENTX_EXAMPLE = Path("agentx_cc/examples/trace_0004.json")
MINI_SWE_DEV = Path("mini_swe_agent/steps_dev.jsonl.gz")


def traces_dir() -> Path:
    """`$TAO_TRACES`, else `../shared/traces` next to the repository root (the layout of the development machines)."""
    configured = environment.traces()
    if configured:
        return Path(configured)
    repo_root = Path(__file__).resolve().parents[4]
    return (repo_root / ".." / "shared" / "traces").resolve()


def read_records(path: Path | str) -> Iterator[dict[str, Any]]:
    """Yield the JSON objects of `path`: JSON Lines (`.jsonl`, `.jsonl.gz`) or one object / a list (`.json`)."""
    path = Path(path)
    if path.suffix == ".json":
        document = json.loads(path.read_text())
        yield from document if isinstance(document, list) else [document]
        return
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as lines:
        for line in lines:
            if line.strip():
                yield json.loads(line)
