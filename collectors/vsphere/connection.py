"""One logged-in pyvmomi session to a vCenter or ESXi host, and raw SOAP for QueryPerf.

TLS is verified unless the config explicitly says otherwise. The password is resolved
only here, when connecting, and never appears in a message. QueryPerf responses are the
bulk of the traffic; they are posted through the session's own connection pool and
parsed with ElementTree instead of pyvmomi's pure-Python deserializer (see perf.py).
"""

from __future__ import annotations

import http.client
import logging
import re
import ssl
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse
from xml.etree import ElementTree as ET

from pyVim.connect import Disconnect, SmartConnect
from pyVmomi import vim, vmodl

from db2vtop.agent.core.secrets import SecretError
from db2vtop.collectors.base import CollectorError
from db2vtop.collectors.vsphere.config import VCenterConfig

log = logging.getLogger(__name__)

_SOAP_NS = "{http://schemas.xmlsoap.org/soap/envelope/}"
_XSI_TYPE = "{http://www.w3.org/2001/XMLSchema-instance}type"


class SoapFaultError(CollectorError):
    """A fault (or a malformed answer) from a raw SOAP call; `name` is the vim fault type."""

    def __init__(self, name: str, message: str):
        super().__init__(f"{name}: {message}" if message else name)
        self.name = name


def is_session_lost(e: BaseException) -> bool:
    """The session expired or was ended: log in again and retry."""
    if isinstance(e, vim.fault.NotAuthenticated):
        return True
    return isinstance(e, SoapFaultError) and e.name == "NotAuthenticated"


def is_unreachable(e: BaseException) -> bool:
    return isinstance(e, OSError | http.client.HTTPException | ssl.SSLError)


def tls_context(cfg: VCenterConfig) -> ssl.SSLContext:
    if not cfg.verify_tls:
        return ssl._create_unverified_context()  # explicit opt-out, warned about at start
    try:
        return ssl.create_default_context(cafile=str(cfg.ca_file) if cfg.ca_file else None)
    except (OSError, ssl.SSLError) as e:
        raise CollectorError(f"vcenter {cfg.name}: cannot load ca_file {cfg.ca_file}: {e}") from None


@dataclass
class Session:
    si: Any
    content: Any
    server_offset_s: float        # server clock minus ours
    max_query_metrics: int        # vCenter's config.vpxd.stats.maxQueryMetrics, 0 if unset/unlimited
    perf_manager: str             # moref value

    def server_now(self) -> float:
        return time.time() + self.server_offset_s

    def close(self) -> None:
        try:
            Disconnect(self.si)
        except Exception:  # the session may already be gone; closing must not fail
            log.debug("logout failed", exc_info=True)

    # --- raw SOAP -------------------------------------------------------------------

    def post_each(self, body: bytes, tag: str, handle: Callable[[ET.Element], None]) -> ET.Element:
        """POST one SOAP request and parse the answer as it arrives: each `tag` element is handed to
        `handle` as soon as it is complete, then emptied, so a bulk answer is never held whole as a
        tree. Returns the Body's first child (what is left of it); a Fault raises SoapFaultError."""
        stub = self.si._stub
        conn = stub.GetConnection()
        try:
            conn.request("POST", stub.path, body, self._headers())
            resp = conn.getresponse()
            if resp.status not in (200, 500):
                raise http.client.HTTPException(f"HTTP {resp.status} {resp.reason}")
            root = _parse_stream(resp, tag, handle)
        except (OSError, http.client.HTTPException):
            conn.close()
            stub.DropConnections()
            raise
        except BaseException:
            conn.close()  # an answer read only in part cannot be reused
            raise
        stub.ReturnConnection(conn)
        return _first(root)

    def _headers(self) -> dict[str, str]:
        stub = self.si._stub
        return {"Cookie": stub.cookie, "SOAPAction": stub.versionId,
                "Content-Type": "text/xml; charset=UTF-8", "Accept-Encoding": "gzip"}

    def post(self, body: bytes) -> ET.Element:
        """POST one SOAP request on the session; returns the Body's first child."""
        stub = self.si._stub
        headers = self._headers()
        conn = stub.GetConnection()
        try:
            conn.request("POST", stub.path, body, headers)
            resp = conn.getresponse()
            data = resp.read()
        except (OSError, http.client.HTTPException):
            conn.close()
            stub.DropConnections()
            raise
        stub.ReturnConnection(conn)
        if resp.getheader("Content-Encoding", "").lower() == "gzip":
            try:
                data = zlib.decompress(data, 16 + zlib.MAX_WBITS)
            except zlib.error as e:
                raise SoapFaultError("InvalidResponse", f"corrupt gzip body: {e}") from None
        if resp.status not in (200, 500):
            raise http.client.HTTPException(f"HTTP {resp.status} {resp.reason}")
        return soap_body(data)


_CHUNK = 1 << 16


