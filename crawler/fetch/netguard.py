"""The network guard: no connection to loopback, private, link-local, site-local, carrier-grade NAT,
multicast or reserved addresses (IPv4 and IPv6, including IPv4 embedded in IPv6) unless a
network is explicitly allowed.

It is an httpcore network backend, so it sees every new connection, redirect hops included,
after DNS resolution, and it connects to the very address it checked: there is no second lookup
a DNS-rebinding server could answer differently.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import ssl
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any

import httpcore
from httpcore._backends.auto import AutoBackend
from httpcore._utils import is_socket_readable

from crawler import errors
from crawler.config.settings import IPNetwork

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_6TO4 = ipaddress.ip_network("2002::/16")

# Never contacted unless allowed. Spelled out rather than taken from ``ipaddress``'s
# ``is_global``/``is_private`` tables, which differ between Python releases (3.11.10 and 3.12.4
# made parts of 2001::/23 global; none knows fec0::/10 as non-public). Tests pin this list.
DENIED_NETWORKS: tuple[IPNetwork, ...] = tuple(ipaddress.ip_network(n) for n in (
    # IPv4: "this network", private, CGNAT, loopback, link-local, IETF protocol assignments,
    # documentation, benchmarking, multicast, reserved and broadcast.
    "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
    "192.0.0.0/24", "192.0.2.0/24", "192.168.0.0/16", "198.18.0.0/15", "198.51.100.0/24",
    "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4",
    # IPv6: everything outside 2000::/3 (unspecified, loopback, v4-compatible, discard, ULA,
    # link-local, the deprecated site-local fec0::/10, multicast, unassigned), and inside it the
    # IETF protocol block, documentation (old and RFC 9637's). 64:ff9b::/96, ::ffff:0:0/96 and
    # 2002::/16 are judged by the IPv4 address they carry, before this list.
    "::/8", "100::/8", "200::/7", "400::/6", "800::/5", "1000::/4",
    "4000::/3", "6000::/3", "8000::/3", "a000::/3", "c000::/3", "e000::/4", "f000::/5", "f800::/6",
    "fc00::/7", "fe00::/9", "fe80::/10", "fec0::/10", "ff00::/8",
    "2001::/23", "2001:db8::/32", "3fff::/20",
))
_DENIED = {v: [n for n in DENIED_NETWORKS if n.version == v] for v in (4, 6)}


def _embedded_v4(ip: IPAddress) -> ipaddress.IPv4Address | None:
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return ip.ipv4_mapped
        if ip in _NAT64:
            return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        if ip in _6TO4:
            return ipaddress.IPv4Address((int(ip) >> 80) & 0xFFFFFFFF)
    return None


def is_public(ip: IPAddress) -> bool:
    inner = _embedded_v4(ip)
    if inner is not None:
        return is_public(inner)
    return not any(ip in net for net in _DENIED[ip.version])


class NetworkGuard:
    def __init__(self, allow: Iterable[IPNetwork] = ()) -> None:
        self.allow = list(allow)

    def allows(self, address: str) -> bool:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
        inner = _embedded_v4(ip)
        if any(ip in net or (inner is not None and inner in net) for net in self.allow):
            return True
        return is_public(ip)


class Resolver:
    """getaddrinfo with a bounded cache (entries live ``ttl`` seconds; at most ``size``), and
    fixed answers for names given in ``overrides`` (like curl's --resolve)."""

    def __init__(self, ttl: float = 300.0, size: int = 10_000, overrides: Mapping[str, str] | None = None) -> None:
        self.ttl = ttl
        self.size = size
        self.overrides = {k.lower(): v for k, v in (overrides or {}).items()}
        self._cache: OrderedDict[str, tuple[float, list[str]]] = OrderedDict()

    async def resolve(self, host: str, port: int) -> list[str]:
        host = host.lower().strip("[]")
        try:
            ipaddress.ip_address(host.split("%", 1)[0])
            return [host]
        except ValueError:
            pass
        if host in self.overrides:
            return [self.overrides[host]]
        hit = self._cache.get(host)
        if hit and hit[0] > time.monotonic():
            self._cache.move_to_end(host)
            return hit[1]
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (socket.gaierror, UnicodeError) as exc:
            raise errors.DNSError(f"{host}: {exc}") from exc
        addrs = list(dict.fromkeys(str(info[4][0]) for info in infos))
        self._cache[host] = (time.monotonic() + self.ttl, addrs)
        while len(self._cache) > self.size:
            self._cache.popitem(last=False)
        return addrs


class GuardedBackend(httpcore.AsyncNetworkBackend):
    def __init__(self, guard: NetworkGuard, resolver: Resolver) -> None:
        self.guard = guard
        self.resolver = resolver
        self._inner = AutoBackend()

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                          local_address: str | None = None, socket_options: Iterable[Any] | None = None,
                          ) -> httpcore.AsyncNetworkStream:
        addrs = await self.resolver.resolve(host, port)
        allowed = [a for a in addrs if self.guard.allows(a)]
        if not allowed:
            raise errors.BlockedNetwork(f"{host} resolves to {', '.join(addrs)}: not a public address")
        last: Exception | None = None
        for address in allowed:
            try:
                return _Stream(await self._inner.connect_tcp(address, port, timeout=timeout,
                                                             local_address=local_address,
                                                             socket_options=socket_options))
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                last = exc
        assert last is not None
        raise last

    async def connect_unix_socket(self, *args: Any, **kwargs: Any) -> httpcore.AsyncNetworkStream:
        raise errors.BlockedNetwork("unix sockets are never crawled")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class _Stream(httpcore.AsyncNetworkStream):
    """anyio's stream, with the extra info httpcore asks for on every pool operation answered
    from the socket directly: httpcore checks each pooled connection's ``is_readable`` (was the
    connection dropped?) whenever a request starts or ends, and anyio builds a dict of lambdas
    for each such lookup (7% of a worker's CPU, measured)."""

    def __init__(self, inner: httpcore.AsyncNetworkStream) -> None:
        self._inner = inner
        self._socket = inner.get_extra_info("socket")
        self._server_addr = inner.get_extra_info("server_addr")

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return await self._inner.read(max_bytes, timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        await self._inner.write(buffer, timeout)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                        timeout: float | None = None) -> httpcore.AsyncNetworkStream:
        tls = _Stream(await self._inner.start_tls(ssl_context, server_hostname, timeout))
        tls._socket, tls._server_addr = self._socket, self._server_addr
        return tls

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":
            return is_socket_readable(self._socket)
        if info == "server_addr":
            return self._server_addr
        if info == "socket":
            return self._socket
        return self._inner.get_extra_info(info)
