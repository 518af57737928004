"""A resolver for the test process: only this machine's names and names a test registers.

Tests must never ask DNS about an external host: the answer depends on the network the suite
runs on, and a lookup that happens to succeed can hide a bug (an SSRF check passing because
some public name resolved). ``ResolverStub`` replaces ``socket.getaddrinfo``,
``socket.gethostbyname`` and ``socket.gethostbyname_ex`` for the whole session:

- numeric addresses, loopback names (``localhost``, ``*.localhost``), this machine's own
  host name and the hosts named in the configured service URLs go to the real resolver, which
  answers them from the hosts file without the network;
- a name a test registered (``fake_dns`` fixture) answers with the addresses given;
- a name under ``.invalid`` (RFC 6761: never resolves) fails as an unknown name would;
- any other name fails with ``ExternalLookupRefused``, a ``socket.gaierror`` naming the host,
  so code under test takes its ordinary "does not resolve" path, and the lookup is recorded so
  the test itself fails afterwards (``refused``), even if that code swallowed the error.

Celery worker subprocesses run their own interpreter and are not affected; PostgreSQL (libpq)
and Unix-socket Redis connections never call these functions.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterable
from typing import Any

LOOPBACK_NAMES = frozenset(
    {"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback", "testserver"}
)

AddrInfo = tuple[Any, Any, int, str, tuple[Any, ...]]


class ExternalLookupRefused(socket.gaierror):
    """A test tried to resolve a host name outside this machine."""

    def __init__(self, host: str) -> None:
        super().__init__(
            socket.EAI_NONAME,
            f"tests must not resolve external host {host!r}; register a fake address for it "
            "with the fake_dns fixture, or use a name under .invalid",
        )
        self.host = host


def _is_numeric(host: str) -> bool:
    """An address literal, including the legacy IPv4 spellings the C resolver also reads as
    numbers ("127.1", "0x7f.1", "2130706433"): those never reach DNS."""
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        pass
    else:
        return True
    try:
        socket.inet_aton(host)
    except (OSError, ValueError):
        return False
    return True


def _name(host: Any) -> str | None:
    if host is None:
        return None
    if isinstance(host, bytes | bytearray):
        return bytes(host).decode("ascii", "replace")
    return str(host)


class ResolverStub:
    def __init__(self, *, local_names: Iterable[str] = ()) -> None:
        self._real_getaddrinfo: Callable[..., list[AddrInfo]] = socket.getaddrinfo
        self._real_gethostbyname: Callable[[str], str] = socket.gethostbyname
        self._real_gethostbyname_ex: Callable[[str], Any] = socket.gethostbyname_ex
        self._local = {name.lower().rstrip(".") for name in local_names if name}
        self._local.add(socket.gethostname().lower())
        self._fake: dict[str, list[str]] = {}
        self._any: list[str] = []
        self.refused: list[str] = []

    # -- what tests call -------------------------------------------------------------------

    def register(self, host: str, *addresses: str) -> None:
        """Make ``host`` resolve to ``addresses`` (numeric) until ``forget_all``."""
        for address in addresses:
            ipaddress.ip_address(address)  # a typo in a test must not become a lookup
        self._fake[host.lower().rstrip(".")] = list(addresses)

    def register_any(self, *addresses: str) -> None:
        """Answer every name not otherwise known with ``addresses`` (for generated hosts)."""
        for address in addresses:
            ipaddress.ip_address(address)
        self._any = list(addresses)

    def forget_all(self) -> None:
        self._fake.clear()
        self._any = []

    def take_refused(self) -> list[str]:
        refused, self.refused = self.refused, []
        return refused

    # -- the decision ----------------------------------------------------------------------

    def _route(self, host: str) -> list[str] | None:
        """Registered addresses, or None for "ask the real resolver"; raises when refused."""
        key = host.lower().rstrip(".")
        if key in self._fake:
            return self._fake[key]
        if (
            _is_numeric(host)
            or key in LOOPBACK_NAMES
            or key.endswith(".localhost")
            or key in self._local
        ):
            return None
        if key.endswith(".invalid") or key == "invalid":
            raise socket.gaierror(socket.EAI_NONAME, f"{host!r} is under .invalid")
        if self._any:
            return self._any
        self.refused.append(host)
        raise ExternalLookupRefused(host)

    # -- the socket functions --------------------------------------------------------------

    def getaddrinfo(
        self, host: Any, port: Any, family: int = 0, type: int = 0, proto: int = 0, flags: int = 0
    ) -> list[AddrInfo]:
        name = _name(host)
        if name is None or name == "":
            return self._real_getaddrinfo(host, port, family, type, proto, flags)
        if _is_numeric(name):
            # AI_NUMERICHOST: the real resolver parses the literal and never asks DNS.
            return self._real_getaddrinfo(
                host, port, family, type, proto, flags | socket.AI_NUMERICHOST
            )
        addresses = self._route(name)
        if addresses is None:
            return self._real_getaddrinfo(host, port, family, type, proto, flags)
        infos: list[AddrInfo] = []
        for address in addresses:
            # A numeric address resolves without the network; this keeps every field (family,
            # socket type, the IPv6 four-tuple) exactly what the real resolver returns.
            infos.extend(
                self._real_getaddrinfo(
                    address, port, family, type, proto, flags | socket.AI_NUMERICHOST
                )
            )
        if not infos:
            raise socket.gaierror(socket.EAI_NONAME, f"{name!r} has no address of that family")
        return infos

    def gethostbyname(self, host: str) -> str:
        addresses = self._route(host)
        if addresses is None:
            return self._real_gethostbyname(host)
        ipv4 = [a for a in addresses if ipaddress.ip_address(a).version == 4]
        if not ipv4:
            raise socket.gaierror(socket.EAI_NONAME, f"{host!r} has no IPv4 address")
        return ipv4[0]

    def gethostbyname_ex(self, host: str) -> tuple[str, list[str], list[str]]:
        addresses = self._route(host)
        if addresses is None:
            result: tuple[str, list[str], list[str]] = self._real_gethostbyname_ex(host)
            return result
        ipv4 = [a for a in addresses if ipaddress.ip_address(a).version == 4]
        return host, [], ipv4

    def install(self) -> Callable[[], None]:
        """Patch the socket module; returns the function that puts the real one back."""
        socket.getaddrinfo = self.getaddrinfo
        socket.gethostbyname = self.gethostbyname
        socket.gethostbyname_ex = self.gethostbyname_ex

        def uninstall() -> None:
            socket.getaddrinfo = self._real_getaddrinfo
            socket.gethostbyname = self._real_gethostbyname
            socket.gethostbyname_ex = self._real_gethostbyname_ex

        return uninstall
