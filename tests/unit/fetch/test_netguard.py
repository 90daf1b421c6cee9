import asyncio

import pytest

from crawler import errors
from crawler.config.settings import parse_networks
from crawler.fetch.netguard import NetworkGuard, Resolver, is_public


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


# The guard's deny list, pinned: a change to it, or to the running Python's ``ipaddress``
# tables, must not silently open a network.
PINNED_DENY = [
    "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
    "192.0.0.0/24", "192.0.2.0/24", "192.168.0.0/16", "198.18.0.0/15", "198.51.100.0/24",
    "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4",
    "::/8", "100::/8", "200::/7", "400::/6", "800::/5", "1000::/4",
    "4000::/3", "6000::/3", "8000::/3", "a000::/3", "c000::/3", "e000::/4", "f000::/5", "f800::/6",
    "fc00::/7", "fe00::/9", "fe80::/10", "fec0::/10", "ff00::/8",
    "2001::/23", "2001:db8::/32", "3fff::/20",
]


def test_deny_list_is_pinned() -> None:
    from crawler.fetch.netguard import DENIED_NETWORKS

    assert [str(n) for n in DENIED_NETWORKS] == PINNED_DENY


@pytest.mark.parametrize("network", PINNED_DENY)
def test_first_and_last_address_of_every_denied_network_are_blocked(network: str) -> None:
    from ipaddress import ip_network

    net = ip_network(network)
    for address in (net[0], net[-1]):
        assert not NetworkGuard().allows(str(address)), address
        if net.version == 4:  # and the same address carried in IPv6
            assert not NetworkGuard().allows(f"::ffff:{address}"), address


@pytest.mark.parametrize("address", ["fec0::1", "fec0:1:2::3", "feff:ffff::1", "3fff::1"])
def test_site_local_and_new_documentation_prefixes_are_blocked(address: str) -> None:
    # Python 3.11's ipaddress calls every one of these global.
    assert not NetworkGuard().allows(address)


@pytest.mark.parametrize("address", ["1.0.0.1", "100.63.255.255", "100.128.0.0", "172.32.0.0", "192.0.1.1",
                                     "198.20.0.1", "223.255.255.255", "2001:200::1", "2400:cb00::1",
                                     "2a00:1450::1", "3ffe::1"])
def test_addresses_just_outside_denied_networks_pass(address: str) -> None:
    assert NetworkGuard().allows(address)