def _parse_stream(resp: http.client.HTTPResponse, tag: str, handle: Callable[[ET.Element], None]) -> ET.Element:
    inflate = zlib.decompressobj(16 + zlib.MAX_WBITS) if resp.getheader("Content-Encoding", "").lower() == "gzip" \
        else None
    parser = ET.XMLPullParser(events=("end",))
    root: ET.Element | None = None

    def drain() -> None:
        nonlocal root
        for _, el in parser.read_events():
            if el.tag == tag:
                handle(el)
                el.clear()
            elif el.tag == _SOAP_NS + "Envelope":
                root = el
    try:
        while chunk := resp.read(_CHUNK):
            parser.feed(inflate.decompress(chunk) if inflate else chunk)
            drain()
        if inflate:
            parser.feed(inflate.flush())
        parser.close()
        drain()
    except zlib.error as e:
        raise SoapFaultError("InvalidResponse", f"corrupt gzip body: {e}") from None
    except ET.ParseError as e:
        raise SoapFaultError("InvalidResponse", f"unparsable SOAP response: {e}") from None
    if root is None:
        raise SoapFaultError("InvalidResponse", "SOAP response without an envelope")
    return root


def soap_body(data: bytes) -> ET.Element:
    """The first element of a SOAP response's Body; a Fault or malformed XML raises SoapFaultError."""
    try:
        root = ET.fromstring(data)
    except ET.ParseError as e:
        raise SoapFaultError("InvalidResponse", f"unparsable SOAP response: {e}") from None
    return _first(root)


def _first(root: ET.Element) -> ET.Element:
    body_el = root.find(_SOAP_NS + "Body")
    if body_el is None or len(body_el) == 0:
        raise SoapFaultError("InvalidResponse", "SOAP response without a body")
    first = body_el[0]
    if first.tag == _SOAP_NS + "Fault":
        raise _fault(first)
    return first


def _fault(el: ET.Element) -> SoapFaultError:
    message = (el.findtext("faultstring") or "").strip()
    detail = el.find("detail")
    name = "ServerFault"
    if detail is not None and len(detail):
        d = detail[0]
        name = d.get(_XSI_TYPE) or re.sub(r"^\{[^}]*\}", "", d.tag).removesuffix("Fault")
        name = name.split(":")[-1]
    return SoapFaultError(name, message)


class Connector:
    """Logs in, with exponential backoff between failed attempts (never blocking a cycle)."""

    max_backoff_s = 300.0

    def __init__(self, cfg: VCenterConfig, timeout_s: float):
        self.cfg = cfg
        self.timeout_s = timeout_s
        u = urlparse(cfg.url)
        self.host = u.hostname or ""
        self.port = u.port or (443 if u.scheme == "https" else 80)
        self.path = u.path or "/sdk"
        self.protocol = u.scheme
        self.failures = 0
        self.next_attempt = 0.0
        self.last_error = ""
        self._lock = threading.Lock()
        if not cfg.verify_tls:
            log.warning("vcenter %s: TLS certificate verification is OFF (verify_tls = false); "
                        "anyone on the path can read the session", cfg.name)

    def connect(self) -> Session:
        with self._lock:
            wait = self.next_attempt - time.monotonic()
            if wait > 0:
                raise CollectorError(f"vcenter {self.cfg.name} unreachable ({self.last_error}); "
                                     f"next attempt in {wait:.0f}s")
            try:
                session = self._login()
            except CollectorError as e:
                self.failures += 1
                self.last_error = str(e)
                delay = min(self.cfg.interval * 2 ** (self.failures - 1), self.max_backoff_s)
                self.next_attempt = time.monotonic() + delay
                raise
            self.failures = 0
            self.next_attempt = 0.0
            return session

    def _login(self) -> Session:
        name = self.cfg.name
        ref = self.cfg.password()
        try:
            password = ref.resolve(self.cfg.user) if ref else ""
        except SecretError as e:
            raise CollectorError(f"vcenter {name}: password: {e}") from None
        try:
            si = SmartConnect(protocol=self.protocol, host=self.host, port=self.port, path=self.path,
                              user=self.cfg.user, pwd=password, sslContext=tls_context(self.cfg),
                              httpConnectionTimeout=self.timeout_s)
        except ssl.SSLCertVerificationError as e:
            raise CollectorError(
                f"vcenter {name}: TLS certificate of {self.cfg.url} is not trusted ({e.verify_message}); "
                "give its CA in ca_file, or set verify_tls = false to skip verification") from None
        except vim.fault.InvalidLogin:
            raise CollectorError(f"vcenter {name}: login refused for user {self.cfg.user!r}") from None
        except (OSError, http.client.HTTPException, ssl.SSLError) as e:
            raise CollectorError(f"vcenter {name}: cannot reach {self.cfg.url}: {_reason(e)}") from None
        except vmodl.MethodFault as e:
            raise CollectorError(f"vcenter {name}: login failed: {e.msg or type(e).__name__}") from None
        try:
            content = si.RetrieveContent()
            offset = si.CurrentTime().timestamp() - time.time()
            return Session(si, content, offset, _max_query_metrics(content), content.perfManager._moId)
        except (OSError, http.client.HTTPException) as e:
            raise CollectorError(f"vcenter {name}: connection lost while logging in: {_reason(e)}") from None


def _reason(e: BaseException) -> str:
    return getattr(e, "strerror", None) or str(e) or type(e).__name__


def _max_query_metrics(content: Any) -> int:
    """vCenter's limit on metrics per QueryPerf call; 0 when unset or unlimited (-1)."""
    if content.setting is None:
        return 0
    try:
        opts = content.setting.QueryOptions("config.vpxd.stats.maxQueryMetrics")
    except vim.fault.InvalidName:
        return 0
    for o in opts or ():
        try:
            value = int(str(o.value))
        except ValueError:
            return 0
        return value if value > 0 else 0
    return 0
