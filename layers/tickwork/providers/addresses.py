"""Which IP addresses a tenant's URL may make us call: public unicast only, unless the
operator's allow-list (TICKWORK_OUTBOUND_ALLOWED_NETWORKS) names the network.

IPv4: not private, loopback, link-local, shared (100.64/10), reserved, multicast or a
cloud metadata address (the standard library's special-purpose lists, and ours).

IPv6: only global unicast (2000::/3) outside the special-purpose blocks. Of the forms that
carry an IPv4 address, two are judged by it:
- IPv4-mapped `::ffff:a.b.c.d` is that IPv4 address (a dual-stack socket connects to it),
  allow-list included;
- NAT64's well-known prefix `64:ff9b::a.b.c.d` (RFC 6052) must carry a public IPv4
  address: on an IPv6-only network with DNS64 every IPv4-only host is reached through it,
  so refusing the prefix would refuse every such receiver, while `64:ff9b::a9fe:a9fe` is
  the metadata address. The allow-list admits it only when it names the IPv6 address.
The others are refused outright, whatever they carry: they are deprecated or meant for one
operator's network, no public receiver needs them, and where the IPv4 address sits can
depend on local configuration (the local-use NAT64 prefix may be /48 to /96):
IPv4-compatible `::a.b.c.d` (::/96, deprecated by RFC 4291), IPv4-translated
`::ffff:0:a.b.c.d` (SIIT), local-use NAT64 `64:ff9b:1::/48` (RFC 8215), 6to4 `2002::/16`
(deprecated by RFC 7526) and Teredo `2001::/32` (RFC 4380); the refusal names the IPv4
addresses they carry (Teredo's server, and its client XOR 0xffffffff). So are site-local
`fec0::/10` (deprecated), the documentation prefixes, unique-local, link-local and
multicast addresses.

A scope id (`fe80::1%eth0`) is ignored: the address is judged without it. Names and other
spellings of an IPv4 address (`2130706433`, `0x7f.1`, `127.1`, `0`) are resolved by the
system resolver and judged as the addresses they resolve to, when a URL is configured and
again at every connect, on the address connected to.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# Addresses that answer with cloud credentials, named even where a range rule covers them.
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a)
    for a in ("169.254.169.254", "169.254.170.2", "fd00:ec2::254", "100.100.100.200")
)

_V6 = ipaddress.IPv6Network
# NAT64's well-known prefix: judged by the IPv4 address in its last 32 bits.
NAT64 = _V6("64:ff9b::/96")
# IPv6 forms refused whatever they embed (the module's notes say why).
REFUSED_FORMS = (
    (_V6("::ffff:0:0:0/96"), "an IPv4-translated IPv6 address"),
    (_V6("64:ff9b:1::/48"), "a local-use NAT64 address"),
    (_V6("2002::/16"), "a 6to4 address"),
    (_V6("2001::/32"), "a Teredo address"),
    (_V6("fec0::/10"), "a site-local address"),
    (_V6("3fff::/20"), "a documentation address"),
    (_V6("::/96"), "an IPv4-compatible IPv6 address"),
)
GLOBAL_UNICAST = _V6("2000::/3")


def _unscoped(address: IPAddress) -> IPAddress:
    if isinstance(address, ipaddress.IPv6Address) and address.scope_id:
        return ipaddress.IPv6Address(int(address))
    return address


# Forms whose last 32 bits are the IPv4 address they carry.
_LAST_32_BITS = (_V6("::ffff:0:0/96"), _V6("64:ff9b::/96"), _V6("::ffff:0:0:0/96"), _V6("::/96"))


def embedded_ipv4(address: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address carries, in the forms above (for messages)."""
    if address.teredo is not None:
        return list(address.teredo)
    if address.sixtofour is not None:
        return [address.sixtofour]
    if any(address in network for network in _LAST_32_BITS):
        return [ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)]
    return []


def _ipv4_refusal(address: ipaddress.IPv4Address) -> str | None:
    if address in METADATA_ADDRESSES:
        return "a cloud metadata address"
    if address.is_loopback:
        return "a loopback address"
    if address.is_link_local:
        return "a link-local address"
    if address.is_private:
        return "a private address"
    if not address.is_global or address.is_multicast:
        return "not a public address"
    return None


def _ipv6_refusal(address: ipaddress.IPv6Address) -> str | None:
    if address in METADATA_ADDRESSES:
        return "a cloud metadata address"
    if address.is_loopback:
        return "a loopback address"
    if address.is_link_local:
        return "a link-local address"
    if address.is_unspecified:
        return "not a public address"
    for network, name in REFUSED_FORMS:
        if address in network:
            carried = ", ".join(str(v4) for v4 in embedded_ipv4(address))
            return name + (f" (it carries {carried})" if carried else "")
    if address.is_private:
        return "a private address"
    if address not in GLOBAL_UNICAST:
        return "not a global unicast address"
    if not address.is_global:
        return "not a public address"
    return None


def refusal(address: IPAddress, allowed: Iterable[IPNetwork] = ()) -> str | None:
    """Why `address` may not be called, or None when it may: it is public, or in one of
    the operator's `allowed` networks. An IPv4-mapped address is the IPv4 address (the
    socket connects to it); a NAT64 address is allowed when it is listed itself, else
    judged by the public rules for the IPv4 address it carries (the translator, not us,
    would reach that address)."""
    address = _unscoped(address)
    allowed = tuple(allowed)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if any(address in network for network in allowed):
        return None
    if isinstance(address, ipaddress.IPv4Address):
        return _ipv4_refusal(address)
    if address in NAT64:
        carried = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        reason = _ipv4_refusal(carried)
        return None if reason is None else f"{reason} (a NAT64 address carrying {carried})"
    return _ipv6_refusal(address)
