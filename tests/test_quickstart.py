"""docs/quickstart.md walked as a newcomer walks it: §2's commands, run in order by bash, reach a coordinator that
lists both nodes (an earlier doc queried the coordinator before it listened); §2 then §3 run the example agent
through its tool branch; §1 and §5 say only what holds in a clean clone."""

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

QUICKSTART = Path(__file__).parents[1] / "docs" / "quickstart.md"
PORTS = (8000, 8001, 8700)


def section(number: int) -> str:
    text = QUICKSTART.read_text()
    start = text.index(f"\n## {number}. ")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def bash_blocks(text: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", text, flags=re.DOTALL)


def port_taken(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def ports_free(timeout_s: float = 15.0) -> bool:
    """The quickstart's ports, once free: the servers an earlier section left take a moment to stop."""
    deadline = time.monotonic() + timeout_s
    while any(port_taken(port) for port in PORTS):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def test_section_2_waits_for_the_coordinator_before_querying_it(tmp_path):
    if not ports_free():
        pytest.skip(f"the quickstart's fixed ports {PORTS} are not all free")
    script = tmp_path / "section2.sh"
    script.write_text("\n".join(bash_blocks(section(2))))
    output = tmp_path / "output"
    env = {**os.environ, "HOME": str(tmp_path)}  # the coordinator's default state dir is under ~
    with output.open("w") as sink:
        shell = subprocess.Popen(
            ["bash", str(script)], stdout=sink, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        try:
            shell.wait(timeout=90)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(shell.pid, signal.SIGTERM)  # the servers it left in the background
    lines = output.read_text().splitlines()
    # curl ends its answer without a newline: a background server's shutdown line may follow on the same line
    listing = next((json.JSONDecoder().raw_decode(line)[0] for line in lines if line.startswith('{"nodes"')), None)
    assert listing is not None, "\n".join(lines)
    assert [(node["name"], node["healthy"]) for node in listing["nodes"]] == [("a", True), ("b", True)]


def test_sections_2_and_3_run_in_order_and_the_agent_takes_its_tool_branch(tmp_path):
    if not ports_free():
        pytest.skip(f"the quickstart's fixed ports {PORTS} are not all free")
    script = tmp_path / "sections.sh"
    # `set -e`: a documented command that fails stops the walk, and the output then lacks what follows it
    script.write_text("set -e\n" + "\n".join(bash_blocks(section(2)) + bash_blocks(section(3))))
    output = tmp_path / "output"
    env = {**os.environ, "HOME": str(tmp_path)}
    with output.open("w") as sink:
        shell = subprocess.Popen(
            ["bash", str(script)],
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            cwd=QUICKSTART.parents[1],
        )
        try:
            shell.wait(timeout=120)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(shell.pid, signal.SIGTERM)
    text = output.read_text()
    assert shell.returncode == 0, text
    assert "node 8000: 200" in text and "node 8001: 200" in text, text
    assert "Done: the command ran." in text, text
    assert '{"sessions": [' in text and "tao_tool_starts_total" in text, text  # §3's two looks at the coordinator


def test_section_1_installs_only_the_server_extra():
    commands = [line.split("#")[0].strip() for block in bash_blocks(section(1)) for line in block.splitlines()]
    installs = [command for command in commands if command.startswith("pip install")]
    assert installs == ["pip install -e '.[server]'"]


def test_section_5_names_no_trace_path_outside_the_repository_and_says_where_traces_come_from():
    text = section(5)
    assert "../" not in text
    assert "TAO_TRACES" in text and "synthetic:" in text and "minutes" in text
