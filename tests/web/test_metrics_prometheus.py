"""`/metrics` as the real Prometheus reads it: a live scrape through `promtool check metrics`, and a Prometheus server
scraping a coordinator through a demo-sized workload, against which every query of the Grafana dashboard
(integrations/grafana/tao-dashboard.json) must return data.

The coordinator is a real `tao coordinator` process beside two fake vLLM nodes, driven through the SDK by `tao demo`'s
agents, then by a scene the demo's short tools never make: two large sessions in long tools, one on each node, and a
third as large that wants the LLM, so that the planner interrupts one (cache credit halves every 50 ms) and sessions
wait. Prometheus is Debian's `prometheus` package (it brings `promtool`): without it the tests skip, naming the
package, unless everything must be installed (`$CI`, or `$TAO_REQUIRE_HARNESSES` as .ci/run sets), where they fail.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest

import tao_sdk
from tao_coordinator.demo.agents import AgentRecord, run_agent, words
from tao_coordinator.demo.run import demo_workload
from tao_coordinator.fakevllm import FakeNodeConfig, ThreadedFleet
from tao_coordinator.fakevllm.config import DEFAULT_MODEL as MODEL
from tao_coordinator.local_coordinator import free_port, wait_ready
from tao_coordinator.sim.workloads import SessionScript

DASHBOARD = Path(__file__).parents[2] / "integrations" / "grafana" / "tao-dashboard.json"
SESSIONS = 8
TIME_SCALE = 16.0
CAPACITY = 200_000
"""Per node: the demo's largest session (about 192k tokens) fits; two of the scene's do not."""
SCENE_PROMPT = 195_000


def required(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        message = f"`{name}` is not installed (Debian's `prometheus` package; .ci/run installs it)"
        if os.environ.get("CI") or os.environ.get("TAO_REQUIRE_HARNESSES"):
            pytest.fail(f"{message}, and CI or TAO_REQUIRE_HARNESSES is set", pytrace=False)
        pytest.skip(message)
    return found


@dataclass
class Scraped:
    coordinator: str
    prometheus: str
    records: list[AgentRecord]
    exposition: str
    """The coordinator's `/metrics` once the workload is done."""

    def query(self, expr: str) -> list[dict[str, Any]]:
        answer = httpx2.get(self.prometheus + "/api/v1/query", params={"query": expr}, timeout=10).json()
        assert answer["status"] == "success", (expr, answer)
        return answer["data"]["result"]

    def scrapes(self) -> int:
        result = self.query('count_over_time(up{job="tao"}[10m])')
        return int(float(result[0]["value"][1])) if result else 0


def start_prometheus(directory: Path, target: str) -> tuple[subprocess.Popen[bytes], str]:
    config = directory / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        f"scrape_configs:\n  - job_name: tao\n    static_configs:\n      - targets: ['{target}']\n"
    )
    port = free_port()
    command = [
        required("prometheus"),
        f"--config.file={config}",
        f"--storage.tsdb.path={directory / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    with (directory / "prometheus.log").open("wb") as log:
        server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while True:
        try:
            if httpx2.get(url + "/-/ready", timeout=1).status_code == 200:
                return server, url
        except httpx2.TransportError:
            pass
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            raise AssertionError("prometheus did not start:\n" + (directory / "prometheus.log").read_text())
        time.sleep(0.1)


def start_coordinator(directory: Path, node_urls: list[str]) -> tuple[subprocess.Popen[bytes], str]:
    config = directory / "fleet.toml"
    nodes = "".join(
        f'[[nodes]]\nname = "node-{k}"\nurl = "{url}"\ncapacity_tokens = {CAPACITY}\n\n'
        for k, url in enumerate(node_urls)
    )
    config.write_text(f"[core]\ncredit_half_life_s = 0.05\n\n{nodes}")
    port = free_port()
    command = [sys.executable, "-m", "tao_sdk.cli", "coordinator", "--config", str(config), "--port", str(port)]
    command += ["--state-dir", str(directory / "state"), "--insecure-no-auth", "--policy", "tao"]
    with (directory / "coordinator.log").open("wb") as log:
        server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, server)
    except RuntimeError:
        server.kill()
        raise
    return server, url


def open_session(coordinator: str, session_id: str, shared_prefix_tokens: int = 0) -> tao_sdk.Session:
    context = tao_sdk.AgentContext(harness="demo", shared_prefix_tokens=shared_prefix_tokens)
    return tao_sdk.session(coordinator, context=context, session_id=session_id, max_wait_s=60)


async def run_demo_agents(coordinator: str) -> list[AgentRecord]:
    workload = demo_workload(SESSIONS, seed=0)
    records = [AgentRecord(time.monotonic()) for _ in workload.scripts]

    def opened(script: SessionScript) -> tao_sdk.Session:
        return open_session(coordinator, script.id, script.meta.shared_prefix_tokens)

    runs = (run_agent(s, opened, TIME_SCALE, r, lambda: None) for s, r in zip(workload.scripts, records, strict=True))
    await asyncio.gather(*runs)
    return records


