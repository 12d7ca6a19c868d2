"""The wire of an alert receiver: what one change looks like to Alertmanager and to a webhook, and one POST.

A change (agent/sinks/alerts.py) is kind-neutral JSON in the receiver's spool; the body is made from it when it
is sent, so a token or signing key rotated meanwhile is the one used.

- Alertmanager, v2 API: `POST <url>/api/v2/alerts` with a list of alerts (labels, annotations, startsAt, endsAt
  on resolve; a firing one has no endsAt and is sent again every `resend_interval`, before Alertmanager's
  resolve_timeout would end it).
- Webhook: `POST <url>` with one change, the schema docs/alerts.md documents (`version` 1); with a key
  (`secret_env`/`secret_file`), `X-Db2vtop-Signature: sha256=<hex HMAC-SHA256 of the body>`.

An answer is sorted by what can fix it: 2xx delivered; 400/404/405/413/422 refused for good (this change is
set aside, logged, counted: retrying cannot make it acceptable); 401/403 a credential error and anything else,
or no answer, retried with backoff (Retry-After honoured, as seconds or a date, up to `max_retry_delay`). A
redirect is not followed (the token would go where it points): it is retried like any other answer. The token is
read for every request, never logged. Each POST is one deadline of `timeout` for the whole of it and its answer
at most ANSWER_MAX_BYTES (agent/core/httpclient.py); TLS as for every source (agent/core/tls.py).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from db2vtop.agent import __version__
from db2vtop.agent.core import tls
from db2vtop.agent.core.config import AlertConfig
from db2vtop.agent.core.httpclient import CallError, HttpClient, retry_after
from db2vtop.agent.core.secrets import SecretError
from db2vtop.agent.core.text import printable
from db2vtop.checks.alerts import Alert, iso_ms

WEBHOOK_VERSION = "1"
TEST_ALERT = "DB2vtopTest"
SIGNATURE_HEADER = "X-Db2vtop-Signature"
REFUSED = frozenset({400, 404, 405, 413, 422})
_ANSWER_BYTES = 4096  # of an answer's body kept for the message: a receiver's error text, never a flood
#: the most of a receiver's answer read at all (Alertmanager answers a few bytes)
ANSWER_MAX_BYTES = 2**20


@dataclass
class Answer:
    status: int
    text: str  # the start of its body, printable

    def __str__(self) -> str:
        return f"{self.status} {self.text}".strip()


class DeliveryError(Exception):
    """Not delivered: `state` is `unreachable`, `auth_error`, `refused` (for good) or `retrying`."""

    def __init__(self, state: str, message: str, retry_after: float = 0.0):
        super().__init__(message)
        self.state, self.retry_after = state, retry_after


def alertmanager_alert(change: dict[str, Any]) -> dict[str, Any]:
    """One alert of Alertmanager's v2 list: endsAt only once resolved."""
    alert = change["alert"]
    out = {"labels": alert["labels"], "annotations": alert["annotations"], "startsAt": alert["startsAt"]}
    if change.get("endsAt"):
        out["endsAt"] = change["endsAt"]
    return out


def test_change(now_ns: int) -> dict[str, Any]:
    """`db2vtop alert test`'s change: a warning that Alertmanager ends 5 minutes on."""
    alert = Alert("test", {"alertname": TEST_ALERT, "severity": "warning", "rule": "alert-test"},
                  {"summary": "db2vtop alert test: this receiver is reached", "since": iso_ms(now_ns) or ""}, now_ns)
    return {"id": f"test-{now_ns}", "seq": 0, "change": "test", "status": "firing", "alert": alert.to_json(),
            "endsAt": iso_ms(now_ns + 300 * 10**9)}


def webhook_body(change: dict[str, Any], receiver: str, agent: str) -> dict[str, Any]:
    """The documented webhook schema (docs/alerts.md): one change of one alert."""
    alert = change["alert"]
    return {"version": WEBHOOK_VERSION, "id": change["id"], "seq": change["seq"], "change": change["change"],
            "status": change["status"], "receiver": receiver, "agent": agent, "sent_by": f"db2vtop {__version__}",
            "alert": {"fingerprint": alert["fingerprint"], "labels": alert["labels"],
                      "annotations": alert["annotations"], "startsAt": alert["startsAt"],
                      "endsAt": change.get("endsAt"), "vms": alert["vms"], "stacks": alert["stacks"]}}


class Receiver:
    """One [[alert]] section's endpoint: builds and sends the body of a change, or of the firing alerts again."""

    def __init__(self, cfg: AlertConfig, agent: str):
        self.cfg, self.agent = cfg, agent
        self.url = cfg.url.rstrip("/") + "/api/v2/alerts" if cfg.kind == "alertmanager" else cfg.url
        u = urlparse(self.url)
        self._path = (u.path or "/") + (f"?{u.query}" if u.query else "")
        self._tls_error = ""
        context = None
        if u.scheme == "https":
            try:
                context = tls.context(cfg.verify_tls, cfg.ca_file, f"alert {cfg.name}")
            except tls.TLSError as e:
                self._tls_error = str(e)
        self._http = HttpClient(f"{u.scheme}://{u.netloc}", timeout=cfg.timeout, max_bytes=ANSWER_MAX_BYTES,
                                tls=context)

    def close(self) -> None:
        self._http.close()

    def send(self, changes: list[dict[str, Any]]) -> Answer:
        """Alertmanager takes several in one list (the firing alerts again); a webhook is one change a POST."""
        if self.cfg.kind == "alertmanager":
            body = [alertmanager_alert(c) for c in changes]
        else:
            (change,) = changes
            body = webhook_body(change, self.cfg.name, self.agent)
        return self.post(json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode())

    def post(self, data: bytes) -> Answer:
        headers = {"Content-Type": "application/json", "User-Agent": f"db2vtop/{__version__}"}
        try:
            token = self.cfg.token().resolve() if self.cfg.token() else ""  # type: ignore[union-attr]
            key = self.cfg.secret().resolve() if self.cfg.secret() else ""  # type: ignore[union-attr]
        except SecretError as e:
            raise DeliveryError("auth_error", f"credentials: {e}") from None
        if token:
            headers["Authorization"] = f"Bearer {token}"
        if key:
            headers[SIGNATURE_HEADER] = "sha256=" + hmac.new(key.encode(), data, hashlib.sha256).hexdigest()
        if self._tls_error:
            raise DeliveryError("unreachable", self._tls_error)
        try:
            r = self._http.request("POST", self._path, data, headers)
        except CallError as e:  # no answer: refused, reset, TLS, the deadline, an answer past the bound
            raise DeliveryError("unreachable", printable(str(e))[:300]) from None
        answer = Answer(r.status, _text(bytes(r.body[:_ANSWER_BYTES])))
        if 200 <= r.status < 300:
            return answer
        if r.status in REFUSED:
            raise DeliveryError("refused", str(answer))
        if r.status in (401, 403):
            raise DeliveryError("auth_error", str(answer))
        raise DeliveryError("retrying", str(answer), retry_after(r.header("Retry-After"), self.cfg.max_retry_delay))


def _text(body: bytes) -> str:
    return printable(body.decode("utf-8", "replace").strip())[:300]
