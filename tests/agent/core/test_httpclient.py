"""Calls to the outside (agent/core/deadline.py, agent/core/httpclient.py) against real servers on 127.0.0.1
that misbehave: one that never answers, one that trickles, a gzip bomb, a length past the bound, an encoding
never asked for, a kept-alive connection the server closed; and Retry-After as servers send it."""

from __future__ import annotations

import email.utils
import socket
import threading
import time
import tracemalloc
import zlib
from collections.abc import Callable, Iterator

import pytest

from db2vtop.agent.core.deadline import DeadlineError, deadline, ending_by
from db2vtop.agent.core.httpclient import (
    AnswerTooLargeError,
    CallError,
    CallTimeoutError,
    HttpClient,
    retry_after,
)

SAFETY_S = 30  # a socket timeout far past every deadline here: a broken deadline fails the test, never hangs it


@pytest.fixture
def server() -> Iterator[Callable[[Callable[[socket.socket], None]], str]]:
    """Listens on 127.0.0.1; each connection is handed to the test's function on a thread of its own."""
    socks: list[socket.socket] = []

    def serve(handle: Callable[[socket.socket], None]) -> str:
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen()
        socks.append(s)

        def run() -> None:
            while True:
                try:
                    c, _ = s.accept()
                except OSError:
                    return
                socks.append(c)
                threading.Thread(target=handle, args=(c,), daemon=True).start()

        threading.Thread(target=run, daemon=True).start()
        return f"http://127.0.0.1:{s.getsockname()[1]}"

    yield serve
    for s in socks:
        s.close()


def request_of(c: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = c.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def test_a_deadline_ends_a_read_blocked_on_a_silent_peer(server):
    url = server(lambda c: request_of(c))  # reads, never answers
    sock = socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])), timeout=SAFETY_S)
    with pytest.raises(DeadlineError, match=r"read timed out after 0.5s \(the whole call\)"), \
            deadline(0.5, "read") as d:
        d.guard(sock)
        sock.recv(1)  # woken by the watchdog shutting the socket down (its close follows on that thread)


def test_a_cycle_bound_shortens_every_deadline_made_inside_it():
    with ending_by(time.monotonic() + 2.0):
        assert deadline(30, "x").limit <= 2.0
        assert deadline(0.5, "x").limit == 0.5
    assert deadline(30, "x").limit == 30


def test_a_trickled_answer_ends_at_the_deadline(server):
    def trickle(c: socket.socket) -> None:
        request_of(c)
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
        try:
            for _ in range(100_000):  # a byte every 0.1 s: no socket timeout ever fires
                c.send(b" ")
                time.sleep(0.1)
        except OSError:
            pass

    client = HttpClient(server(trickle), timeout=1.0)
    with pytest.raises(CallTimeoutError, match=r"GET /slow timed out after 1s \(the whole call\)"):
        client.request("GET", "/slow?q=secret")


def test_a_gzip_bomb_stops_one_byte_past_the_bound_never_in_memory(server):
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    bomb = b"".join(z.compress(b"A" * 2**20) for _ in range(256)) + z.flush()  # 256 MiB in 0.25 MB

    def answer(c: socket.socket) -> None:
        request_of(c)
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % len(bomb) + bomb)

    client = HttpClient(server(answer), timeout=SAFETY_S, max_bytes=4 * 2**20)
    tracemalloc.start()
    try:
        with pytest.raises(AnswerTooLargeError, match="larger than 4194304 bytes"):
            client.request("GET", "/")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20, peak


def test_a_length_past_the_bound_is_refused_before_reading_and_an_unasked_encoding_is_an_error(server):
    def big(c: socket.socket) -> None:
        request_of(c)
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2147483648\r\n\r\n")

    with pytest.raises(AnswerTooLargeError):
        HttpClient(server(big), timeout=SAFETY_S, max_bytes=2**20).request("GET", "/")

    def brotli(c: socket.socket) -> None:
        request_of(c)
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Encoding: br\r\nContent-Length: 3\r\n\r\nabc")

    with pytest.raises(CallError, match="'br' encoding, which was not asked for"):
        HttpClient(server(brotli), timeout=SAFETY_S).request("GET", "/")


def test_a_kept_alive_connection_the_server_closed_is_replaced_once(server):
    served = []

    def once_per_connection(c: socket.socket) -> None:  # answers one request, then closes without saying so
        request_of(c)
        served.append(1)
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        time.sleep(0.2)
        c.close()

    client = HttpClient(server(once_per_connection), timeout=SAFETY_S)
    assert bytes(client.request("GET", "/").body) == b"ok"
    time.sleep(0.5)
    assert bytes(client.request("GET", "/").body) == b"ok" and len(served) == 2


@pytest.mark.parametrize(("value", "expected"), [
    ("3", 3.0), ("0", 0.0), ("2.5", 2.5), ("inf", 30.0), ("Infinity", 30.0), ("1e300", 30.0), ("1e9", 30.0),
    ("nan", 0.0), ("-5", 0.0), ("-inf", 0.0), ("soon", 0.0), ("", 0.0), (None, 0.0), ("9" * 5000, 30.0),
    ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0), ("Fri, 31 Dec 9999 23:59:59 GMT", 30.0), ("Mon, 99 Foo 2020", 0.0),
])
def test_retry_after_is_a_finite_delay_within_bounds(value, expected):
    assert retry_after(value, 30.0) == expected


def test_retry_after_as_an_http_date_is_the_seconds_until_it():
    assert 8.0 <= retry_after(email.utils.formatdate(time.time() + 10, usegmt=True), 30.0) <= 10.0


def test_requests_go_out_with_nagles_algorithm_off(server):
    """A request's headers and body are two writes: with Nagle's algorithm on, each POST waited for the server's
    delayed ACK (40 ms on Linux; the Fleet over InfluxDB 1.8 took seven times as long)."""
    def answer(c: socket.socket) -> None:
        request_of(c)
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")

    client = HttpClient(server(answer), timeout=SAFETY_S)
    assert client.request("POST", "/query", b"q=1").status == 200
    assert client._conn is not None and client._conn.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