async def run_scene(coordinator: str) -> None:
    """Two large sessions call the LLM and go into long tools, one per node; a third as large then wants the LLM."""
    in_tools = [asyncio.Event(), asyncio.Event()]

    async def agent(name: str, in_tool: asyncio.Event | None) -> None:
        async with open_session(coordinator, name) as session:
            client = session.async_openai(max_retries=0)
            prompt = [{"role": "user", "content": words(random.Random(name), SCENE_PROMPT)}]
            await client.chat.completions.create(model=MODEL, messages=prompt, max_tokens=4)
            if in_tool is None:
                return
            async with session.tool("bash", timeout=600, sleep=300):
                in_tool.set()
                await asyncio.sleep(2.0)
            await client.chat.completions.create(model=MODEL, messages=prompt, max_tokens=4)

    holders = [asyncio.create_task(agent(f"scene-{k}", in_tools[k])) for k in range(2)]
    await asyncio.wait_for(asyncio.gather(*(e.wait() for e in in_tools)), 30)
    await agent("scene-waiting", None)
    await asyncio.gather(*holders)


@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scraped]:
    required("prometheus")
    directory = tmp_path_factory.mktemp("prometheus")
    with ThreadedFleet(2, FakeNodeConfig(profile="h100-tp2", time_scale=TIME_SCALE), kv_events=False) as fleet:
        coordinator, url = start_coordinator(directory, fleet.urls)
        try:
            prometheus, prometheus_url = start_prometheus(directory, url.removeprefix("http://"))
            try:
                running = Scraped(url, prometheus_url, [], "")
                running.records = asyncio.run(run_demo_agents(url))
                asyncio.run(run_scene(url))
                running.exposition = httpx2.get(url + "/metrics").text
                # two scrapes after the workload: every counter it moved has two samples that differ
                done = running.scrapes()
                deadline = time.monotonic() + 15
                while running.scrapes() < done + 2:
                    assert time.monotonic() < deadline, "prometheus stopped scraping the coordinator"
                    time.sleep(0.25)
                yield running
            finally:
                prometheus.terminate()
                prometheus.wait(10)
        finally:
            coordinator.terminate()
            coordinator.wait(10)


def test_the_workload_ran_and_was_scraped(scraped: Scraped) -> None:
    assert [r.error for r in scraped.records] == [None] * SESSIONS
    assert scraped.query('up{job="tao"}')[0]["value"][1] == "1"


def test_a_live_scrape_passes_promtool(scraped: Scraped) -> None:
    assert "tao_interruptions_total{" in scraped.exposition  # the labelled series are in it, not only the empty ones
    checked = subprocess.run(
        [required("promtool"), "check", "metrics"], input=scraped.exposition.encode(), capture_output=True, timeout=30
    )
    problems = (checked.stdout + checked.stderr).decode()
    assert checked.returncode == 0 and not problems.strip(), problems


def dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, PromQL) for every target of every panel, with the dashboard's variables set as Grafana sets
    them for "All" over the last minute."""
    dashboard = json.loads(DASHBOARD.read_text())
    values = {f"${v['name']}": v["allValue"] for v in dashboard["templating"]["list"]}
    values["$__rate_interval"] = "1m"
    pattern = re.compile("|".join(re.escape(name) for name in sorted(values, key=len, reverse=True)))
    panels = [p for top in dashboard["panels"] for p in (top, *top.get("panels", ()))]
    return [
        (panel["title"], pattern.sub(lambda m: values[m[0]], target["expr"]))
        for panel in panels
        for target in panel.get("targets", ())
    ]


def test_the_dashboard_is_an_importable_grafana_dashboard() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert [i["name"] for i in dashboard["__inputs"]] == ["DS_PROMETHEUS"]
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert all(p["datasource"]["uid"] == "${DS_PROMETHEUS}" and p["targets"] for p in panels)
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])
    assert len(dashboard_queries()) >= len(panels)


def test_every_dashboard_query_returns_data(scraped: Scraped) -> None:
    empty = [(title, expr) for title, expr in dashboard_queries() if not scraped.query(expr)]
    assert not empty, "queries with no data:\n" + "\n".join(f"{title}: {expr}" for title, expr in empty)
    for variable in json.loads(DASHBOARD.read_text())["templating"]["list"]:
        metric, label = re.fullmatch(r"label_values\((\w+), *(\w+)\)", variable["definition"]).groups()  # type: ignore[union-attr]
        values = httpx2.get(f"{scraped.prometheus}/api/v1/label/{label}/values", params={"match[]": metric}).json()
        assert values["data"], variable["name"]
