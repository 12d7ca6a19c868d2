"""A real Prometheus Alertmanager on 127.0.0.1, and the webhook receiver the tests read.

Alertmanager 0.28.1 is built once by tests/infra/build-alertmanager.sh (`go install`, cached). It routes every
alert to one webhook receiver (`WebhookReceiver`, a plain HTTP server of the test's) with grouping by
alertname, layer, host, datastore and array, short group waits and `send_resolved`. stop() and start() keep its
data directory (its notification log and silences) and its port, so a test can restart it as an operator would.

The receiver keeps every POST it answered 2xx with the time it came (JSON bodies), can be taken down and
brought back on the same port (the port stays bound while down: nothing else takes it, and connections are
refused), and can hold an answer back (`hold`), to kill the agent while its request is in flight.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.infra.influxd import GOBIN, ROOT, end_process, free_port, wait_ready

VERSION = "0.28.1"


def alertmanager_binary() -> Path:
    binary = GOBIN / f"alertmanager-{VERSION}"
    if not binary.exists():
        subprocess.run([str(ROOT / "tests" / "infra" / "build-alertmanager.sh")], check=True,
                       env={**os.environ, "DB2VTOP_GOBIN": str(GOBIN)})
    return binary


class WebhookReceiver:
    """An HTTP server on 127.0.0.1 that records the JSON POSTed to it."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/hook"
        #: (time, headers by lower-case name, JSON body, raw body) of each POST answered 2xx
        self.received: list[tuple[float, dict[str, str], Any, bytes]] = []
        self.hold = threading.Event()  # set: requests wait (unanswered) until it is cleared
        self.held = 0  # requests waiting now
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._parked: socket.socket | None = None

    def start(self) -> WebhookReceiver:
        if self._parked is not None:
            self._parked.close()
            self._parked = None
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with owner._lock:
                    owner.held += 1
                try:
                    while owner.hold.is_set() and owner._server is not None:
                        time.sleep(0.05)
                finally:
                    with owner._lock:
                        owner.held -= 1
                if owner._server is None:  # taken down while it waited: never answered
                    return
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()
                with owner._lock:
                    owner.received.append((time.time(), {k.lower(): v for k, v in self.headers.items()},
                                           json.loads(body), body))

            def log_message(self, *args: Any) -> None:
                pass

        ThreadingHTTPServer.allow_reuse_address = True
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        """Down: connections refused (the port stays bound, never listened on)."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._parked is None:
            self._parked = socket.socket()
            self._parked.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._parked.bind(("127.0.0.1", self.port))

    def bodies(self) -> list[Any]:
        with self._lock:
            return [b for _, _, b, _ in self.received]


class Alertmanager:
    """A real Alertmanager routing everything to `hook`."""

    def __init__(self, base: Path, hook: WebhookReceiver, group_interval: str = "2s"):
        self.base = Path(base)
        self.base.mkdir(parents=True, exist_ok=True)
        self.port, self.cluster_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        (self.base / "alertmanager.yml").write_text(f"""
global:
  resolve_timeout: 5m
route:
  receiver: hook
  group_by: [alertname, layer, host, datastore, array]
  group_wait: 1s
  group_interval: {group_interval}
  repeat_interval: 4h
receivers:
  - name: hook
    webhook_configs:
      - url: "{hook.url}"
        send_resolved: true
""")

    def start(self, timeout: float = 30.0) -> Alertmanager:
        with open(self.base / "alertmanager.log", "ab") as log:
            self.proc = subprocess.Popen(
                [str(alertmanager_binary()), f"--config.file={self.base / 'alertmanager.yml'}",
                 f"--storage.path={self.base / 'data'}", f"--web.listen-address=127.0.0.1:{self.port}",
                 f"--cluster.listen-address=127.0.0.1:{self.cluster_port}", "--log.level=warn"],
                stdout=log, stderr=log, stdin=subprocess.DEVNULL, cwd=self.base)
        wait_ready(self.proc, self.url + "/-/ready", 200, timeout, "alertmanager", self.base / "alertmanager.log")
        return self

    def stop(self) -> None:
        end_process(self.proc)
        self.proc = None

    def alerts(self, active: bool = True) -> list[dict[str, Any]]:
        """GET /api/v2/alerts: the alerts it holds (active only, by default)."""
        q = "" if not active else "?active=true&silenced=false&inhibited=false"
        with urllib.request.urlopen(self.url + "/api/v2/alerts" + q, timeout=10) as r:
            return json.load(r)
