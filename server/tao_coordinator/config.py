"""The coordinator's configuration: a TOML file, then command-line overrides, validated as one pydantic model.

```toml
[server]
host = "127.0.0.1"
port = 8700
token = "…"                 # or $TAO_TOKEN; required unless insecure_no_auth on loopback
state_dir = "~/.local/state/tao"
log_level = "info"          # debug, info, warning or error

[fleet]
scrape_interval_s = 2.0
max_capacity_tokens = 1000000000    # a node reporting more is quarantined (a broken exporter, not a big node)

[[nodes]]
name = "node-a"
url = "http://10.0.0.7:8000"
capacity_tokens = 320000    # optional: overrides what /metrics says
kv_events = "tcp://10.0.0.7:5557"   # optional: exact cache credit from vLLM KV events
dp_size = 1                 # optional: data-parallel ranks; rank r's KV events are on port 5557 + r

[[discovery]]               # optional: every A/AAAA record of a DNS name is a node (`fleet/discovery.py`)
name = "vllm.default.svc.cluster.local"
port = 8000

[policy]
name = "tao"

[core]                      # any field of CoreSettings
credit_half_life_s = 10

[limits]                    # caps of each API token (`web/caps.py`); without auth, of all clients together
max_live_sessions = 5000
registrations_per_s = 100
registration_burst = 2000

[[tokens]]                  # more API tokens beside server.token (named "default"), each capped on its own
name = "ci"
token = "…"
max_live_sessions = 200     # optional: overrides [limits] for this token
```

Invariants: node names are unique; token names and token values are unique; `insecure_no_auth` is refused unless
the server listens on loopback; every error names the offending field (`ConfigError`).
"""

from __future__ import annotations

import ipaddress
import re
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from tao_sdk import environment

from .core.policies import check_name
from .core.settings import CoreSettings
from .field_help import problems


class ConfigError(ValueError):
    """The configuration is invalid; the message names the field."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class ServerConfig(_Section):
    host: str = "127.0.0.1"
    """Address to listen on."""
    port: int = Field(default=8700, ge=0, le=65535)
    """Port to listen on."""
    token: str | None = Field(default=None, min_length=16)
    """Bearer token of the API. Falls back to $TAO_TOKEN."""
    insecure_no_auth: bool = False
    """Accept requests without any token; only allowed on a loopback address."""
    state_dir: Path = Path("~/.local/state/tao")
    """Where learned state (tool-duration history) persists across restarts."""
    max_body_bytes: int = Field(default=1 << 20, ge=1024)
    """Largest request body accepted (413 past it)."""
    body_timeout_s: float = Field(default=5.0, gt=0, le=300)
    """Longest the reading of one request body may take (408, and the connection is closed, past it)."""
    idle_timeout_s: float = Field(default=75.0, gt=0, le=3600)
    """A connection that has no request in progress for this long — idle between requests, or still sending its
    first request's headers — is closed."""
    max_connections: int = Field(default=4096, ge=1)
    """Open client connections at most; a connection past it is closed as soon as it is accepted."""
    log_format: Literal["text", "json"] = "text"
    """Log lines as text or as JSON objects."""
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    """`info` logs every decision (`tao.decisions`: plans that changed a place, fast admissions); `warning` only
    problems."""
    acquire_wait_s: float = Field(default=30.0, gt=0, le=600)
    """Upper bound on how long one acquire call blocks (the client's wait_s is capped by it)."""
    redis: str | None = Field(default=None, pattern=r"^(redis|rediss|unix)://")
    """Several coordinators share the fleet through this Redis (`web/replica.py`): one leads, the others stand by.
    None: this coordinator runs alone, its learned state in SQLite under `state_dir`."""
    redis_prefix: str = Field(default="tao", min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._-]+$")
    """Prefix of every Redis key: coordinators of different fleets may share one Redis under different prefixes."""
    lease_s: float = Field(default=1.0, ge=0.1, le=60)
    """The leader's lease: a standby takes over within about this long after the leader dies."""
    advertise_url: str | None = Field(default=None, pattern=r"^https?://")
    """Where clients reach this coordinator, told to them by the others when it leads (default http://host:port)."""
    replica_id: str | None = Field(default=None, min_length=1, max_length=100, pattern=r"^[A-Za-z0-9._:-]+$")
    """This replica's name in the election and the logs (default: host name and a random suffix)."""


