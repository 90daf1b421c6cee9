"""httpx over aiohttp (the maintained ``httpx-aiohttp`` transport), with the network guard: an
alternative to httpcore under the same httpx client API, measured by ``bench/client_cost.py``.

aiohttp connects to what its resolver returns, so the guard sits in the resolver: every address
a connection is opened to is one our resolver gave and the guard allowed (aiohttp's own DNS
cache is off; ``Resolver`` keeps its TTL). A pooled connection stays with the address it was
opened to, as httpcore's do. Bodies stay raw (no decompression by aiohttp): the fetcher decodes
and caps them as it does over httpcore. The peer address and HTTP version are handed to httpx
the way httpcore hands them (``network_stream``, ``http_version``).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import httpx
from aiohttp.abc import AbstractResolver, ResolveResult
from httpx_aiohttp import AiohttpTransport
from httpx_aiohttp.transport import AiohttpResponseStream

from crawler import errors
from crawler.fetch.netguard import NetworkGuard, Resolver


class GuardedResolver(AbstractResolver):
    """aiohttp's resolver, answered by ours and filtered by the guard."""

    def __init__(self, guard: NetworkGuard, resolver: Resolver) -> None:
        self.guard = guard
        self.resolver = resolver

    async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET,
                      ) -> list[ResolveResult]:
        addrs = await self.resolver.resolve(host, port)
        allowed = [a for a in addrs if self.guard.allows(a)]
        if not allowed:
            raise errors.BlockedNetwork(f"{host} resolves to {', '.join(addrs)}: not a public address")
        return [ResolveResult(hostname=host, host=a, port=port,
                              family=socket.AF_INET6 if ":" in a else socket.AF_INET,
                              proto=0, flags=socket.AI_NUMERICHOST) for a in allowed]

    async def close(self) -> None:
        return None


class _Peer:
    """What ``client._peer_ip`` reads from httpcore's stream: the address connected to."""

    def __init__(self, addr: Any) -> None:
        self.addr = addr

    def get_extra_info(self, info: str) -> Any:
        return self.addr if info == "server_addr" else None


class _Body(AiohttpResponseStream):
    """The response body, its failures named as httpcore names them: a body cut short or
    malformed is the server's protocol error, not a network one (httpx-aiohttp says ReadError)."""

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._aiohttp_response.content.iter_chunked(self.CHUNK_SIZE):
                yield chunk
        except aiohttp.ClientPayloadError as exc:
            raise httpx.RemoteProtocolError(str(exc)) from exc
        except aiohttp.ServerTimeoutError as exc:
            raise httpx.ReadTimeout(str(exc)) from exc
        except aiohttp.ClientConnectionError as exc:
            raise httpx.ReadError(str(exc)) from exc


class GuardedAiohttpTransport(AiohttpTransport):
    def __init__(self, guard: NetworkGuard, resolver: Resolver, per_origin: int = 32,
                 keepalive_expiry: float = 30.0) -> None:
        super().__init__(trust_env=False)
        self._guarded = (guard, resolver, per_origin, keepalive_expiry)

    def get_client(self) -> aiohttp.ClientSession:
        guard, resolver, per_origin, keepalive = self._guarded
        connector = aiohttp.TCPConnector(resolver=GuardedResolver(guard, resolver), use_dns_cache=False,
                                         limit=0, limit_per_host=per_origin, keepalive_timeout=keepalive,
                                         ssl=self.ssl_context)
        # No cookie jar (the fetcher sends what a session holds), no proxy from the environment.
        return aiohttp.ClientSession(connector=connector, cookie_jar=aiohttp.DummyCookieJar(), trust_env=False,
                                     auto_decompress=False)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        guard = self._guarded[0]
        host = request.url.host
        # aiohttp never asks its resolver about an address literal: the guard is asked here.
        if _is_address(host) and not guard.allows(host):
            raise errors.BlockedNetwork(f"{host}: not a public address")
        try:
            response = await super().handle_async_request(request)
        except aiohttp.ClientResponseError as exc:
            # A status line or header aiohttp's parser refuses: the server's protocol error.
            raise httpx.RemoteProtocolError(str(exc)) from exc
        except httpx.ConnectTimeout as exc:
            # httpx-aiohttp maps every aiohttp connection error to ConnectTimeout (its table
            # picks the first match): a refused or unreachable connection is a connect error.
            cause = exc.__cause__
            if isinstance(cause, aiohttp.ClientConnectorError) and not isinstance(cause, aiohttp.ServerTimeoutError):
                # Its text names "ssl:default" whatever failed: only a TLS failure says ssl.
                text = str(cause) if isinstance(cause, aiohttp.ClientSSLError) else str(cause.os_error)
                raise httpx.ConnectError(text) from cause
            raise
        assert isinstance(response.stream, AiohttpResponseStream)  # what httpx-aiohttp returns
        raw = response.stream._aiohttp_response
        response.stream = _Body(raw)
        # The connection goes back to the pool as soon as a small body is in: its protocol stays.
        protocol = getattr(raw, "_protocol", None)
        transport = getattr(protocol, "transport", None)
        peer = transport.get_extra_info("peername") if transport is not None else None
        if peer is None and _is_address(host):
            peer = (host, request.url.port)
        response.extensions["network_stream"] = _Peer(peer)
        version = raw.version
        text = f"HTTP/{version.major}.{version.minor}" if version else "HTTP/1.1"
        response.extensions["http_version"] = text.encode()
        return response


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
