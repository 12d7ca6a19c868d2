"""The plumbing every HTTP test peer shares: a server on 127.0.0.1 that hands each GET and POST, its body read, to
the peer's `_serve`, served from a daemon thread while the peer is used in `with`, shut down and closed after."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self


class LocalHTTPServer:
    server: ThreadingHTTPServer
    _thread: threading.Thread

    def _serve(self, h: BaseHTTPRequestHandler, body: bytes) -> None:
        """Answer the request `h` (its method `h.command`), whose body is `body`."""
        raise NotImplementedError

    def _listen(self) -> None:
        """Bound at once (its port known, its socket free to wrap in TLS); served from `with` on."""
        peer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _request(self) -> None:
                peer._serve(self, self.rfile.read(int(self.headers.get("Content-Length") or 0)))

            do_GET = do_POST = _request  # noqa: N815 - http.server's naming

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(5)
