"""The SSRF policy's address judgement: every spelling of a non-public address is refused."""

from __future__ import annotations

import ipaddress

import pytest

from jobs.errors import InvalidInput
from jobs.http_policy import _is_public, split_url

REFUSED = [
    "127.0.0.1",
    "10.1.2.3",
    "169.254.169.254",
    "100.64.0.1",
    "224.0.0.1",
    "::1",
    "::",
    "fe80::1",
    "fc00::1",
    "fec0::1",
    "ff02::1",
    "::ffff:127.0.0.1",
    "::ffff:169.254.169.254",
    "::127.0.0.1",
    "::169.254.169.254",
    "::10.0.0.1",
    "64:ff9b::7f00:1",
    "64:ff9b::a9fe:a9fe",
    "64:ff9b:1::5db8:d822",  # local-use NAT64, even around a public address
    "2002:7f00:1::1",
    "2002:a9fe:a9fe::",
    "2001:0:4136:e378:8000:63bf:80ff:fffe",  # Teredo, client 127.0.0.1
    "2001:0:a00:1:8000:63bf:a25b:2dcb",  # Teredo, server 10.0.0.1
]
PUBLIC = [
    "93.184.216.34",
    "2606:2800:220:1:248:1893:25c8:1946",
    "::ffff:93.184.216.34",
    "64:ff9b::5db8:d822",
    "2002:5db8:d822::1",
]


@pytest.mark.parametrize("address", REFUSED)
def test_non_public_addresses_and_their_ipv6_spellings_are_refused(address: str) -> None:
    assert not _is_public(ipaddress.ip_address(address))


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_and_their_ipv6_spellings_are_allowed(address: str) -> None:
    assert _is_public(ipaddress.ip_address(address))


@pytest.mark.parametrize(
    "url",
    [
        "https://127.0.0.1:99999/",
        "https://[::1",
        "https://[zz::1]/",
        "https://h:abc/",
        "https://h:-1/",
        "https://h:0/",
    ],
)
def test_malformed_urls_are_invalid_input_on_target_url(url: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        split_url(url)
    assert caught.value.field == "target.url"


def test_a_well_formed_url_keeps_its_port() -> None:
    parts, port = split_url("https://[2606:2800:220:1::1]:8443/x?y=1")
    assert (parts.hostname, port) == ("2606:2800:220:1::1", 8443)
