"""The plumbing every HTTP test peer shares: a server on 127.0.0.1, served from a daemon thread while the peer is
used in `with`, shut down and closed after."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self


class LocalHTTPServer:
    server: ThreadingHTTPServer
    _thread: threading.Thread

    def _listen(self, handler: type[BaseHTTPRequestHandler]) -> None:
        """Bound at once (its port known, its socket free to wrap in TLS); served from `with` on."""
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(5)
