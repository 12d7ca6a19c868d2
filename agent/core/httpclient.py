"""Calls to an HTTP(S) server outside (an array's REST API, InfluxDB): one keep-alive connection,
every call under one deadline, every answer bounded.

- **Time.** A call's deadline (agent/core/deadline.py) covers connect, TLS, request and every byte
  of the answer; when it passes the socket is shut down from outside and the call raises
  `CallTimeoutError`. A server that trickles its answer holds a call no longer than that.
- **Size.** An answer's body is counted as it arrives, once inflated (gzip/deflate, whether asked
  for or not): one byte past `max_bytes` ends the call with `AnswerTooLargeError`, never in memory.
- **Headers.** http.client bounds their number and length; the one header whose number is acted on,
  Retry-After, is read by `retry_after`, which gives a finite delay within bounds whatever it says.

Errors are `CallError`s whose text names the server, the method and path (never the query, which
can hold names, nor a header, which can hold a token) and what went wrong.
"""

from __future__ import annotations

import email.utils
import http.client
import math
import socket
import ssl
import threading
import time
import zlib
from dataclasses import dataclass
from datetime import UTC
from urllib.parse import urlparse

from db2vtop.agent.core.deadline import Deadline, DeadlineError, deadline

#: an answer's bound unless its section says otherwise (`max_response_bytes`), as for vCenter
MAX_ANSWER_BYTES = 64 * 2**20
_CHUNK = 64 * 1024
#: a kept-alive connection the server closed while idle fails on its next use: that call is tried once
#: more on a new connection
_STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)


class CallError(Exception):
    """A call that brought back no usable answer; the text says where and why."""


class CallTimeoutError(CallError):
    pass


class AnswerTooLargeError(CallError):
    pass


class UntrustedError(CallError):
    """The server's TLS certificate was not trusted."""

    def __init__(self, where: str, why: str):
        super().__init__(f"{where}: TLS certificate not trusted ({why})")
        self.where, self.why = where, why


@dataclass
class Answer:
    status: int
    reason: str
    headers: http.client.HTTPMessage
    body: bytearray

    def header(self, name: str) -> str:
        return self.headers.get(name) or ""

    def text(self, limit: int = 500) -> str:
        """The start of the body as text (for an error message; the caller escapes it)."""
        return bytes(self.body[:limit]).decode("utf-8", "replace").strip()


def retry_after(value: str | None, max_delay: float) -> float:
    """The delay a Retry-After header asks for, in seconds within [0, max_delay]: delay-seconds or an
    HTTP-date (RFC 9110 10.2.3). Infinity means max_delay; NaN, garbage or a date past means 0 (the
    caller's own backoff applies)."""
    text = (value or "").strip()[:64]
    if not text:
        return 0.0
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
            if when.tzinfo is None:  # "-0000": UTC, as RFC 5322 reads it
                when = when.replace(tzinfo=UTC)
            seconds = when.timestamp() - time.time()
        except (TypeError, ValueError, IndexError, OverflowError):
            return 0.0
    if math.isnan(seconds):
        return 0.0
    return min(max(seconds, 0.0), max_delay)


class HttpClient:
    """One server; thread-safe (one call at a time on its one connection)."""

    def __init__(self, url: str, *, timeout: float, max_bytes: int = MAX_ANSWER_BYTES,
                 tls: ssl.SSLContext | None = None):
        u = urlparse(url)
        self.https = u.scheme == "https"
        self.host = u.hostname or ""
        self.port = u.port or (443 if self.https else 80)
        self.prefix = u.path.rstrip("/")
        self.where = f"{u.scheme}://{u.netloc}"
        self.timeout, self.max_bytes = timeout, max_bytes
        self.tls = tls if self.https else None
        if self.https and self.tls is None:
            self.tls = ssl.create_default_context()
        self._conn: http.client.HTTPConnection | None = None
        self._lock = threading.Lock()

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def request(self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None,
                *, timeout: float | None = None) -> Answer:
        """`method` on the URL's path + `path`, within `timeout` (default: the client's) for the whole call."""
        what = f"{self.where}: {method} {path.split('?')[0]}"
        with self._lock:
            try:
                with deadline(self.timeout if timeout is None else timeout, what) as d:
                    return self._call(d, method, self.prefix + path, body, headers or {})
            except DeadlineError as e:
                self.close()
                raise CallTimeoutError(str(e)) from None
            except CallError:
                self.close()
                raise
            except ssl.SSLCertVerificationError as e:
                self.close()
                raise UntrustedError(self.where, e.verify_message or str(e)) from None
            except (OSError, http.client.HTTPException, ValueError, zlib.error) as e:
                self.close()
                raise CallError(f"{what} failed: {type(e).__name__}: {e}") from None

    def _call(self, d: Deadline, method: str, path: str, body: bytes | None, headers: dict[str, str]) -> Answer:
        conn = self._conn
        reused = conn is not None and conn.sock is not None
        if conn is None or conn.sock is None:
            conn = self._conn = self._open(d)
        else:
            d.guard(conn.sock)
            conn.sock.settimeout(min(self.timeout, d.left()))
        try:
            conn.request(method, path, body=body, headers=headers)
            resp = conn.getresponse()
        except _STALE:
            if not reused or d.expired:
                raise
            self.close()  # closed by the server while idle: once more, on a new connection
            return self._call(d, method, path, body, headers)
        data = self._read(resp)
        if resp.will_close:
            self.close()
        return Answer(resp.status, resp.reason, resp.headers, data)

    def _open(self, d: Deadline) -> http.client.HTTPConnection:
        sock = socket.create_connection((self.host, self.port), timeout=min(self.timeout, d.left()))
        d.guard(sock)
        # as http.client's own connect() does: a request's headers and body go out in two writes, and with Nagle's
        # algorithm the body waited for the server's delayed ACK (40 ms a POST: InfluxDB reads took 7x as long)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            if self.tls is not None:
                sock = self.tls.wrap_socket(sock, server_hostname=self.host)
        except BaseException:
            sock.close()
            raise
        cls = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
        conn = cls(self.host, self.port, timeout=self.timeout)
        conn.sock = sock
        return conn

    def _read(self, resp: http.client.HTTPResponse) -> bytearray:
        """The whole body, inflated, at most max_bytes of it."""
        limit = self.max_bytes
        encoding = (resp.getheader("Content-Encoding") or "identity").strip().lower()
        if encoding not in ("identity", "gzip", "x-gzip", "deflate"):
            raise CallError(f"{self.where}: an answer in the {encoding[:40]!r} encoding, which was not asked for")
        inflate = zlib.decompressobj(47) if encoding != "identity" else None  # 47: a gzip or zlib header
        if inflate is None and (resp.length or 0) > limit:
            raise self._too_large()
        body = bytearray()
        while chunk := resp.read1(_CHUNK):
            if inflate is None:
                body += chunk
            while inflate is not None and chunk:
                body += inflate.decompress(chunk, limit - len(body) + 1)
                chunk = inflate.unconsumed_tail
                if len(body) > limit:
                    break
            if len(body) > limit:
                raise self._too_large()
        resp.close()  # read to its end: the connection can take the next request
        return body

    def _too_large(self) -> AnswerTooLargeError:
        return AnswerTooLargeError(f"{self.where}: an answer larger than {self.max_bytes} bytes (max_response_bytes); "
                              "stopped reading it")