class FleetConfig(_Section):
    scrape_interval_s: float = Field(default=2.0, gt=0)
    scrape_timeout_s: float = Field(default=2.0, gt=0)
    unhealthy_after: int = Field(default=2, ge=1)
    """Consecutive failed scrapes (or /health answers other than 200) that mark a node unhealthy."""
    kv_flush_interval_s: float = Field(default=0.5, gt=0)
    """How often per-session residency from KV events is handed to the planner."""
    max_capacity_tokens: int = Field(default=1_000_000_000, ge=1)
    """A node reporting more KV tokens than this (in HBM or in its CPU tier) is quarantined, not believed: no node
    holds 10^9 tokens (16 TB of KV at 16 KiB a token), so a figure past it is a broken exporter's."""
    models_every_scrapes: int = Field(default=30, ge=1)
    """A node's served models (`GET /v1/models`) are asked for at its first good scrape, after it restarts, and
    again every this many good scrapes: LoRA adapters are loaded and unloaded while it runs."""


class NodeConfig(_Section):
    name: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9._-]+$")
    url: str = Field(pattern=r"^https?://")
    capacity_tokens: int | None = Field(default=None, ge=1)
    kv_events: str | None = Field(default=None, pattern=r"^(tcp|ipc)://")
    kv_events_replay: str | None = Field(default=None, pattern=r"^(tcp|ipc)://")
    dp_size: int = Field(default=1, ge=1, le=256)
    """Data-parallel ranks behind `url` (vLLM `--data-parallel-size`): rank r publishes KV events on the
    `kv_events` (and `kv_events_replay`) port + r, and each is subscribed to."""
    tensor_parallel_size: int = Field(default=1, ge=1, le=1024)
    """vLLM `--tensor-parallel-size` of the node: its `kv_offload_load_time` sums the TP workers' parallel copies,
    so the coordinator divides it by this to get the link time of a CPU→GPU load."""
    models: list[str] | None = Field(default=None, min_length=1, max_length=1000)
    """The model names calls may use on this node (base model names and LoRA adapters, 1–200 characters each). Given,
    they are the node's list whatever its `/v1/models` says (a node that answers 401 without the API key, or one
    that should take fewer of what it serves), and `/v1/models` is not asked; omitted, the list is learned from
    `/v1/models` (until it is, the node takes calls for any model)."""

    @model_validator(mode="after")
    def _ranks_need_ports(self) -> NodeConfig:
        if self.dp_size > 1:
            for endpoint in (self.kv_events, self.kv_events_replay):
                if endpoint is not None and not re.fullmatch(r"tcp://.+:\d+", endpoint):
                    raise ValueError("dp_size > 1 needs tcp://host:port KV-event endpoints (rank r uses port + r)")
        return self

    @field_validator("url")
    @classmethod
    def _strip_slash(cls, url: str) -> str:
        return url.rstrip("/")

    @field_validator("models")
    @classmethod
    def _model_names(cls, models: list[str] | None) -> list[str] | None:
        if models is not None and not all(0 < len(name) <= 200 for name in models):
            raise ValueError("every model name is 1-200 characters")
        return models


