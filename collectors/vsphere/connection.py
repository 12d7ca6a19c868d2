"""One logged-in pyvmomi session to a vCenter or ESXi host, and raw SOAP for QueryPerf.

TLS is verified unless the config explicitly says otherwise. The password is resolved
only here, when connecting, and never appears in a message. QueryPerf responses are the
bulk of the traffic; they are posted through the session's own connection pool and
parsed with ElementTree instead of pyvmomi's pure-Python deserializer (see perf.py).

An answer is input from outside and bounded as it arrives: at most `max_response_bytes`
of XML once inflated (a gzip bomb stops there, not in memory) and a thirty-second of that in
elements, and never a DOCTYPE (defusedxml reads the prolog; vSphere never sends one, and entity
expansion would otherwise depend on the expat the interpreter links). Past either bound the call fails
with SoapFaultError InvalidResponse. pyvmomi parses the answers to its own few calls (login,
the service content, the clock) itself; importing this module gives its parser the same
guards (`_guard_pyvmomi`).
"""

from __future__ import annotations

import http.client
import logging
import re
import ssl
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse
from xml.etree import ElementTree as ET

import pyVim.connect
from defusedxml import DefusedXmlException, DTDForbidden
from defusedxml.ElementTree import DefusedXMLParser
from pyVim.connect import Disconnect, SmartConnect
from pyVmomi import SoapAdapter, vim, vmodl

from db2vtop.agent.core.secrets import SecretError
from db2vtop.collectors.base import CollectorError
from db2vtop.collectors.vsphere.config import VCenterConfig

log = logging.getLogger(__name__)

_SOAP_NS = "{http://schemas.xmlsoap.org/soap/envelope/}"
#: the most one answer may hold once inflated, unless [[vcenter]] max_response_bytes says otherwise
MAX_RESPONSE_BYTES = 64 * 2**20
#: pyvmomi's own calls (login, service content, clock, options, the container view) answer a few KB.
#: Its deserializer's time grows with the square of a text's length, holding the GIL every other
#: collector's thread needs (8 MiB: 2.8 s of CPU, long enough to time out a 1 s guest cycle; 1 MiB: 0.05 s)
PYVMOMI_MAX_BYTES = 2**20
#: elements an answer may hold: a thirty-second of its byte bound (empty elements cost far more memory than text)
BYTES_PER_ELEMENT = 32
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
    max_bytes: int = MAX_RESPONSE_BYTES  # one answer, inflated

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
        return self._post(body, tag, handle)

    def post(self, body: bytes) -> ET.Element:
        """POST one SOAP request on the session; returns the Body's first child."""
        return self._post(body, None, None)

    def _post(self, body: bytes, tag: str | None, handle: Callable[[ET.Element], None] | None) -> ET.Element:
        stub = self.si._stub
        conn = stub.GetConnection()
        try:
            conn.request("POST", stub.path, body, self._headers())
            resp = conn.getresponse()
            if resp.status not in (200, 500):
                raise http.client.HTTPException(f"HTTP {resp.status} {resp.reason}")
            root = _parse_stream(resp, tag, handle, self.max_bytes)
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


_CHUNK = 1 << 16


def too_large(limit: int) -> SoapFaultError:
    return SoapFaultError("InvalidResponse", f"answer larger than {limit} bytes of XML")


def _body(resp: http.client.HTTPResponse, limit: int) -> Iterator[bytes]:
    """The answer's body in chunks, inflated as it arrives when gzip'd; past `limit` bytes inflated
    (or on the wire) it raises InvalidResponse without reading, or inflating, any further."""
    inflate = zlib.decompressobj(16 + zlib.MAX_WBITS) if resp.getheader("Content-Encoding", "").lower() == "gzip" \
        else None
    total = 0
    try:
        while chunk := resp.read(_CHUNK):
            if inflate is not None:
                chunk = inflate.decompress(chunk, limit + 1 - total)  # never more than one byte past the bound
            total += len(chunk)
            if total > limit:
                raise too_large(limit)
            yield chunk
        if inflate is not None:
            tail = inflate.flush()
            if total + len(tail) > limit:
                raise too_large(limit)
            yield tail
    except zlib.error as e:
        raise SoapFaultError("InvalidResponse", f"corrupt gzip body: {e}") from None


class _Prolog:
    """defusedxml's parser over the start of an answer, until its root element begins (a DOCTYPE can
    only come before it): DTDForbidden at a DOCTYPE. The answer itself is parsed by ElementTree's C
    parser, twice as fast on QueryPerf answers as defusedxml's, which drives expat from Python."""

    _SLICE = 4096

    def __init__(self) -> None:
        self.rooted = False
        self._parser = DefusedXMLParser(target=self, forbid_dtd=True)

    def feed(self, chunk: bytes) -> None:
        for i in range(0, len(chunk), self._SLICE):
            if self.rooted:
                return
            self._parser.feed(chunk[i:i + self._SLICE])

    # the parser's target: only the first start tag matters
    def start(self, tag: str, attrs: dict) -> None:
        self.rooted = True

    def end(self, tag: str) -> None:
        pass

    def data(self, text: str) -> None:
        pass

    def close(self) -> None:
        pass


