"""A hostile HTTP server on 127.0.0.1: in front of a real server (influxd) it passes every request through
except those the test answers itself; alone it is a REST endpoint whose answers the test writes. It stands
where a compromised server, a proxy or load balancer in front of the real one, or anyone on the path of a
plain-HTTP or unverified session stands.

An answer is made as it is sent (`Answer.body` is an iterator), so one of 2 GiB is never held in memory,
and `sent` counts the bytes that went out: a client that stops reading early shows there.
"""

from __future__ import annotations

import http.client
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from urllib.parse import urlparse

from tests.infra.http_peer import LocalHTTPServer

_SKIP = {"host", "connection", "content-length", "transfer-encoding"}


@dataclass
class Answer:
    status: int
    body: Iterable[bytes] = ()
    headers: dict[str, str] = field(default_factory=dict)
    length: int | None = None  # Content-Length; None: chunked


#: (method, path, body) -> the test's answer, or None to pass the request through to the upstream
Route = Callable[[str, str, bytes], Answer | None]


class HostileHTTP(LocalHTTPServer):
    def __init__(self, route: Route, upstream: str | None = None):
        self.route = route
        self.upstream = urlparse(upstream) if upstream else None
        self.requests: list[tuple[str, str]] = []
        self.sent = 0
        self._lock = threading.Lock()
        self._listen()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def count(self, method: str, prefix: str) -> int:
        with self._lock:
            return sum(1 for m, p in self.requests if m == method and p.startswith(prefix))

    def _serve(self, h: BaseHTTPRequestHandler, body: bytes) -> None:
        with self._lock:
            self.requests.append((h.command, h.path))
        answer = self.route(h.command, h.path, body)
        if answer is None:
            answer = self._forward(h, body)
        h.send_response(answer.status)
        for k, v in answer.headers.items():
            h.send_header(k, v)
        h.send_header("Content-Length" if answer.length is not None else "Transfer-Encoding",
                      str(answer.length) if answer.length is not None else "chunked")
        h.end_headers()
        try:
            for chunk in answer.body:
                h.wfile.write(chunk if answer.length is not None else b"%x\r\n%s\r\n" % (len(chunk), chunk))
                h.wfile.flush()
                with self._lock:
                    self.sent += len(chunk)
            if answer.length is None:
                h.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):  # the client stopped reading: what we want to see
            h.close_connection = True

    def _forward(self, h: BaseHTTPRequestHandler, body: bytes) -> Answer:
        assert self.upstream is not None, f"no route for {h.command} {h.path}"
        conn = http.client.HTTPConnection(self.upstream.hostname, self.upstream.port, timeout=30)
        try:
            headers = {k: v for k, v in h.headers.items() if k.lower() not in _SKIP}
            conn.request(h.command, h.path, body=body or None, headers=headers)
            r = conn.getresponse()
            data = r.read()
            return Answer(r.status, [data] if data else [], {k: v for k, v in r.getheaders()
                                                              if k.lower() not in _SKIP}, len(data))
        finally:
            conn.close()


def repeated(head: bytes, item: bytes, tail: bytes, size: int) -> tuple[Iterator[bytes], int]:
    """A body of exactly `size` bytes (give or take one item): head, `item` over and over, tail, made in
    1 MiB pieces as it is sent; and its length."""
    per = max(1, 2**20 // len(item))
    n = (size - len(head) - len(tail)) // len(item)
    block = item * per

    def gen() -> Iterator[bytes]:
        yield head
        left = n
        while left >= per:
            yield block
            left -= per
        if left:
            yield item * left
        yield tail

    return gen(), len(head) + n * len(item) + len(tail)


def gzip_of(head: bytes, item: bytes, tail: bytes, size: int) -> bytes:
    """One gzip member that inflates to about `size` bytes of head + item... + tail, made in a second: each
    1 MiB block of items is compressed once after a full flush (so its compressed form repeats byte for byte)
    and the CRC-32 is carried on block by block."""
    per = max(1, 2**20 // len(item))
    block = item * per
    times = (size - len(head) - len(tail)) // len(block)
    z = zlib.compressobj(9, zlib.DEFLATED, -15)
    first = z.compress(head) + z.flush(zlib.Z_FULL_FLUSH)
    again = z.compress(block) + z.flush(zlib.Z_FULL_FLUSH)
    last = z.compress(tail) + z.flush(zlib.Z_FINISH)
    crc, total = zlib.crc32(head), len(head)
    for _ in range(times):  # the whole's CRC-32, without making the whole
        crc = zlib.crc32(block, crc)
        total += len(block)
    crc = zlib.crc32(tail, crc)
    total += len(tail)
    header = b"\x1f\x8b\x08\x00" + int(time.time()).to_bytes(4, "little") + b"\x00\xff"
    trailer = crc.to_bytes(4, "little") + (total % 2**32).to_bytes(4, "little")
    return header + first + again * times + last + trailer