class DiscoveryConfig(_Section):
    """Nodes found in DNS (`fleet/discovery.py`): every A and AAAA record of `name` is a node at
    `scheme://address:port`, looked up again every `interval_s` — a Kubernetes headless Service names every ready pod
    this way."""

    name: str = Field(min_length=1, max_length=253)
    """The DNS name to resolve, e.g. `vllm.default.svc.cluster.local`."""
    port: int = Field(default=8000, ge=1, le=65535)
    """The port every discovered node serves on."""
    scheme: Literal["http", "https"] = "http"
    interval_s: float = Field(default=10.0, gt=0, le=3600)
    """How often the name is looked up again: a record added or removed is seen within about this long."""
    timeout_s: float = Field(default=2.0, gt=0, le=60)
    """Longest one lookup (its A and AAAA queries together) may take before it counts as failed."""
    resolver: str | None = None
    """The DNS server to ask, `address` or `address:port` (`[address]:port` for IPv6); None: the system's
    (/etc/resolv.conf)."""
    node_prefix: str | None = Field(default=None, min_length=1, max_length=60, pattern=r"^[A-Za-z0-9._-]+$")
    """Discovered nodes are named `<prefix>-<address>` (`fleet/discovery.py`); default: the first label of `name`."""

    @field_validator("name")
    @classmethod
    def _dns_name(cls, name: str) -> str:
        labels = name.removesuffix(".").split(".")
        if not all(_DNS_LABEL.fullmatch(label) for label in labels):
            raise ValueError(f"{name!r} is not a DNS name (labels of letters, digits, '-' and '_', 63 at most)")
        return name.lower()

    @field_validator("resolver")
    @classmethod
    def _address_and_port(cls, resolver: str | None) -> str | None:
        if resolver is not None:
            split_resolver(resolver)
        return resolver

    @property
    def resolver_address(self) -> tuple[str, int] | None:
        """The resolver's IP address and port, or None for the system's."""
        return None if self.resolver is None else split_resolver(self.resolver)

    @property
    def prefix(self) -> str:
        return self.node_prefix or self.name.split(".")[0][:60]


_DNS_LABEL = re.compile(r"[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?", re.IGNORECASE)


def split_resolver(resolver: str, default_port: int = 53) -> tuple[str, int]:
    """`10.0.0.2`, `10.0.0.2:5353`, `fd00::2` or `[fd00::2]:5353` → (IP address, port); ValueError otherwise (a
    resolver is an address: naming it would need a resolver)."""
    host, port_text = resolver, str(default_port)
    if resolver.startswith("["):
        host, bracket, rest = resolver[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            raise ValueError(f"resolver {resolver!r}: expected [address]:port")
        port_text = rest[1:] if rest else str(default_port)
    elif resolver.count(":") == 1:
        host, _, port_text = resolver.partition(":")
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        raise ValueError(f"resolver {resolver!r}: {host!r} is not an IP address") from None
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise ValueError(f"resolver {resolver!r}: the port must be a number from 1 to 65535")
    return str(address), int(port_text)


class PolicyConfig(_Section):
    name: str = "tao"
    """A registered policy (`tao`, `round-robin`, …, with options as `name[key=value]`) or `package.module:factory`."""

    @field_validator("name")
    @classmethod
    def _known(cls, name: str) -> str:
        check_name(name)  # UnknownPolicy is a ValueError: reported as `policy.name: …`
        return name


class LimitsConfig(_Section):
    """What one API token may make the coordinator hold; without auth, what all clients together may."""

    max_live_sessions: int = Field(default=5000, ge=1, le=10_000_000)
    """Live sessions one API token may hold; a registration past it is answered 429."""
    registrations_per_s: float = Field(default=100.0, gt=0, le=1_000_000)
    """Sustained registrations per second one API token may make (a token bucket); faster ones are answered 429."""
    registration_burst: int = Field(default=2000, ge=1, le=10_000_000)
    """Registrations one API token may make at once before `registrations_per_s` paces it."""


DEFAULT_TOKEN_NAME = "default"
"""The name of `server.token` in logs and metrics."""


class TokenConfig(_Section):
    """One more API token: its holder registers sessions under its own caps, named in logs and metrics."""

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._-]+$")
    token: str = Field(min_length=16, max_length=512)
    max_live_sessions: int | None = Field(default=None, ge=1, le=10_000_000)
    """This token's cap on live sessions (default: `limits.max_live_sessions`)."""
    registrations_per_s: float | None = Field(default=None, gt=0, le=1_000_000)
    registration_burst: int | None = Field(default=None, ge=1, le=10_000_000)

    @field_validator("token")
    @classmethod
    def _printable(cls, token: str) -> str:
        if not token.isascii() or not token.isprintable() or " " in token:
            raise ValueError("a token is printable ASCII without spaces (it travels in 'Authorization: Bearer …')")
        return token


