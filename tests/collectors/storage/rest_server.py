"""A local HTTP(S) server for array REST APIs: canned JSON per path, Basic auth, a
self-signed certificate for 127.0.0.1 when TLS is wanted. Started on a free port,
stopped by the fixture that made it."""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
import ssl
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.infra.http_peer import LocalHTTPServer

Route = tuple[int, Any] | Callable[[str, str, dict, Any], tuple[int, Any]]


def self_signed(dir: Path) -> tuple[Path, Path]:
    """A CA-flagged certificate for 127.0.0.1 (usable as its own ca_file)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
            .sign(key, hashes.SHA256()))
    cert_file, key_file = dir / "cert.pem", dir / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_file, key_file


class FakeREST(LocalHTTPServer):
    def __init__(self, user: str, password: str, tls_dir: Path | None = None):
        self.routes: dict[str, Route] = {}
        self.requests: list[tuple[str, str, Any]] = []
        self.auth = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        self.ca_file: Path | None = None
        self._listen()
        self.scheme = "http"
        if tls_dir is not None:
            cert, key = self_signed(tls_dir)
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(cert, key)
            self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
            self.scheme, self.ca_file = "https", cert

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.server.server_address[1]}"

    def _serve(self, h: BaseHTTPRequestHandler, raw: bytes) -> None:
        body = json.loads(raw) if raw else None
        self.requests.append((h.command, h.path, body))
        parts = urlsplit(h.path)
        if h.headers.get("Authorization") != self.auth:
            status, answer = 401, {"message": "Unauthorized"}
        else:
            route = self.routes.get(parts.path)
            if route is None:
                status, answer = 404, {"message": f"no such resource {parts.path}"}
            elif callable(route):
                status, answer = route(h.command, parts.path, parse_qs(parts.query), body)
            else:
                status, answer = route
        data = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)



class Memory:
    """A runtime output that keeps what it is given."""

    def __init__(self) -> None:
        self.samples: list = []
        self.facts: list = []
        self.annotations: list = []

    def submit(self, samples=(), facts=(), annotations=()) -> None:
        self.samples += list(samples)
        self.facts += list(facts)
        self.annotations += list(annotations)
