"""What stands between the agent and vCenter on real networks, as small TCP peers on 127.0.0.1.

- IdleClosingRelay: passes bytes both ways, and closes a connection nothing crossed for `idle_s` seconds,
  as vCenter's reverse proxy (and many load balancers) close idle keep-alive connections. Nothing is said to
  the client: it finds out when it next sends on the connection.
- ConnectProxy: an HTTP CONNECT proxy (what HTTPS_PROXY names), tunnelling to the host and port asked for.
  `hosts` maps a name only the proxy can resolve to an address, so a client that reaches that name at all
  went through the proxy. `tunnels` lists every target asked for, in order.
"""

from __future__ import annotations

import select
import socket
import threading
import time


def _pump(a: socket.socket, b: socket.socket, idle_s: float | None) -> None:
    """Bytes both ways until either side closes, or (with idle_s) nothing crossed for that long."""
    last = time.monotonic()
    try:
        while True:
            ready, _, _ = select.select([a, b], [], [], 0.2)
            if not ready:
                if idle_s is not None and time.monotonic() - last >= idle_s:
                    return
                continue
            for src in ready:
                data = src.recv(65536)
                if not data:
                    return
                (b if src is a else a).sendall(data)
            last = time.monotonic()
    except OSError:
        return
    finally:
        for s in (a, b):
            s.close()


class _Listener:
    """A thread accepting connections on 127.0.0.1, one thread per connection (`serve`)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.serve, args=(client,), daemon=True).start()

    def serve(self, client: socket.socket) -> None:  # pragma: no cover - overridden
        raise NotImplementedError


class IdleClosingRelay(_Listener):
    def __init__(self, upstream: tuple[str, int], idle_s: float):
        super().__init__()
        self.upstream, self.idle_s = upstream, idle_s
        self.connections = 0

    def serve(self, client: socket.socket) -> None:
        self.connections += 1
        try:
            server = socket.create_connection(self.upstream, timeout=10)
        except OSError:
            client.close()
            return
        _pump(client, server, self.idle_s)


class ConnectProxy(_Listener):
    def __init__(self, hosts: dict[str, str] | None = None):
        super().__init__()
        self.hosts = hosts or {}
        self.tunnels: list[str] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def serve(self, client: socket.socket) -> None:
        head = b""
        while b"\r\n\r\n" not in head and len(head) < 16384:
            chunk = client.recv(4096)
            if not chunk:
                client.close()
                return
            head += chunk
        method, target, _ = (head.split(b"\r\n", 1)[0].decode("latin-1") + "  ").split(" ", 2)
        if method != "CONNECT":
            client.sendall(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
            client.close()
            return
        self.tunnels.append(target)
        host, _, port = target.rpartition(":")
        try:
            server = socket.create_connection((self.hosts.get(host, host), int(port)), timeout=10)
        except (OSError, ValueError):
            client.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
            client.close()
            return
        client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        _pump(client, server, None)
