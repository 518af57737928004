"""Which HTTP targets may be called: resolved addresses must be public unless allowlisted."""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import SplitResult, urlsplit

from django.conf import settings

from jobs.errors import InvalidInput

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# IPv6 forms whose traffic ends at an IPv4 address held in their last 32 bits: IPv4-compatible
# (::/96, deprecated) and the NAT64 well-known prefix (RFC 6052). IPv4-mapped addresses
# (::ffff:0:0/96), 6to4 (2002::/16) and Teredo (2001::/32) have ipaddress properties of their own.
IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")
NAT64_WELL_KNOWN = ipaddress.IPv6Network("64:ff9b::/96")
# RFC 8215 local-use NAT64: where the IPv4 address sits depends on the operator's prefix length,
# and it translates only inside one network, so it is never a public destination.
NAT64_LOCAL_USE = ipaddress.IPv6Network("64:ff9b:1::/48")


def split_url(url: str) -> tuple[SplitResult, int | None]:
    """The URL's parts and port; a malformed URL is bad input, not a ValueError.

    urlsplit raises ValueError on a bracketed host that is not an IPv6 address ("[::1",
    "[zz::1]") and ``.port`` on a port that is not a number in 0-65535; port 0 is refused too,
    since nothing can be called there.
    """
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise InvalidInput("target.url", f"is not a valid URL: {exc}") from None
    if port == 0:
        raise InvalidInput("target.url", "port must be between 1 and 65535")
    return parts, port


def _allowlisted(host: str, port: int) -> bool:
    for entry in settings.SCHEDULER["HTTP_ALLOWLIST"]:
        entry_host, _, entry_port = entry.rpartition(":") if ":" in entry else (entry, "", "")
        if entry_host.strip("[]").lower() == host.lower() and (
            not entry_port or entry_port == "*" or entry_port == str(port)
        ):
            return True
    return False


def _embedded_ipv4(address: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address carries (and may be routed to); empty for none."""
    if address.ipv4_mapped is not None:
        return [address.ipv4_mapped]
    if address.teredo is not None:
        return list(address.teredo)  # (server, client)
    if address.sixtofour is not None:
        return [address.sixtofour]
    if address in IPV4_COMPATIBLE or address in NAT64_WELL_KNOWN:
        return [ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)]
    return []


def _is_public(address: IPAddress) -> bool:
    if isinstance(address, ipaddress.IPv6Address):
        if address in NAT64_LOCAL_USE or address.is_site_local:
            return False
        embedded = _embedded_ipv4(address)
        # Every IPv4 address a form hides is judged itself: ::127.0.0.1, ::ffff:10.0.0.1,
        # 64:ff9b::a9fe:a9fe and 2002:7f00:1:: all lead to a private IPv4 destination.
        if not all(_is_public(ipv4) for ipv4 in embedded):
            return False
        if address.ipv4_mapped is not None or address in IPV4_COMPATIBLE:
            # These lead to the embedded IPv4 address, judged public above; the IPv6 range
            # itself says nothing about the destination (is_global calls the mapped range
            # reserved, and the compatible one global, whatever the address inside).
            return True
    return address.is_global and not address.is_multicast


def resolve_allowed(url: str) -> list[tuple[IPAddress, int]]:
    """Resolve the URL's host and return the addresses it may be called at.

    Raises InvalidInput when the scheme needs an allowlist entry or any resolved address is not
    globally routable (loopback, private, link-local such as 169.254.169.254, CGNAT, multicast).
    The caller connects to a returned address, so DNS cannot change between check and use.
    """
    parts, given_port = split_url(url)
    host = parts.hostname or ""
    port = given_port or (443 if parts.scheme == "https" else 80)
    allowed = _allowlisted(host, port)
    if parts.scheme == "http" and not allowed:
        raise InvalidInput("target.url", "plain http is allowed only for allowlisted hosts")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise InvalidInput("target.url", f"host {host!r} does not resolve: {exc}") from None
    addresses: list[tuple[IPAddress, int]] = []
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]).split("%")[0])
        if not allowed and not _is_public(address):
            raise InvalidInput(
                "target.url",
                f"host {host!r} resolves to {address}, which is not a public address",
            )
        addresses.append((address, port))
    if not addresses:
        raise InvalidInput("target.url", f"host {host!r} has no addresses")
    return addresses


def check_url_allowed(url: str) -> None:
    resolve_allowed(url)
