"""One lookup of a DNS name's addresses: its A and AAAA records, asked of a given server or of the system's resolver.

This module is the boundary with dnspython: its exceptions become one `LookupFailed` whose `kind` says what went
wrong, in the few words an operator acts on (the name does not exist, no server answered in time, the server failed
or refused, the name has no address). The `discovery` loop reports a failure once per change of kind, so the kinds
are coarse on purpose.

Invariants: a lookup either returns every address of both record types or raises `LookupFailed` — never a partial
set (an A answer without its AAAA answer would drop the IPv6 nodes); it never takes much longer than `timeout_s`;
addresses are in Python's canonical text form (`ipaddress`), so one address always reads the same.
"""

from __future__ import annotations

import asyncio
import enum
import ipaddress

import dns.asyncresolver
import dns.exception
import dns.nameserver
import dns.resolver


class FailureKind(enum.StrEnum):
    NXDOMAIN = "nxdomain"
    """The name does not exist (yet, or any more)."""
    NO_ADDRESS = "no-address"
    """The name exists and has neither A nor AAAA records."""
    TIMEOUT = "timeout"
    """No server answered within the lookup's time (a stopped server looks like this: UDP has no refusal)."""
    SERVER_FAILURE = "server-failure"
    """Every server answered with an error (SERVFAIL, REFUSED, …)."""
    ERROR = "error"
    """Anything else dnspython or the socket raised."""


class LookupFailed(Exception):
    """A lookup of `name` failed; `kind` classifies it, the message says it in full."""

    def __init__(self, name: str, kind: FailureKind, detail: str) -> None:
        super().__init__(f"{name}: {kind}: {detail}")
        self.name = name
        self.kind = kind
        self.detail = detail


def make_resolver(server: tuple[str, int] | None, timeout_s: float) -> dns.asyncresolver.Resolver:
    """A resolver asking `server` (IP address, port), or the system's (/etc/resolv.conf) when None; no cache, so
    each lookup asks the server."""
    resolver = dns.asyncresolver.Resolver(configure=server is None)
    if server is not None:
        resolver.nameservers = [dns.nameserver.Do53Nameserver(*server)]
    resolver.cache = None
    resolver.lifetime = timeout_s
    resolver.timeout = min(resolver.timeout, timeout_s)
    return resolver


async def lookup_addresses(resolver: dns.asyncresolver.Resolver, name: str) -> frozenset[str]:
    """Every address (A and AAAA) of `name`, asked concurrently; `LookupFailed` when either query fails or neither
    has a record."""
    try:
        async with asyncio.TaskGroup() as group:
            queries = [group.create_task(_records(resolver, name, kind)) for kind in ("A", "AAAA")]
    except* dns.exception.DNSException as errors:
        raise _failure(name, errors.exceptions[0]) from None
    except* OSError as errors:
        raise LookupFailed(name, FailureKind.ERROR, str(errors.exceptions[0])) from None
    addresses = frozenset(address for query in queries for address in query.result())
    if not addresses:
        raise LookupFailed(name, FailureKind.NO_ADDRESS, "no A or AAAA record")
    return addresses


async def _records(resolver: dns.asyncresolver.Resolver, name: str, kind: str) -> list[str]:
    answer = await resolver.resolve(name, kind, search=True, raise_on_no_answer=False)
    return [str(ipaddress.ip_address(record.address)) for record in answer]


def _failure(name: str, error: BaseException) -> LookupFailed:
    if isinstance(error, dns.resolver.NXDOMAIN):
        kind = FailureKind.NXDOMAIN
    elif isinstance(error, dns.exception.Timeout):  # LifetimeTimeout is one
        kind = FailureKind.TIMEOUT
    elif isinstance(error, dns.resolver.NoNameservers):
        kind = FailureKind.SERVER_FAILURE
    else:
        kind = FailureKind.ERROR
    return LookupFailed(name, kind, str(error))
