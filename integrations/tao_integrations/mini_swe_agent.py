"""mini-swe-agent 2.x under TAO: a model class that routes every call through `tao_sdk`, and an environment wrapper
that reports every command as a tool call.

From the `mini` CLI (dotted paths; see `mini_swe_agent.yaml` beside this file):

    mini -c mini.yaml -c tao_integrations/mini_swe_agent.yaml -m hosted_vllm/<served name> -t "…"

From Python:

    model = TaoModel(model_name="hosted_vllm/Qwen/Qwen3-32B", tao={"coordinator": "http://127.0.0.1:8700"})
    env = TaoEnvironment(wrapped_class="local", timeout=60)
    DefaultAgent(model, env, **agent_config).run(task)

`TaoModel` is mini-swe-agent's `LitellmModel` (same config, same litellm call) whose `api_base` is, per call, the
node the coordinator assigned; it reports the call's usage, and names the agent's step with each call (`step_id`:
the model's query count, which is the agent's `n_calls` — one query a step; litellm retries keep the step). Its
settings (`tao:` in the model config) fall back to `$TAO_COORDINATOR`, `$TAO_TOKEN`, `$TAO_NODES`. When the
coordinator is unreachable the call goes to the last node used, a fallback node, or else the `api_base` of the
config (fail open). Use an OpenAI-compatible litellm provider (`hosted_vllm/…` or `openai/…`): the node's URL
replaces `api_base`.

`TaoEnvironment` wraps any environment (`wrapped_class`: `local`, `docker`, … or a dotted path; the other keys are
that environment's config) and reports each `execute` as a tool call named `bash` with hints: the timeout (the
`timeout=` argument, else the environment's `timeout` setting, in seconds) and what the command says (`sleep`,
`timeout`, `&`), and with the program it runs (`cd /testbed && pytest -q` → `pytest`; the command itself is never
sent). Status: `ok` (exit 0, or the submission, whose `Submitted` is re-raised), `timeout`, or `error`.

mini-swe-agent has no session id, so `TaoModel` opens one TAO session per model object (closed when the object is
collected or the process exits) and makes it the thread's current session while it lives; an environment without
a `session=` reports into the current session of the thread that calls `execute` — the agent's, since an agent
queries its model before it runs an action. Without a live `TaoModel` it opens a session of its own.
"""

from __future__ import annotations

import json
import threading
import time
import weakref
from typing import Any

from minisweagent.environments import get_environment_class
from minisweagent.exceptions import Submitted
from minisweagent.models.litellm_model import LitellmModel, LitellmModelConfig
from pydantic import BaseModel

import tao_sdk
from tao_sdk.errors import NoNodeAvailable
from tao_sdk.router import Grant, Step
from tao_sdk.usage import Usage

HARNESS = "mini-swe-agent"
CHARS_PER_TOKEN = 4
_current = threading.local()


class TaoSettings(BaseModel):
    coordinator: str | list[str] | None = None
    """Coordinator URL, or its replicas' URLs (comma-separated, or a list: the session follows their leader); else
    `$TAO_COORDINATOR`."""
    token: str | None = None
    """The coordinator's API token; else `$TAO_TOKEN`."""
    fallback_nodes: list[str] | None = None
    """Node root URLs for fail-open routing; else `$TAO_NODES`."""
    session_id: str | None = None
    """Reuse an id (e.g. the instance id of a benchmark run); by default a fresh one."""
    workflow_id: str = ""
    """The task this run belongs to (e.g. the benchmark instance), shared by the sessions that work on it."""
    labels: dict[str, str] = {}


class TaoModelConfig(LitellmModelConfig):
    tao: TaoSettings = TaoSettings()
    """Where the coordinator is and what to tell it about the session."""


def open_session(settings: TaoSettings, model: str, owner: object) -> tao_sdk.Session:
    """A registered session, closed when `owner` is garbage-collected or at exit."""
    context = tao_sdk.AgentContext(
        harness=HARNESS, model=model[:200], workflow_id=settings.workflow_id, labels=settings.labels
    )
    session = tao_sdk.session(
        settings.coordinator,
        settings.token,
        context,
        session_id=settings.session_id,
        fallback_nodes=settings.fallback_nodes,
    ).__enter__()
    weakref.finalize(owner, session.__exit__, None, None, None)
    return session


def current_session() -> tao_sdk.Session | None:
    """The session of the `TaoModel` this thread used last, while that model is alive."""
    model = getattr(_current, "model", lambda: None)()
    return model.session if isinstance(model, TaoModel) else None


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _usage(response: Any) -> Usage:
    """Token counts of a litellm response (absent or malformed figures become None)."""
    usage = getattr(response, "usage", None)
    prompt = _count(getattr(usage, "prompt_tokens", None))
    cached = _count(getattr(getattr(usage, "prompt_tokens_details", None), "cached_tokens", None))
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=_count(getattr(usage, "completion_tokens", None)),
        cached_tokens=cached if prompt is None or cached is None or cached <= prompt else None,
    )


