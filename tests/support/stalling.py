"""A server on a Unix socket that accepts connections, reads what it is sent and never
answers: a broker that hangs, for tests that must not wait on one."""

from __future__ import annotations

import selectors
import socket
import tempfile
import threading
from pathlib import Path


class StallingServer:
    def __init__(self) -> None:
        self.path = Path(tempfile.mkdtemp(prefix="stall-")) / "s.sock"
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(self.path))
        self._listener.listen(64)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="stalling-server", daemon=True)
        self.connections = 0

    @property
    def redis_url(self) -> str:
        return f"redis+socket://{self.path}"

    def __enter__(self) -> StallingServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        # Closing every connection ends the clients' waits with an error.
        self._stop.set()
        self._thread.join(timeout=5)
        self.path.unlink(missing_ok=True)
        self.path.parent.rmdir()

    def _serve(self) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(self._listener, selectors.EVENT_READ)
            clients: list[socket.socket] = []
            while not self._stop.is_set():
                for key, _ in selector.select(timeout=0.1):
                    sock = key.fileobj
                    assert isinstance(sock, socket.socket)
                    if sock is self._listener:
                        client, _addr = self._listener.accept()
                        self.connections += 1
                        clients.append(client)
                        selector.register(client, selectors.EVENT_READ)
                    elif not sock.recv(65536):  # read and drop; never reply
                        selector.unregister(sock)
                        sock.close()
                        clients.remove(sock)
            for client in clients:
                client.close()
            self._listener.close()
