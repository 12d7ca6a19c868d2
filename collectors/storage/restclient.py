"""A small JSON-over-HTTPS client for the array management APIs (XtremIO XMS, Unisphere).

TLS is verified by default (system CAs or `ca_file`); `verify_tls = false` is an explicit
opt-out that is logged. Basic authentication with the password resolved from its
SecretRef on first use; one keep-alive connection reused across cycles and reopened
after a failure. HTTP errors become CollectorErrors that name the status and the
array's own message, never the password.
"""

from __future__ import annotations

import base64
import http.client
import json
import logging
import ssl
from typing import Any
from urllib.parse import urlparse

from db2vtop.agent.core.secrets import SecretError
from db2vtop.collectors.base import CollectorError
from db2vtop.collectors.storage.common import StorageFormatError
from db2vtop.collectors.storage.config import ArraySection

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 256 * 2**20


class RestClient:
    def __init__(self, cfg: ArraySection, timeout: float):
        u = urlparse(cfg.url or "")
        self.cfg, self.timeout = cfg, timeout
        self.scheme, self.host, self.port = u.scheme, u.hostname or "", u.port
        self.prefix = u.path.rstrip("/")
        self.where = f"{u.scheme}://{u.netloc}"
        self.round_trips = 0
        self._auth: str | None = None
        self._conn: http.client.HTTPConnection | None = None

    def _context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.cfg.ca_file) if self.cfg.ca_file else None)
        if not self.cfg.verify_tls:
            log.warning("storage %s: TLS certificate verification is OFF (verify_tls = false)", self.cfg.name)
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        return ctx

    def _connection(self) -> http.client.HTTPConnection:
        if self._auth is None:
            ref = self.cfg.password()
            try:
                secret = ref.resolve(self.cfg.user or "") if ref else ""
            except SecretError as e:
                raise CollectorError(f"{self.where}: {e}") from None
            self._auth = "Basic " + base64.b64encode(f"{self.cfg.user}:{secret}".encode()).decode()
        if self._conn is None:
            if self.scheme == "https":
                self._conn = http.client.HTTPSConnection(self.host, self.port, timeout=self.timeout,
                                                         context=self._context())
            else:
                self._conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def request(self, method: str, path: str, body: Any = None) -> Any:
        headers = {"Accept": "application/json", "Authorization": ""}
        payload = None
        if body is not None:
            payload = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        self.round_trips += 1
        try:
            conn = self._connection()
            headers["Authorization"] = self._auth or ""
            conn.request(method, self.prefix + path, body=payload, headers=headers)
            resp = conn.getresponse()
            data = resp.read(MAX_BODY_BYTES + 1)
        except ssl.SSLCertVerificationError as e:
            self.close()
            raise CollectorError(f"{self.where}: TLS certificate not trusted ({e.verify_message}); give the "
                                 f"array's CA as ca_file, or set verify_tls = false to opt out") from None
        except (OSError, http.client.HTTPException) as e:
            self.close()
            raise CollectorError(f"{self.where}: {method} {path.split('?')[0]} failed: "
                                 f"{type(e).__name__}: {e}") from None
        if len(data) > MAX_BODY_BYTES:
            self.close()
            raise CollectorError(f"{self.where}: {path.split('?')[0]} answered more than {MAX_BODY_BYTES} bytes")
        if resp.status in (401, 403):
            ref = self.cfg.password()
            raise CollectorError(f"{self.where}: HTTP {resp.status}: user {self.cfg.user!r} was refused; check the "
                                 f"user, its role and its password ({ref.describe() if ref else 'none given'})")
        if resp.status >= 400:
            raise CollectorError(f"{self.where}: {method} {path.split('?')[0]}: HTTP {resp.status}: "
                                 f"{self._message(data) or resp.reason}")
        try:
            return json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise StorageFormatError(f"{self.where}: {path.split('?')[0]} did not answer JSON: {e}") from None

    @staticmethod
    def _message(data: bytes) -> str:
        try:
            body = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError):
            return data[:200].decode("utf-8", "replace").strip()
        if isinstance(body, dict):
            for key in ("message", "error", "errorMessage"):
                if isinstance(body.get(key), str):
                    return body[key][:300]
        return str(body)[:200]
