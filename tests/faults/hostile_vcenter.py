"""A hostile vCenter: a small HTTP server in front of the vSphere simulator that passes every SOAP
call through, except those the test turns bad. It stands where a compromised vCenter, or anyone on
the path of a plain-HTTP or unverified session, stands.

`faults` maps a SOAP method (as it appears in the request body, e.g. "QueryPerf") to one of:
- "bomb": a gzip'd answer that inflates to 512 MiB (0.5 MB on the wire);
- "doctype": the real answer with a DOCTYPE declaring entities put before its root;
- "year9999": the real answer with every timestamp in it moved to 9999-12-31;
- "ahead6h": the real answer with every timestamp in it moved 6 hours ahead (within the agent's default
  `max_clock_skew` of a day);
- "trickle": the real answer, its length announced, sent a byte a second (TRICKLE_S) for as long as the fault
  stays set (no single read waits long enough for a socket timeout); the rest at once when it is cleared.

`clock_s` is this vCenter's clock minus the real one (0: right): its CurrentTime answers and the times in
its QueryPerf answers are moved by it, and the times a QueryPerf request names moved back, as a vCenter
(and its hosts) whose clock is that far off answers. Setting it back to 0 is NTP stepping that clock back.
"""

from __future__ import annotations

import http.client
import re
import ssl
import threading
import time
import zlib
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

_STAMP = re.compile(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)")
_DECL = re.compile(rb"^(\s*<\?xml[^>]*\?>)?")
DOCTYPE = b'<!DOCTYPE e [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">]>'
_SKIP = {"host", "accept-encoding", "connection", "content-length", "transfer-encoding"}
TRICKLE_S = 1.0


def shifted(data: bytes, seconds: float) -> bytes:
    """`data` with every timestamp in it moved by `seconds`, written in UTC."""
    def move(m: re.Match) -> bytes:
        t = datetime.fromisoformat(m.group().decode().replace("Z", "+00:00")) + timedelta(seconds=seconds)
        return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ" if b"." in m.group() else
                                          "%Y-%m-%dT%H:%M:%SZ").encode()
    return _STAMP.sub(move, data)


def gzip_bomb(mib: int = 512) -> bytes:
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = b"A" * 2**20
    head = (b'<?xml version="1.0" encoding="UTF-8"?><soapenv:Envelope xmlns:soapenv='
            b'"http://schemas.xmlsoap.org/soap/envelope/"><soapenv:Body><x>')
    parts = [z.compress(head), *(z.compress(block) for _ in range(mib))]
    parts.append(z.compress(b"</x></soapenv:Body></soapenv:Envelope>") + z.flush())
    return b"".join(parts)


class HostileVCenter:
    def __init__(self, upstream: str):
        u = urlparse(upstream)
        self.upstream = (u.hostname or "127.0.0.1", u.port or 443)
        self.faults: dict[str, str] = {}
        self.clock_s = 0.0
        self.hits: dict[str, int] = {}
        self._bomb = gzip_bomb()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                proxy._serve(self, "GET", b"")

            def do_POST(self) -> None:
                proxy._serve(self, "POST", self.rfile.read(int(self.headers.get("Content-Length") or 0)))

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/sdk"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> HostileVCenter:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _serve(self, h: BaseHTTPRequestHandler, method: str, body: bytes) -> None:
        fault = next(((name, how) for name, how in self.faults.items() if f"<{name}".encode() in body), None)
        if fault is not None:
            self.hits[fault[0]] = self.hits.get(fault[0], 0) + 1
        clocked = self.clock_s and (b"<CurrentTime" in body or b"<QueryPerf" in body)
        if fault and fault[1] == "bomb":
            status, headers, data = 200, [("Content-Encoding", "gzip")], self._bomb
        else:
            status, headers, data = self._forward(h, method, shifted(body, -self.clock_s) if clocked else body)
            if clocked:
                data = shifted(data, self.clock_s)
            if fault and fault[1] == "doctype":
                data = _DECL.sub(lambda m: (m.group(1) or b"") + DOCTYPE, data, count=1)
            elif fault and fault[1] == "year9999":
                data = _STAMP.sub(b"9999-12-31T23:59:40Z", data)
            elif fault and fault[1] == "ahead6h":
                data = shifted(data, 6 * 3600)
        h.send_response(status)
        for k, v in headers:
            h.send_header(k, v)
        h.send_header("Content-Type", "text/xml; charset=utf-8")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        if fault and fault[1] == "trickle":
            self._trickle(h, fault[0], data)
        else:
            h.wfile.write(data)

    def _trickle(self, h: BaseHTTPRequestHandler, method: str, data: bytes) -> None:
        try:
            while data and self.faults.get(method) == "trickle":
                h.wfile.write(data[:1])
                h.wfile.flush()
                data = data[1:]
                time.sleep(TRICKLE_S)
            h.wfile.write(data)
        except OSError:  # the client gave up and closed the connection
            h.close_connection = True

    def _forward(self, h: BaseHTTPRequestHandler, method: str, body: bytes) -> tuple[int, list, bytes]:
        conn = http.client.HTTPSConnection(*self.upstream, context=ssl._create_unverified_context(), timeout=60)
        try:
            conn.request(method, h.path, body or None,
                         {k: v for k, v in h.headers.items() if k.lower() not in _SKIP})
            resp = conn.getresponse()
            data = resp.read()
            cookies = [("Set-Cookie", v) for k, v in resp.getheaders() if k.lower() == "set-cookie"]
            return resp.status, cookies, data
        finally:
            conn.close()
