"""Which HTTP targets may be called: resolved addresses must be public unless allowlisted."""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

from django.conf import settings

from jobs.errors import InvalidInput

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def _allowlisted(host: str, port: int) -> bool:
    for entry in settings.SCHEDULER["HTTP_ALLOWLIST"]:
        entry_host, _, entry_port = entry.rpartition(":") if ":" in entry else (entry, "", "")
        if entry_host.strip("[]").lower() == host.lower() and (
            not entry_port or entry_port == "*" or entry_port == str(port)
        ):
            return True
    return False


def _is_public(address: IPAddress) -> bool:
    if isinstance(address, ipaddress.IPv6Address):
        # IPv4-mapped, 6to4 and NAT64 forms hide an IPv4 address that must be judged itself.
        if address.ipv4_mapped is not None:
            return _is_public(address.ipv4_mapped)
        if address in ipaddress.ip_network("64:ff9b::/96"):
            return _is_public(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
        if address.sixtofour is not None:
            return _is_public(address.sixtofour)
    return address.is_global and not address.is_multicast


def resolve_allowed(url: str) -> list[tuple[IPAddress, int]]:
    """Resolve the URL's host and return the addresses it may be called at.

    Raises InvalidInput when the scheme needs an allowlist entry or any resolved address is not
    globally routable (loopback, private, link-local such as 169.254.169.254, CGNAT, multicast).
    The caller connects to a returned address, so DNS cannot change between check and use.
    """
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
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
