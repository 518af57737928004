"""The soak's HTTP target: answers by path and appends every request to its own ledger.

Runs as its own process (``python -m bench.soak.target LEDGER``) so that a few hundred
requests a second do not compete with the harness for one interpreter. It listens on
127.0.0.1 only, on a free port it prints as its first line, and stops on SIGTERM.
"""

from __future__ import annotations

import sys
import threading
import time
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import TextIO

from bench import ledger_http
from bench.soak.ledger import ledger_line
from bench.soak.workload import SLOW_S


class LedgerServer(ThreadingHTTPServer):
    daemon_threads = True
    # The default backlog of 5 refuses connections under bursts of a few hundred a second,
    # which the workers would count as target failures.
    request_queue_size = 512

    def __init__(self, ledger: TextIO) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.ledger = ledger
        self.lock = threading.Lock()

    def record(self, headers: dict[str, str], status: int) -> None:
        line = ledger_line(headers, status, time.time())
        with self.lock:
            if not self.ledger.closed:
                self.ledger.write(line + "\n")


def status_for(path: str, attempt: int) -> int:
    if path == "/flaky":
        return 503 if attempt <= 1 else 200
    if path == "/fail":
        return 500
    return 200 if path in ("/ok", "/slow") else 404


class Handler(ledger_http.JsonAnswers):
    server: LedgerServer
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        headers = dict(self.headers.items())
        status = status_for(self.path, int(headers.get("X-Scheduler-Attempt") or 0))
        if self.path == "/slow":
            time.sleep(SLOW_S)
        # The effect is the ledger line: written before the answer, as a real target would
        # commit its work before replying.
        self.server.record(headers, status)
        self.answer(status, b"{}")


def main(argv: list[str]) -> int:
    with Path(argv[0]).open("a", buffering=1) as ledger:
        return serve(LedgerServer(ledger))


def serve(server: LedgerServer) -> int:
    def close() -> None:
        with server.lock:
            server.ledger.close()

    return ledger_http.serve(server, close=close)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
