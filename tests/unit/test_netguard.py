import asyncio

import pytest

from crawler import errors
from crawler.fetch.netguard import NetworkGuard, Resolver, is_public, parse_networks


@pytest.mark.parametrize("address", [
    "127.0.0.1", "127.0.9.9", "10.1.2.3", "172.16.0.1", "192.168.1.1", "100.64.0.1", "169.254.169.254",
    "0.0.0.0", "224.0.0.1", "239.255.255.250", "240.0.0.1", "255.255.255.255", "192.0.2.1", "198.18.0.1",
    "::1", "::", "fe80::1", "fc00::1", "fd12:3456::1", "ff02::1", "2001:db8::1",
    "::ffff:127.0.0.1", "::ffff:10.0.0.1", "64:ff9b::7f00:1", "2002:7f00:1::1", "fe80::1%eth0",
])
def test_non_public_addresses_are_blocked(address: str) -> None:
    assert not NetworkGuard().allows(address)


@pytest.mark.parametrize("address", ["8.8.8.8", "93.184.216.34", "2606:4700::1111", "::ffff:8.8.8.8"])
def test_public_addresses_pass(address: str) -> None:
    assert NetworkGuard().allows(address)


def test_allowed_networks_are_exceptions_and_nothing_more() -> None:
    guard = NetworkGuard(parse_networks(["127.0.1.0/24"]))
    assert guard.allows("127.0.1.7")
    assert guard.allows("::ffff:127.0.1.7")
    assert not guard.allows("127.0.2.1")
    assert not guard.allows("10.0.0.1")


def test_bad_network_is_named() -> None:
    with pytest.raises(ValueError, match=r"not a network: .127\.0\.1/33."):
        parse_networks(["127.0.1/33"])


def test_is_public_sees_through_nat64() -> None:
    from ipaddress import ip_address

    assert is_public(ip_address("64:ff9b::808:808"))  # 8.8.8.8
    assert not is_public(ip_address("64:ff9b::a00:1"))  # 10.0.0.1


def test_resolver_overrides_literals_and_failures() -> None:
    r = Resolver(overrides={"Site.Test": "127.0.1.1"})

    async def go() -> None:
        assert await r.resolve("site.test", 80) == ["127.0.1.1"]
        assert await r.resolve("[::1]", 80) == ["::1"]
        assert await r.resolve("10.0.0.1", 80) == ["10.0.0.1"]
        with pytest.raises(errors.DNSError):
            await r.resolve("no-such-host.invalid", 80)

    asyncio.run(go())
