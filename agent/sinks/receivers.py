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
or no answer, retried with backoff (Retry-After honoured). The token is read for every request, never logged.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from db2vtop.agent import __version__
from db2vtop.agent.core.config import AlertConfig
from db2vtop.agent.core.secrets import SecretError
from db2vtop.agent.core.text import printable
from db2vtop.checks.alerts import Alert, iso_ms

WEBHOOK_VERSION = "1"
TEST_ALERT = "DB2vtopTest"
SIGNATURE_HEADER = "X-Db2vtop-Signature"
REFUSED = frozenset({400, 404, 405, 413, 422})
_ANSWER_BYTES = 4096  # of an answer's body kept for the message: a receiver's error text, never a flood


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
        self._tls = ssl.create_default_context(cafile=str(cfg.ca_file) if cfg.ca_file else None)
        if not cfg.verify_tls:
            self._tls.check_hostname = False
            self._tls.verify_mode = ssl.CERT_NONE

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
        req = urllib.request.Request(self.url, data=data, method="POST", headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.cfg.timeout, context=self._tls) as r:
                return Answer(r.status, _text(r.read(_ANSWER_BYTES)))
        except urllib.error.HTTPError as e:
            answer = Answer(e.code, _text(e.read(_ANSWER_BYTES)))
            e.close()
            if e.code in REFUSED:
                raise DeliveryError("refused", str(answer)) from None
            if e.code in (401, 403):
                raise DeliveryError("auth_error", str(answer)) from None
            raise DeliveryError("retrying", str(answer), _retry_after(e.headers.get("Retry-After"))) from None
        except (TimeoutError, urllib.error.URLError, OSError, ValueError) as e:
            reason = getattr(e, "reason", None) or e
            raise DeliveryError("unreachable", printable(f"{type(e).__name__}: {reason}")[:300]) from None


def _text(body: bytes) -> str:
    return printable(body.decode("utf-8", "replace").strip())[:300]


def _retry_after(value: str | None) -> float:
    try:
        return max(0.0, min(float(value or 0), 3600.0))
    except ValueError:
        return 0.0
