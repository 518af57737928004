"""The end-to-end scenario's HTTP target: answers every POST after a fixed delay and appends
the firing it carries to a ledger, so duplicates and misses are counted where the effect lands.

Runs as its own process (``python -m bench.compare.http_target LEDGER DELAY_S``) so that a
thousand requests a second do not compete with the harness for one interpreter. It listens on
127.0.0.1 only, on a free port it prints as its first line, and stops on SIGTERM. ``GET
/count`` answers how many requests and distinct firings it has recorded, for the harness's
wait loop; the ledger,
read after the run, is what the figures come from (bench.compare.e2e_count).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import TextIO

from bench import ledger_http
from bench.compare.e2e_count import ledger_line

# Ledger lines are buffered and written at most this often, so a request costs a list append,
# not a write system call.
FLUSH_S = 0.25


class LedgerServer(ThreadingHTTPServer):
    daemon_threads = True
    # The default backlog of 5 refuses connections under bursts of a few hundred a second,
    # which would count as target failures.
    request_queue_size = 1024

    def __init__(self, ledger: TextIO, delay_s: float) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.ledger = ledger
        self.delay_s = delay_s
        self.lock = threading.Lock()
        self.requests = 0
        self.firings: set[str] = set()
        self._lines: list[str] = []
        self._flushed_at = time.monotonic()

    def record(self, firing: str) -> None:
        line = ledger_line(firing, time.time())
        with self.lock:
            self.requests += 1
            self.firings.add(firing)
            self._lines.append(line + "\n")
            if time.monotonic() - self._flushed_at >= FLUSH_S:
                self._flush_locked()

    def flush(self) -> None:
        with self.lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        if not self.ledger.closed:
            self.ledger.writelines(self._lines)
            self.ledger.flush()
        self._lines.clear()
        self._flushed_at = time.monotonic()


def firing_of(body: bytes) -> str:
    """The firing a request carries: ``{"firing": NAME}``, ours as the job's payload, the
    peer's as its task's body; anything else is recorded as unreadable."""
    try:
        value = json.loads(body)
    except ValueError:
        return ""
    return str(value.get("firing", "")) if isinstance(value, dict) else ""


class Handler(ledger_http.JsonAnswers):
    server: LedgerServer
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        time.sleep(self.server.delay_s)
        # The effect is the ledger line: recorded before the answer, as a real target would
        # commit its work before replying.
        self.server.record(firing_of(body))
        self.answer(200, b"{}")

    def do_GET(self) -> None:
        if self.path != "/count":
            self.send_error(404)
            return
        with self.server.lock:
            counts = {"requests": self.server.requests, "firings": len(self.server.firings)}
        self.answer(200, json.dumps(counts).encode())


def main(argv: list[str]) -> int:
    with Path(argv[0]).open("a", encoding="utf-8") as ledger:
        return serve(LedgerServer(ledger, float(argv[1])))


def serve(server: LedgerServer) -> int:
    return ledger_http.serve(server, close=server.flush)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
