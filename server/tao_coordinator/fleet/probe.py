"""Probing a demoted node (`core/demotion.py`): does it serve a model call again?

A node's `/health` says its API server runs, not that it serves calls: vLLM answers 200 there while it refuses every
call with a 503 (its queue is full, `--max-num-queued-reqs`), which is why the poller's scrapes cannot restore a
demoted node. The probe is a real call, as small as one can be: `GET /v1/models` for the served model's name, then
`POST /v1/completions` with a one-word prompt and `max_tokens: 1`. The node serves when that call is answered 200
with a choice. A node started with `--api-key` answers both with 401, and the coordinator holds no key for its nodes
(their `/metrics` and `/health` need none): its API server answering is then the only evidence there is, so a 401 or
403 counts as serving — were it still refusing calls, its clients' refusals would demote it again after
`node_demote_after` of them, which beats keeping a node out of the fleet for good.

Invariants: at most one probe per node is in flight (`NodeProber`); every probe ends within `timeout_s` and hands
exactly one `NodeProbed` to `report`, whatever happened (an error becomes `serves=False` with its reason), so a
probe never raises into the event loop and never logs a traceback.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping

import aiohttp

from tao_sdk.calls import describe

from ..core.events import NodeProbed
from .served_models import KEY_REQUIRED, ModelsUnknown, parse_models

log = logging.getLogger("tao.fleet")

PROBE_TIMEOUT_S = 10.0
"""Longest one probe may take, both of its requests: a node that serves answers a one-token call well within it,
even behind a queue of requests."""
PROBE_PROMPT = "ping"


async def probe(http: aiohttp.ClientSession, url: str, timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """None when the node at `url` served a minimal model call; else why not, in a few words."""
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    try:
        async with asyncio.timeout(timeout_s):
            async with http.get(f"{url}/v1/models", timeout=timeout) as reply:
                if reply.status in KEY_REQUIRED:
                    return None
                if reply.status != 200:
                    return f"GET /v1/models answered {reply.status}"
                listed = await reply.read()
            try:
                model = parse_models(listed).base_names[0]
            except ModelsUnknown as error:
                return error.reason
            call = {"model": model, "prompt": PROBE_PROMPT, "max_tokens": 1, "temperature": 0}
            async with http.post(f"{url}/v1/completions", json=call, timeout=timeout) as reply:
                if reply.status != 200:
                    return f"a one-token completion answered {reply.status}"
                answer = await reply.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, ValueError) as error:
        return describe(error)
    if not isinstance(answer, dict) or not answer.get("choices"):
        return "a one-token completion answered without a choice"
    return None


class NodeProber:
    """Runs the probes the core asks for (`ProbeNode`), one at a time per node, each answered to `report`."""

    def __init__(
        self, urls: Mapping[str, str], report: Callable[[NodeProbed], object], timeout_s: float = PROBE_TIMEOUT_S
    ) -> None:
        self.urls, self.report, self.timeout_s = urls, report, timeout_s
        self.running: dict[str, asyncio.Task[None]] = {}
        self._http: aiohttp.ClientSession | None = None

    def start(self, node: str) -> None:
        """Probe `node` unless a probe of it is under way (or the node has no URL: then nothing is sent)."""
        if node in self.running or node not in self.urls:
            return
        task = asyncio.get_running_loop().create_task(self._probe(node), name=f"probe {node}")
        self.running[node] = task
        task.add_done_callback(lambda _: self.running.pop(node, None))

    async def _probe(self, node: str) -> None:
        if self._http is None:
            self._http = aiohttp.ClientSession()
        why = await probe(self._http, self.urls[node], self.timeout_s)
        log.debug("node %s probed: %s", node, "serves" if why is None else why)
        try:
            self.report(NodeProbed(node, serves=why is None, detail=why or ""))
        except Exception as error:  # the node may have left the fleet meanwhile; the next probe asks again
            log.warning("node %s: a probe's answer could not be handed to the core: %s", node, describe(error))

    async def stop(self) -> None:
        tasks = list(self.running.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._http is not None:
            await self._http.close()
            self._http = None
