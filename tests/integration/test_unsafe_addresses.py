"""Private addresses however they are spelled: IPv6 forms that carry an IPv4 address, other
spellings of an IPv4 address, and names that resolve to any of them, refused when a URL is
configured and when a call connects, before anything is sent."""

from __future__ import annotations

import socket
from typing import Any

import httpcore
import pytest

from tests.fakes import an_action
from tests.fakes.webhook_server import SECRET
from tickwork.providers.base import Rejected
from tickwork.providers.http import OutboundPolicy, UnsafeDestinationError, check_url
from tickwork.providers.webhook import WebhookProvider

# IPv6 forms carrying a private, loopback, link-local or metadata IPv4 address (or refused
# whatever they carry), by form: each was accepted before the fix of issue 33.
WRAPPED = {
    "ipv4-compatible": ["::127.0.0.2", "::169.254.169.254", "::10.0.0.1", "::8.8.8.8"],
    "ipv4-translated": ["::ffff:0:7f00:1", "::ffff:0:a9fe:a9fe", "::ffff:0:c0a8:101"],
    "nat64": ["64:ff9b::a9fe:a9fe", "64:ff9b::7f00:1", "64:ff9b::a00:1", "64:ff9b::c0a8:101",
              "64:ff9b::6440:1"],
    "nat64-local-use": ["64:ff9b:1::a9fe:a9fe", "64:ff9b:1:ffff::7f00:1", "64:ff9b:1::808:808"],
    "6to4": ["2002:7f00:1::1", "2002:a9fe:a9fe::1", "2002:a00:1::1", "2002:808:808::1"],
    "site-local": ["fec0::1", "fec0:0:0:1::a9fe:a9fe"],
    "documentation-and-srv6": ["3fff::1", "3fff:fff:ffff::a9fe:a9fe", "5f00::1"],
}  # fmt: skip
# Members of the same class refused already (IPv4-mapped by the old check; Teredo, discard
# and documentation addresses by the standard library's 2001::/23 and other lists; zone ids
# with them): kept so that no change to either loses them.
GUARDED = {
    "ipv4-mapped": ["::ffff:169.254.169.254", "::ffff:10.1.2.3", "0:0:0:0:0:ffff:7f00:1"],
    "teredo": ["2001:0:4136:e378:8000:63bf:80ff:fffe", "2001:0:a9fe:a9fe::1",
               "2001:0:5ef5:79fd:0:59d:a0e5:ba1"],
    "other-special": ["100::1", "2001:db8::a9fe:a9fe"],
    "zone-id": ["fe80::1%25eth0", "::ffff:127.0.0.1%25lo"],
}  # fmt: skip
WRAPPED_ADDRESSES = [address for members in WRAPPED.values() for address in members]
WRAPPED_URLS = [f"http://[{address}]/hook" for address in WRAPPED_ADDRESSES]
GUARDED_ADDRESSES = [address for members in GUARDED.values() for address in members]
# Other spellings of loopback and of "this host", resolved by the system resolver.
SPELLED = ["http://2130706433/", "http://0x7f.1/", "http://0x7f000001/", "http://017700000001/",
           "http://127.1/", "http://0/", "http://127.0.0.1./", "http://localhost./",
           "http://[::ffff:7f00:1]/", "http://[0:0:0:0:0:ffff:127.0.0.1]/"]  # fmt: skip
# Public addresses, plain and in the forms judged by the IPv4 address they carry.
PUBLIC = ["64:ff9b::808:808", "::ffff:93.184.215.14", "2606:4700::1111", "93.184.215.14"]


@pytest.mark.parametrize(
    "url", WRAPPED_URLS + [f"http://[{address}]/hook" for address in GUARDED_ADDRESSES]
)
def test_ipv6_forms_carrying_private_addresses_are_refused_when_configured(url):
    with pytest.raises(UnsafeDestinationError) as refused:
        check_url(url, OutboundPolicy())
    assert refused.value.code == "unsafe_url"
    assert refused.value.field == "url"


@pytest.mark.parametrize("url", SPELLED)
def test_other_spellings_of_private_addresses_are_refused(url):
    with pytest.raises(UnsafeDestinationError):
        check_url(url, OutboundPolicy())


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_stay_callable_in_the_forms_that_carry_them(address):
    host = f"[{address}]" if ":" in address else address
    assert check_url(f"https://{host}/hook", OutboundPolicy()).host == address


def test_refusals_say_what_the_address_carries():
    for url, says in [
        ("http://[64:ff9b::a9fe:a9fe]/", "a cloud metadata address (a NAT64 address carrying"
         " 169.254.169.254)"),
        ("http://[2002:7f00:1::1]/", "a 6to4 address (it carries 127.0.0.1)"),
        ("http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/", "a Teredo address (it carries"
         " 65.54.227.120, 127.0.0.1)"),
    ]:  # fmt: skip
        with pytest.raises(UnsafeDestinationError) as refused:
            check_url(url, OutboundPolicy())
        assert says in refused.value.message


def test_the_allow_list_does_not_reach_through_nat64_or_6to4():
    # The local runtime allows its own loopback receiver; a NAT64 or 6to4 address carrying
    # that address is still refused (the translator, not us, would reach it).
    policy = OutboundPolicy.allowing(["127.0.0.0/8"])
    assert check_url("http://127.0.0.1:9/x", policy).host == "127.0.0.1"
    for url in ("http://[64:ff9b::7f00:1]/", "http://[2002:7f00:1::1]/", "http://[::127.0.0.1]/"):
        with pytest.raises(UnsafeDestinationError):
            check_url(url, policy)


@pytest.fixture
def connects(monkeypatch) -> list[Any]:
    """Every TCP connection the guarded client opens (none may reach a refused address)."""
    opened: list[Any] = []
    real = httpcore.SyncBackend.connect_tcp

    def recording(self: Any, host: str, port: int, *args: Any, **kwargs: Any) -> Any:
        opened.append((host, port))
        return real(self, host, port, *args, **kwargs)

    monkeypatch.setattr(httpcore.SyncBackend, "connect_tcp", recording)
    return opened


def resolving(monkeypatch, name: str, address: str) -> None:
    """`name` resolves to `address` (as the system resolver would answer)."""
    real = socket.getaddrinfo
    family = socket.AF_INET6 if ":" in address else socket.AF_INET

    def answer(host: str, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host == name:
            sockaddr = (address, int(port or 80), 0, 0) if ":" in address else (address, port)
            return [(family, socket.SOCK_STREAM, 6, "", sockaddr)]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", answer)


@pytest.mark.parametrize(
    "address", [a.split("%")[0] for a in WRAPPED_ADDRESSES + GUARDED_ADDRESSES]
)
def test_a_name_resolving_to_such_an_address_is_refused_at_send_without_connecting(
    monkeypatch, connects, address
):
    # Given a webhook URL whose host name resolves, when the call is made, to the address
    resolving(monkeypatch, "hook.example", address)
    endpoint = {"url": "http://hook.example:8080/hook", "secret": SECRET}
    provider = WebhookProvider({"endpoints": {"primary": endpoint}}, timeout=2.0)
    # When it is sent
    outcome = provider.send(an_action())
    # Then it is refused as unsafe_url, and no connection was opened
    assert isinstance(outcome, Rejected), outcome
    assert outcome.code == "unsafe_url"
    assert connects == []