class CoordinatorConfig(_Section):
    server: ServerConfig = Field(default_factory=ServerConfig)
    fleet: FleetConfig = Field(default_factory=FleetConfig)
    nodes: list[NodeConfig] = Field(default_factory=list)
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    core: CoreSettings = Field(default_factory=CoreSettings)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    tokens: list[TokenConfig] = Field(default_factory=list)
    """API tokens beside `server.token`, each with its own caps."""
    discovery: list[DiscoveryConfig] = Field(default_factory=list)
    """DNS names whose addresses are nodes (`fleet/discovery.py`), looked up again on an interval."""

    def api_tokens(self) -> dict[str, str]:
        """Every API token by its name (`server.token` as `default`)."""
        named = {token.name: token.token for token in self.tokens}
        return {DEFAULT_TOKEN_NAME: self.server.token, **named} if self.server.token is not None else named

    @model_validator(mode="after")
    def _check(self) -> CoordinatorConfig:
        names = [node.name for node in self.nodes]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"node names must be unique, repeated: {', '.join(duplicates)}")
        if self.server.insecure_no_auth and not is_loopback(self.server.host):
            raise ValueError(f"insecure_no_auth is only allowed on a loopback address, not {self.server.host!r}")
        if not self.server.insecure_no_auth and self.server.token is None and not self.tokens:
            raise ValueError("set server.token (or $TAO_TOKEN), or insecure_no_auth = true on loopback")
        _check_tokens(self.tokens, self.server.token)
        return self


def _check_tokens(tokens: list[TokenConfig], default: str | None) -> None:
    names = [token.name for token in tokens]
    if DEFAULT_TOKEN_NAME in names:
        raise ValueError(f"tokens: the name {DEFAULT_TOKEN_NAME!r} is server.token's; choose another")
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ValueError(f"tokens: names must be unique, repeated: {', '.join(repeated)}")
    values = [token.token for token in tokens] + ([default] if default is not None else [])
    if len(set(values)) < len(values):
        raise ValueError("tokens: every API token must differ from the others and from server.token")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def load_config(
    path: Path | None, overrides: dict[str, Any], extra_nodes: list[dict[str, Any]] | None = None
) -> CoordinatorConfig:
    """Read `path` (optional), apply dotted `overrides` like {"server.port": 9000} (None values are skipped), add
    `extra_nodes` to the file's, validate."""
    data: dict[str, Any] = {}
    if path is not None:
        try:
            data = tomllib.loads(path.read_bytes().decode("utf-8"))
        except OSError as error:
            raise ConfigError(f"{path}: {error.strerror or error}") from error
        except UnicodeDecodeError as error:
            raise ConfigError(
                f"{path}: not UTF-8 text (byte 0x{error.object[error.start]:02x} at offset {error.start}): "
                "save it as UTF-8"
            ) from None
        except tomllib.TOMLDecodeError as error:
            raise ConfigError(f"{path}: not valid TOML: {error}") from error
    for dotted, value in overrides.items():
        if value is None:
            continue
        section, _, key = dotted.partition(".")
        if key:
            data.setdefault(section, {})[key] = value
        else:
            data[section] = value
    if extra_nodes:
        data["nodes"] = [*data.get("nodes", []), *extra_nodes]
    server = data.setdefault("server", {})
    if "token" not in server and (token := environment.token()):
        server["token"] = token
    try:
        return CoordinatorConfig.model_validate(data)
    except ValidationError as error:
        raise ConfigError(problems(error)) from None
