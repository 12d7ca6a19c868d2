"""A hostile vCenter: a small HTTP server in front of the vSphere simulator that passes every SOAP
call through, except those the test turns bad. It stands where a compromised vCenter, or anyone on
the path of a plain-HTTP or unverified session, stands.

`faults` maps a SOAP method (as it appears in the request body, e.g. "QueryPerf"), or the end of a GET's path
("vimServiceVersions.xml"), to one of:
- "bomb": a gzip'd answer that inflates to 512 MiB (0.5 MB on the wire);
- "doctype": the real answer with a DOCTYPE declaring entities put before its root;
- "year9999": the real answer with every timestamp in it moved to 9999-12-31;
- "ahead6h": the real answer with every timestamp in it moved 6 hours ahead (within the agent's default
  `max_clock_skew` of a day);
- "trickle": the real answer, its length announced, sent a byte a second (TRICKLE_S) for as long as the fault
  stays set (no single read waits long enough for a socket timeout); the rest at once when it is cleared;
- "503": HTTP 503 Service Unavailable, as vCenter's reverse proxy answers while a service is down.

`clock_s` is this vCenter's clock minus the real one (0: right): its CurrentTime answers and the times in
its QueryPerf answers are moved by it, and the times a QueryPerf request names moved back, as a vCenter
(and its hosts) whose clock is that far off answers. Setting it back to 0 is NTP stepping that clock back.

With `cert`/`key` (PEM files) it speaks TLS with that certificate, as a host with a certificate of its own
(`present()` changes it for the connections made after).
`destroy_own_objects()` ends, in the client's own session, the container view and property collector the
client made last (the simulator then answers ManagedObjectNotFound for them, as vCenter does once a
session's objects are gone while the client still uses them).
"""

from __future__ import annotations

import functools
import http.client
import re
import ssl
import time
import zlib
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler
from urllib.parse import urlparse

from tests.infra.http_peer import LocalHTTPServer

_STAMP = re.compile(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)")
_DECL = re.compile(rb"^(\s*<\?xml[^>]*\?>)?")
DOCTYPE = b'<!DOCTYPE e [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">]>'
_RETURNVAL = re.compile(rb"<returnval[^>]*>([^<]+)</returnval>")
_SKIP = {"host", "accept-encoding", "connection", "content-length", "transfer-encoding"}
TRICKLE_S = 1.0


def shifted(data: bytes, seconds: float) -> bytes:
    """`data` with every timestamp in it moved by `seconds`, written in UTC."""
    def move(m: re.Match) -> bytes:
        t = datetime.fromisoformat(m.group().decode().replace("Z", "+00:00")) + timedelta(seconds=seconds)
        return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ" if b"." in m.group() else
                                          "%Y-%m-%dT%H:%M:%SZ").encode()
    return _STAMP.sub(move, data)


@functools.cache  # 4 s of one core to compress: made once, and only for a test that serves it
def gzip_bomb(mib: int = 512) -> bytes:
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = b"A" * 2**20
    head = (b'<?xml version="1.0" encoding="UTF-8"?><soapenv:Envelope xmlns:soapenv='
            b'"http://schemas.xmlsoap.org/soap/envelope/"><soapenv:Body><x>')
    parts = [z.compress(head), *(z.compress(block) for _ in range(mib))]
    parts.append(z.compress(b"</x></soapenv:Body></soapenv:Envelope>") + z.flush())
    return b"".join(parts)


class HostileVCenter(LocalHTTPServer):
    def __init__(self, upstream: str, cert: str | None = None, key: str | None = None):
        u = urlparse(upstream)
        self.upstream = (u.hostname or "127.0.0.1", u.port or 443)
        self.faults: dict[str, str] = {}
        self.clock_s = 0.0
        self.hits: dict[str, int] = {}
        self.cookie = ""  # the client's session cookie, as it last sent it
        self.made: dict[str, str] = {}  # "CreateContainerView" / "CreatePropertyCollector" -> the moid it answered
        self._listen()
        scheme = "http"
        self.tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        if cert:
            self.present(cert, key)
            self.server.socket = self.tls.wrap_socket(self.server.socket, server_side=True)
            scheme = "https"
        self.url = f"{scheme}://127.0.0.1:{self.server.server_address[1]}/sdk"

    def _serve(self, h: BaseHTTPRequestHandler, body: bytes) -> None:
        method = h.command
        self.cookie = h.headers.get("Cookie") or self.cookie
        fault = next(((name, how) for name, how in self.faults.items()
                      if f"<{name}".encode() in body or (method == "GET" and h.path.endswith(name))), None)
        if fault is not None:
            self.hits[fault[0]] = self.hits.get(fault[0], 0) + 1
        clocked = self.clock_s and (b"<CurrentTime" in body or b"<QueryPerf" in body)
        if fault and fault[1] == "bomb":
            status, headers, data = 200, [("Content-Encoding", "gzip")], gzip_bomb()
        elif fault and fault[1] == "503":
            status, headers, data = 503, [], b""
        else:
            status, headers, data = self._forward(h, method, shifted(body, -self.clock_s) if clocked else body)
            if clocked:
                data = shifted(data, self.clock_s)
            for made in ("CreateContainerView", "CreatePropertyCollector"):
                if f"<{made}".encode() in body and (m := _RETURNVAL.search(data)):
                    self.made[made] = m.group(1).decode()
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

    def present(self, cert: str, key: str | None) -> None:
        """The certificate new TLS connections are given from now on."""
        self.tls.load_cert_chain(cert, key)

    def destroy_own_objects(self) -> None:
        for method, kind, moid in (("DestroyView", "ContainerView", self.made["CreateContainerView"]),
                                   ("DestroyPropertyCollector", "PropertyCollector",
                                    self.made["CreatePropertyCollector"])):
            body = (f'<?xml version="1.0" encoding="UTF-8"?><soapenv:Envelope xmlns:soapenv="http://schemas.xmlsoap'
                    f'.org/soap/envelope/"><soapenv:Body><{method} xmlns="urn:vim25"><_this type="{kind}">{moid}'
                    f"</_this></{method}></soapenv:Body></soapenv:Envelope>").encode()
            status, _, data = self._send("POST", "/sdk", body, {"Cookie": self.cookie, "SOAPAction": "urn:vim25",
                                                                 "Content-Type": "text/xml; charset=utf-8"})
            assert status == 200, data[-500:]

    def _forward(self, h: BaseHTTPRequestHandler, method: str, body: bytes) -> tuple[int, list, bytes]:
        return self._send(method, h.path, body, {k: v for k, v in h.headers.items() if k.lower() not in _SKIP})

    def _send(self, method: str, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, list, bytes]:
        conn = http.client.HTTPSConnection(*self.upstream, context=ssl._create_unverified_context(), timeout=60)
        try:
            conn.request(method, path, body or None, headers)
            resp = conn.getresponse()
            data = resp.read()
            cookies = [("Set-Cookie", v) for k, v in resp.getheaders() if k.lower() == "set-cookie"]
            return resp.status, cookies, data
        finally:
            conn.close()
