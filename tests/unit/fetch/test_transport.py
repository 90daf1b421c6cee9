"""The aiohttp transport keeps the network guard: names through the guarded resolver, address
literals checked before aiohttp (which never asks a resolver about them) connects anywhere."""

import asyncio
import socket

import httpx
import pytest

from crawler import errors
from crawler.config.settings import parse_networks
from crawler.fetch.netguard import NetworkGuard, Resolver
from crawler.fetch.transport import GuardedAiohttpTransport, GuardedResolver


def test_resolver_answers_only_allowed_addresses() -> None:
    guard = NetworkGuard(parse_networks(["127.0.1.0/24"]))
    resolver = GuardedResolver(guard, Resolver(overrides={"ok.test": "127.0.1.5", "bad.test": "10.0.0.1"}))
    [found] = asyncio.run(resolver.resolve("ok.test", 80))
    assert found["host"] == "127.0.1.5" and found["port"] == 80 and found["family"] == socket.AF_INET
    assert found["flags"] == socket.AI_NUMERICHOST  # aiohttp connects to it as given
    with pytest.raises(errors.BlockedNetwork):
        asyncio.run(resolver.resolve("bad.test", 80))


@pytest.mark.parametrize("url", ["http://127.0.0.1:9/", "http://10.0.0.1/", "http://[::1]:9/",
                                 "http://169.254.169.254/latest"])
def test_address_literals_are_refused_before_any_connection(url: str) -> None:
    async def send() -> None:
        transport = GuardedAiohttpTransport(NetworkGuard(), Resolver())
        try:
            await transport.handle_async_request(httpx.Request("GET", url))
        finally:
            await transport.aclose()

    with pytest.raises(errors.BlockedNetwork):
        asyncio.run(send())
