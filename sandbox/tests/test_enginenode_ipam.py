"""Pod IPs of an engine node."""

from __future__ import annotations

import pytest

from specdeploy_sandbox.enginenode.ipam import AddressesExhausted, IpAllocator


def test_addresses_start_at_2_are_stable_per_owner_and_reused_lowest_first() -> None:
    ips = IpAllocator("127.42.128.0/24")
    assert [ips.allocate(owner) for owner in "abc"] == ["127.42.128.2", "127.42.128.3", "127.42.128.4"]
    assert ips.allocate("b") == "127.42.128.3"
    ips.release("a")
    ips.release("b")
    assert ips.allocate("d") == "127.42.128.2"
    assert ips.allocate("e") == "127.42.128.3"


def test_a_preferred_address_is_kept_when_free() -> None:
    ips = IpAllocator("127.42.129.0/24")
    assert ips.allocate("a", preferred="127.42.129.9") == "127.42.129.9"
    assert ips.allocate("b", preferred="127.42.129.9") == "127.42.129.2"
    assert ips.allocate("c", preferred="10.0.0.1") == "127.42.129.3"


def test_exhaustion_is_an_error() -> None:
    ips = IpAllocator("127.42.130.0/29")  # .2 to .6
    assert [ips.allocate(str(n)) for n in range(5)][-1] == "127.42.130.6"
    with pytest.raises(AddressesExhausted):
        ips.allocate("one too many")
