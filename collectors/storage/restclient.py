"""A small JSON-over-HTTPS client for the array management APIs (XtremIO XMS, Unisphere, ONTAP).

TLS as every source has it (agent/core/tls.py: verified by default, `ca_file`, `verify_tls = false`
warned about). Basic authentication with the password resolved from its SecretRef on first use;
one keep-alive connection reused across cycles and reopened after a failure. Every request is one
whole-call deadline (the collector's timeout, and never past its cycle's end) and its answer at most
`max_response_bytes` (agent/core/httpclient.py). HTTP errors become CollectorErrors that name the
status and the array's own message, never the password.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from db2vtop.agent.core import tls
from db2vtop.agent.core.httpclient import CallError, HttpClient, UntrustedError
from db2vtop.agent.core.secrets import SecretError
from db2vtop.collectors.base import CollectorError
from db2vtop.collectors.storage.common import StorageFormatError
from db2vtop.collectors.storage.config import ArraySection


class RestClient:
    def __init__(self, cfg: ArraySection, timeout: float):
        self.cfg, self.timeout = cfg, timeout
        self.round_trips = 0
        self._auth: str | None = None
        self._http: HttpClient | None = None

    @property
    def where(self) -> str:
        return self._client().where

    def _client(self) -> HttpClient:
        if self._http is None:
            url = self.cfg.url or ""
            try:
                context = tls.context(self.cfg.verify_tls, self.cfg.ca_file, f"storage {self.cfg.name}")
            except tls.TLSError as e:
                raise CollectorError(str(e)) from None
            self._http = HttpClient(url, timeout=self.timeout, max_bytes=self.cfg.max_response_bytes, tls=context)
        return self._http

    def _authorization(self) -> str:
        if self._auth is None:
            ref = self.cfg.password()
            try:
                secret = ref.resolve(self.cfg.user or "") if ref else ""
            except SecretError as e:
                raise CollectorError(f"{self._client().where}: {e}") from None
            self._auth = "Basic " + base64.b64encode(f"{self.cfg.user}:{secret}".encode()).decode()
        return self._auth

    def close(self) -> None:
        if self._http is not None:
            self._http.close()

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """The JSON answer of one request; CollectorError (StorageFormatError for a body that is not JSON)."""
        client = self._client()
        headers = {"Accept": "application/json", "Authorization": self._authorization()}
        payload = None
        if body is not None:
            payload = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        self.round_trips += 1
        try:
            answer = client.request(method, path, payload, headers)
        except UntrustedError as e:
            raise CollectorError(f"{e}; give the array's CA as ca_file, or set verify_tls = false to opt out") from None
        except CallError as e:
            raise CollectorError(str(e)) from None
        where = f"{client.where}: {method} {path.split('?')[0]}"
        if answer.status in (401, 403):
            ref = self.cfg.password()
            raise CollectorError(f"{client.where}: HTTP {answer.status}: user {self.cfg.user!r} was refused; check "
                                 f"the user, its role and its password ({ref.describe() if ref else 'none given'})")
        if answer.status >= 400:
            raise CollectorError(f"{where}: HTTP {answer.status}: {self._message(answer.body) or answer.reason}")
        try:
            return json.loads(answer.body)
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
            raise StorageFormatError(f"{where} did not answer JSON: {str(e)[:200]}") from None

    @staticmethod
    def _message(data: bytearray) -> str:
        """The array's own message in an error answer (XMS, Unisphere: `message`; ONTAP: `error.message`)."""
        try:
            body = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
            return bytes(data[:200]).decode("utf-8", "replace").strip()
        if isinstance(body, dict):
            error = body.get("error")
            if isinstance(error, dict) and isinstance(error.get("message"), str):
                return error["message"][:300]
            for key in ("message", "error", "errorMessage"):
                if isinstance(body.get(key), str):
                    return body[key][:300]
        return str(body)[:200]
