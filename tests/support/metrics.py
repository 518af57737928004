"""Reading Prometheus metrics the way Prometheus does: scrape a process's endpoint and parse it."""

from __future__ import annotations

import socket
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def parse(text: str) -> Samples:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def scrape(url: str) -> Samples:
    with urllib.request.urlopen(url, timeout=10) as response:
        return parse(response.read().decode())


def value(samples: Samples, name: str, **labels: str) -> float:
    """A sample's value; 0 for a series not exported yet (a counter nobody bumped)."""
    return samples.get((name, frozenset(labels.items())), 0.0)