class TaoModel(LitellmModel):
    """`LitellmModel` whose calls go to the node the TAO coordinator assigns (see the module docstring)."""

    def __init__(self, *, config_class: type = TaoModelConfig, session: tao_sdk.Session | None = None, **kwargs: Any):
        super().__init__(config_class=config_class, **kwargs)
        self.session = session or open_session(self.config.tao, self.config.model_name, self)
        self.steps = 0
        """Queries so far: the agent's step counter."""
        _current.model = weakref.ref(self)

    def query(self, messages: list[dict[str, str]], **kwargs: Any) -> dict[str, Any]:
        self.steps += 1
        answer: dict[str, Any] = super().query(messages, **kwargs)
        return answer

    def _query(self, messages: list[dict[str, str]], **kwargs: Any) -> Any:
        _current.model = weakref.ref(self)
        router = self.session.sync_router()
        tokens = len(json.dumps(messages, default=str)) // CHARS_PER_TOKEN
        try:
            grant: Grant | None = router.acquire(tokens, Step(str(self.steps)) if self.steps else None)
        except NoNodeAvailable:
            grant = None  # detached with nowhere known to go: the configured api_base
        if grant is not None:
            headers = {**(self.config.model_kwargs.get("extra_headers") or {}), "X-Session-ID": self.session.id}
            kwargs = {**kwargs, "api_base": grant.node_url.rstrip("/") + "/v1", "extra_headers": headers}
        started, usage = time.monotonic(), Usage()
        try:
            response = super()._query(messages, **kwargs)
            usage = _usage(response)
            return response
        except Exception as error:
            usage.error = f"{type(error).__name__}: {error}"[:2000]
            raise
        finally:
            if grant is not None:
                router.llm_end(grant, usage, time.monotonic() - started)

    def serialize(self) -> dict[str, Any]:
        data: dict[str, Any] = super().serialize()
        data["info"]["tao_session_id"] = self.session.id
        return data


def execution_status(output: dict[str, Any]) -> str:
    """`ok`, `timeout` or `error` for an environment's `execute` result."""
    extra = output.get("extra")
    if isinstance(extra, dict) and extra.get("exception_type") == "TimeoutExpired":
        return "timeout"
    return "ok" if output.get("returncode") == 0 else "error"


class TaoEnvironment:
    """Any mini-swe-agent environment, each `execute` reported to TAO as one tool call (see the module docstring)."""

    def __init__(
        self,
        *,
        wrapped_class: str = "local",
        tool_name: str = "bash",
        session: tao_sdk.Session | None = None,
        tao: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self.inner = get_environment_class(wrapped_class)(**kwargs)
        self.config = self.inner.config
        self.tool_name = tool_name
        self._session = session
        self._settings = TaoSettings.model_validate(tao or {})
        self._lock = threading.Lock()

    def session(self) -> tao_sdk.Session:
        if self._session is not None:
            return self._session
        current = current_session()
        if current is not None:
            return current
        with self._lock:
            if self._session is None:
                self._session = open_session(self._settings, "", self)
            return self._session

    def execute(self, action: dict[str, Any], cwd: str = "", *, timeout: int | None = None) -> dict[str, Any]:
        command = str(action.get("command", ""))
        limit = timeout if timeout is not None else getattr(self.config, "timeout", None)
        call = self.session().tool(self.tool_name, command=command, timeout=limit)
        if isinstance(action.get("tool_call_id"), str) and action["tool_call_id"]:
            call.call_id = action["tool_call_id"][:200]
        call.start()
        status = "error"
        try:
            output: dict[str, Any] = (
                self.inner.execute(action, cwd) if timeout is None else self.inner.execute(action, cwd, timeout=timeout)  # type: ignore[call-arg]
            )
            status = execution_status(output)
            return output
        except Submitted:
            status = "ok"
            raise
        finally:
            call.end(status)

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        variables: dict[str, Any] = self.inner.get_template_vars(**kwargs)
        return variables

    def serialize(self) -> dict[str, Any]:
        data: dict[str, Any] = self.inner.serialize()
        data.setdefault("info", {})["tao_environment"] = f"{__name__}.{type(self).__name__}"
        return data

    def __getattr__(self, name: str) -> Any:
        inner = self.__dict__.get("inner")
        if inner is None:
            raise AttributeError(name)
        return getattr(inner, name)