def _parse_stream(resp: http.client.HTTPResponse, tag: str | None, handle: Callable[[ET.Element], None] | None,
                  limit: int = MAX_RESPONSE_BYTES) -> ET.Element:
    """The answer's Envelope; with `tag`, each such element is handed to `handle` when complete, then emptied."""
    prolog = _Prolog()
    parser = ET.XMLPullParser(events=("end",))
    root: ET.Element | None = None
    elements, max_elements = 0, max(limit // BYTES_PER_ELEMENT, 1)

    def drain() -> None:
        nonlocal root, elements
        for _, el in parser.read_events():
            elements += 1
            if el.tag == tag:
                handle(el)  # type: ignore[misc]
                el.clear()
            elif el.tag == _SOAP_NS + "Envelope":
                root = el
        if elements > max_elements:
            raise SoapFaultError("InvalidResponse", f"answer of more than {max_elements} elements "
                                                    f"(max_response_bytes / {BYTES_PER_ELEMENT})")
    try:
        for chunk in _body(resp, limit):
            prolog.feed(chunk)
            parser.feed(chunk)
            drain()
        parser.close()
        drain()
    except ET.ParseError as e:
        raise SoapFaultError("InvalidResponse", f"unparsable SOAP response: {e}") from None
    except DefusedXmlException as e:
        raise SoapFaultError("InvalidResponse", f"refused XML: {type(e).__name__} (a DOCTYPE)") from None
    if root is None:
        raise SoapFaultError("InvalidResponse", "SOAP response without an envelope")
    return root


def soap_body(data: bytes) -> ET.Element:
    """The first element of a SOAP response's Body; a Fault or malformed XML raises SoapFaultError."""
    return _first(_parse_stream(_Bytes(data), None, None, max(len(data), 1)))


class _Bytes:
    """A whole answer read as the streaming parser reads an HTTP response."""

    def __init__(self, data: bytes):
        self._data, self._pos = data, 0

    def read(self, n: int) -> bytes:
        chunk = self._data[self._pos:self._pos + n]
        self._pos += len(chunk)
        return chunk

    def getheader(self, name: str, default: str = "") -> str:
        return default


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
        except (ET.ParseError, DefusedXmlException, SoapFaultError) as e:  # not a vSphere SOAP endpoint
            raise CollectorError(f"vcenter {name}: {self.cfg.url} answered the login with invalid XML: "
                                 f"{type(e).__name__}: {e}") from None
        try:
            content = si.RetrieveContent()
            offset = si.CurrentTime().timestamp() - time.time()
            return Session(si, content, offset, _max_query_metrics(content), content.perfManager._moId,
                           self.cfg.max_response_bytes)
        except (OSError, http.client.HTTPException) as e:
            raise CollectorError(f"vcenter {name}: connection lost while logging in: {_reason(e)}") from None
        except (ET.ParseError, DefusedXmlException) as e:
            raise CollectorError(f"vcenter {name}: invalid answer while logging in: {type(e).__name__}: {e}") \
                from None


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


# --- the same guards for pyvmomi's own parsing ----------------------------------------


def _refuse_doctype(name: str, *_: Any) -> None:
    raise DTDForbidden(name, None, None)


class _Capped:
    """A file-like answer that raises InvalidResponse once more than `limit` bytes were read from it."""

    def __init__(self, f: Any, limit: int):
        self.f, self.limit, self.total = f, limit, 0

    def read(self, n: int = -1) -> bytes:
        data = self.f.read(n)
        self.total += len(data)
        if self.total > self.limit:
            raise too_large(self.limit)
        return data


class _GuardedExpat:
    """The expat parser pyvmomi makes for each answer, refusing a DOCTYPE and reading at most
    PYVMOMI_MAX_BYTES; pyvmomi sets its handlers through it as on the parser itself."""

    __slots__ = ("_p",)

    def __init__(self, parser: Any):
        object.__setattr__(self, "_p", parser)
        parser.StartDoctypeDeclHandler = _refuse_doctype

    def __getattr__(self, name: str) -> Any:
        return getattr(self._p, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._p, name, value)

    def Parse(self, data: bytes | str, final: bool = True) -> int:  # noqa: N802 (expat's name)
        if len(data) > PYVMOMI_MAX_BYTES:
            raise too_large(PYVMOMI_MAX_BYTES)
        return self._p.Parse(data, final)

    def ParseFile(self, f: Any) -> int:  # noqa: N802 (expat's name)
        return self._p.ParseFile(_Capped(f, PYVMOMI_MAX_BYTES))


class _GuardedTree(ET.ElementTree):
    """pyVim reads the server's vimServiceVersions.xml into an ElementTree before logging in."""

    def parse(self, source: Any, parser: Any = None) -> ET.Element:
        return super().parse(_Capped(source, PYVMOMI_MAX_BYTES),
                             DefusedXMLParser(target=ET.TreeBuilder(), forbid_dtd=True))


def _guard_pyvmomi() -> None:
    create = SoapAdapter.ParserCreate
    if getattr(create, "guarded", False):
        return

    def guarded(*args: Any, **kwargs: Any) -> _GuardedExpat:
        return _GuardedExpat(create(*args, **kwargs))

    guarded.guarded = True  # type: ignore[attr-defined]
    SoapAdapter.ParserCreate = guarded
    pyVim.connect.ElementTree = _GuardedTree


_guard_pyvmomi()
