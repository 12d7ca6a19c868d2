"""One logged-in session to a vCenter or ESXi host, spoken in raw SOAP.

Every call the collector makes is one of a few it writes itself (soapxml.envelope) and parses with
ElementTree: the bulk reads (RetrievePropertiesEx, WaitForUpdatesEx, QueryPerf) because pyvmomi's
pure-Python deserializer costs ~8 ms per VM, and the handful around them (version negotiation,
RetrieveServiceContent, Login, CurrentTime, QueryOptions, CreateContainerView, Logout) because a client
library's type tables would cost every agent 8 MB of memory for them.

TLS is verified unless the config explicitly says otherwise. The password is resolved only here, when
connecting, and never appears in a message. Each thread's call takes a connection from the session's
pool and gives it back; a connection error drops them all (the server may have restarted).

An answer is input from outside and bounded as it arrives: at most `max_response_bytes` of XML once
inflated (a gzip bomb stops there, not in memory) and a thirty-second of that in elements, and never a
DOCTYPE (defusedxml reads the prolog; vSphere never sends one, and entity expansion would otherwise
depend on the expat the interpreter links). The small calls around the bulk reads (the version document,
the service content, login, the clock, options) answer a few KB and are held to SMALL_MAX_BYTES. Past
either bound the call fails with SoapFaultError InvalidResponse.

Each call is one deadline (agent/core/deadline.py) of the collector's timeout, and no later than its cycle's
end, over all of it: connecting, the request, every byte of the answer. A socket timeout bounds one read only,
so a vCenter that trickled its answer (a byte a second) held the collector's worker for as long as it liked and
every later cycle was skipped; when the deadline passes the call's socket is shut down from outside, the call
fails with "timed out after", and the next one connects afresh.
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
from datetime import datetime
from http.cookies import SimpleCookie
from urllib.parse import urlparse
from xml.etree import ElementTree as ET
from xml.sax.saxutils import escape

from defusedxml import DefusedXmlException
from defusedxml.ElementTree import DefusedXMLParser

from db2vtop.agent.core.deadline import current, deadline
from db2vtop.agent.core.secrets import SecretError
from db2vtop.collectors.base import CollectorError
from db2vtop.collectors.vsphere.config import VCenterConfig
from db2vtop.collectors.vsphere.soapxml import NS, Node, envelope, this, to_int, value

log = logging.getLogger(__name__)

_SOAP_NS = "{http://schemas.xmlsoap.org/soap/envelope/}"
_XSI_TYPE = "{http://www.w3.org/2001/XMLSchema-instance}type"
#: the most one answer may hold once inflated, unless [[vcenter]] max_response_bytes says otherwise
MAX_RESPONSE_BYTES = 64 * 2**20
#: the small calls' answers (version document, service content, login, clock, options: a few KB each)
SMALL_MAX_BYTES = 2**20
#: elements an answer may hold: a thirty-second of its byte bound (empty elements cost far more memory than text)
BYTES_PER_ELEMENT = 32
COOKIE = "vmware_soap_session"
#: the newest vim25 API version this collector's requests and type tables were written against: a newer
#: server is spoken to in this version (it answers in the types this code knows), an older one in its own
NEWEST_API = (8, 0, 3, 0)


class SoapFaultError(CollectorError):
    """A fault (or a malformed answer) from a raw SOAP call; `name` is the vim fault type."""

    def __init__(self, name: str, message: str):
        super().__init__(f"{name}: {message}" if message else name)
        self.name = name


def is_session_lost(e: BaseException) -> bool:
    """The session expired or was ended: log in again and retry."""
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


#: the method a SOAP request calls: the first element in its Body
_CALLED = re.compile(rb"<soapenv:Body><(?:\w+:)?(\w+)")


class _Guarded(http.client.HTTPConnection):
    """A connection whose socket is put under the calling thread's deadline as soon as it is connected."""

    def connect(self) -> None:
        super().connect()
        d = current()
        if d is not None:
            d.guard(self.sock)


class _HTTP(_Guarded):
    pass


class _HTTPS(_Guarded, http.client.HTTPSConnection):
    pass


class Session:
    """A vCenter's SOAP endpoint with a pool of kept-alive connections and, once logged in, the session's
    cookie and the managed objects the collector talks to (from the ServiceContent)."""

    def __init__(self, url: str, context: ssl.SSLContext, timeout_s: float, max_bytes: int = MAX_RESPONSE_BYTES):
        u = urlparse(url)
        self.https = u.scheme != "http"
        self.host, self.port = u.hostname or "", u.port or (443 if self.https else 80)
        self.path = u.path or "/sdk"
        self.context, self.timeout_s = context, timeout_s
        self.max_bytes = max_bytes  # one answer, inflated
        self.action = '"urn:vim25"'
        self.cookie = ""
        self._pool: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self.server_offset_s = 0.0     # server clock minus ours
        self.max_query_metrics = 0     # vCenter's config.vpxd.stats.maxQueryMetrics, 0 if unset/unlimited
        self.property_collector = self.view_manager = self.root_folder = ""
        self.perf_manager = self.session_manager = self.setting = ""

    def server_now(self) -> float:
        return time.time() + self.server_offset_s

    # --- connections ------------------------------------------------------------------

    def _connection(self) -> http.client.HTTPConnection:
        with self._lock:
            if self._pool:
                return self._pool.pop()
        if self.https:
            return _HTTPS(self.host, self.port, timeout=self.timeout_s, context=self.context)
        return _HTTP(self.host, self.port, timeout=self.timeout_s)

    def _give_back(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            self._pool.append(conn)

    def _drop_all(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, []
        for c in pool:
            c.close()

    def _request(self, method: str, path: str, body: bytes | None,
                 read: Callable[[http.client.HTTPResponse], ET.Element]) -> ET.Element:
        conn = self._connection()
        name = _CALLED.search(body[:1024]) if body else None
        what = f"{name.group(1).decode() if name else method + ' ' + path} to {self.host}"
        try:
            with deadline(self.timeout_s, what) as d:  # a new connection's socket is guarded as it connects
                if conn.sock is not None:
                    d.guard(conn.sock)
                headers = {"Content-Type": "text/xml; charset=UTF-8", "Accept-Encoding": "gzip"}
                if body is not None:
                    headers["SOAPAction"] = self.action
                if self.cookie:
                    headers["Cookie"] = self.cookie
                conn.request(method, path, body, headers)
                resp = conn.getresponse()
                for value_ in resp.headers.get_all("Set-Cookie") or ():
                    found = SimpleCookie(value_).get(COOKIE)
                    if found is not None:
                        self.cookie = f"{COOKIE}={found.coded_value}"
                if resp.status not in (200, 500):
                    resp.read()
                    raise http.client.HTTPException(f"HTTP {resp.status} {resp.reason}")
                root = read(resp)
        except (OSError, http.client.HTTPException):  # DeadlineError is a TimeoutError
            conn.close()
            self._drop_all()  # the server may have restarted: none of the kept connections is good
            raise
        except BaseException:
            conn.close()  # an answer read only in part cannot be reused
            raise
        self._give_back(conn)
        return root

    # --- calls ------------------------------------------------------------------------

    def post_each(self, body: bytes, tag: str, handle: Callable[[ET.Element], None]) -> ET.Element:
        """POST one SOAP request and parse the answer as it arrives: each `tag` element is handed to
        `handle` as soon as it is complete, then emptied, so a bulk answer is never held whole as a
        tree. Returns the Body's first child (what is left of it); a Fault raises SoapFaultError."""
        return _first(self._request("POST", self.path, body,
                                    lambda resp: _parse_stream(resp, tag, handle, self.max_bytes)))

    def post(self, body: bytes, limit: int | None = None) -> ET.Element:
        """POST one SOAP request on the session; returns the Body's first child (an answer of at most
        `limit` bytes, the session's max_bytes unless given)."""
        bound = limit or self.max_bytes
        return _first(self._request("POST", self.path, body, lambda resp: _parse_stream(resp, None, None, bound)))

    def call(self, method: str, this_type: str, this_moid: str, args: str = "") -> ET.Element | None:
        """One small call: `<method>` on a managed object with already-escaped arguments; its returnval."""
        el = self.post(envelope(f'<{method} xmlns="urn:vim25">{this(this_type, this_moid)}{args}</{method}>'),
                       SMALL_MAX_BYTES)
        return el.find(NS + "returnval")

    # --- the session's life -------------------------------------------------------------

    def negotiate(self) -> None:
        """Speak the newest vim25 version both sides know (vimServiceVersions.xml, as every vSphere client
        reads it); a server without the document is spoken to without a version."""
        try:
            doc = self._request("GET", self.path.rstrip("/") + "/vimServiceVersions.xml", None,
                                lambda resp: _parse_stream(resp, None, None, SMALL_MAX_BYTES))
        except (http.client.HTTPException, SoapFaultError) as e:
            log.debug("no vimServiceVersions.xml (%s): speaking without a version", e)
            return
        offered = []
        for ns in doc.findall("namespace"):
            if ns.findtext("name") == "urn:vim25":
                offered += [v.text or "" for v in (ns.find("version"), *ns.findall("priorVersions/version"))
                            if v is not None]
        version = spoken_version(offered)
        if version:
            self.action = f'"urn:vim25/{version}"'

    def login(self, user: str, password: str) -> None:
        content = self.call("RetrieveServiceContent", "ServiceInstance", "ServiceInstance")
        if content is None:
            raise SoapFaultError("InvalidResponse", "RetrieveServiceContent answered without a ServiceContent")
        sc = value(content)
        if not isinstance(sc, Node):
            raise SoapFaultError("InvalidResponse", "RetrieveServiceContent answered without a ServiceContent")
        refs = {k: getattr(sc.get(k), "value", "") for k in ("propertyCollector", "viewManager", "rootFolder",
                                                             "perfManager", "sessionManager", "setting")}
        missing = [k for k in ("propertyCollector", "viewManager", "rootFolder", "perfManager", "sessionManager")
                   if not refs[k]]
        if missing:
            raise SoapFaultError("InvalidResponse", f"ServiceContent without {', '.join(missing)}")
        self.property_collector, self.view_manager = refs["propertyCollector"], refs["viewManager"]
        self.root_folder, self.perf_manager = refs["rootFolder"], refs["perfManager"]
        self.session_manager, self.setting = refs["sessionManager"], refs["setting"]
        self.call("Login", "SessionManager", self.session_manager,
                  f"<userName>{escape(user)}</userName><password>{escape(password)}</password>")
        self.read_clock()
        self.max_query_metrics = self._max_query_metrics()

    def read_clock(self) -> float:
        """vCenter's clock (CurrentTime) minus ours, in seconds, taken against the middle of the call (its
        error is half the round trip); server_now() follows it until the next reading. The collector reads
        it each cycle: a vCenter clock stepped by NTP is seen at once."""
        asked = time.time()
        now = self.call("CurrentTime", "ServiceInstance", "ServiceInstance")
        if now is None or not now.text:
            raise SoapFaultError("InvalidResponse", "CurrentTime answered without a time")
        self.server_offset_s = _epoch(now.text) - (asked + time.time()) / 2
        return self.server_offset_s

    def _max_query_metrics(self) -> int:
        """vCenter's limit on metrics per QueryPerf call; 0 when unset, unlimited (-1) or not a vCenter."""
        if not self.setting:
            return 0
        try:
            rv = self.call("QueryOptions", "OptionManager", self.setting,
                           "<name>config.vpxd.stats.maxQueryMetrics</name>")
        except SoapFaultError as e:
            if e.name == "InvalidName":
                return 0
            raise
        found = to_int(rv.findtext(NS + "value") if rv is not None else None)
        return found if found and found > 0 else 0

    def close(self) -> None:
        try:
            if self.cookie and self.session_manager:
                self.call("Logout", "SessionManager", self.session_manager)
        except Exception:  # the session may already be gone; closing must not fail
            log.debug("logout failed", exc_info=True)
        finally:
            self._drop_all()


def spoken_version(offered: list[str]) -> str | None:
    """The newest of the server's vim25 versions that is not newer than NEWEST_API."""
    usable = [v for v in offered if _version(v) and _version(v) <= NEWEST_API]
    return max(usable, key=_version) if usable else None


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(".")) if re.fullmatch(r"\d+(\.\d+)*", text or "") else ()


def _epoch(text: str) -> float:
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise SoapFaultError("InvalidResponse", f"CurrentTime answered {text[:40]!r}") from None


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
    """The answer's document root; with `tag`, each such element is handed to `handle` when complete, then
    emptied, so a bulk answer is never held whole as a tree. Without, the tree is built by the C parser
    alone (no event per element: a page of VMs' device lists parses in seven eighths of the time) and
    its elements are bounded by counting start tags in the bytes before they are parsed."""
    if tag is None:
        return _parse_whole(resp, limit)
    prolog = _Prolog()
    parser = ET.XMLPullParser(events=("end",))
    root: ET.Element | None = None
    elements, max_elements = 0, _max_elements(limit)

    def drain() -> None:
        nonlocal root, elements
        for _, el in parser.read_events():
            elements += 1
            if el.tag == tag:
                handle(el)  # type: ignore[misc]
                el.clear()
            root = el  # the last element to end is the document's root
        if elements > max_elements:
            raise _too_many(max_elements)
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
        raise _refused(e) from None
    if root is None:
        raise SoapFaultError("InvalidResponse", "an answer without a document")
    return root


def _parse_whole(resp: http.client.HTTPResponse, limit: int) -> ET.Element:
    """The answer as one tree. Every element has one start tag, `<` not followed by `/` (a comment or
    processing instruction counts too, and a `</` cut between two chunks counts once: never fewer than
    the elements), so the count is checked before a chunk is parsed."""
    prolog = _Prolog()
    parser = ET.XMLParser()
    starts, max_elements = 0, _max_elements(limit)
    try:
        for chunk in _body(resp, limit):
            prolog.feed(chunk)
            starts += chunk.count(b"<") - chunk.count(b"</")
            if starts > max_elements:
                raise _too_many(max_elements)
            parser.feed(chunk)
        return parser.close()
    except ET.ParseError as e:
        if not starts:
            raise SoapFaultError("InvalidResponse", "an answer without a document") from None
        raise SoapFaultError("InvalidResponse", f"unparsable SOAP response: {e}") from None
    except DefusedXmlException as e:
        raise _refused(e) from None


def _max_elements(limit: int) -> int:
    return max(limit // BYTES_PER_ELEMENT, 1)


def _too_many(max_elements: int) -> SoapFaultError:
    return SoapFaultError("InvalidResponse", f"answer of more than {max_elements} elements "
                                             f"(max_response_bytes / {BYTES_PER_ELEMENT})")


def _refused(e: DefusedXmlException) -> SoapFaultError:
    return SoapFaultError("InvalidResponse", f"refused XML: {type(e).__name__} (a DOCTYPE)")


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
        session = Session(self.cfg.url, tls_context(self.cfg), self.timeout_s, self.cfg.max_response_bytes)
        try:
            session.negotiate()
            session.login(self.cfg.user, password)
            return session
        except ssl.SSLCertVerificationError as e:
            raise CollectorError(
                f"vcenter {name}: TLS certificate of {self.cfg.url} is not trusted ({e.verify_message}); "
                "give its CA in ca_file, or set verify_tls = false to skip verification") from None
        except SoapFaultError as e:
            session.close()
            if e.name == "InvalidLogin":
                raise CollectorError(f"vcenter {name}: login refused for user {self.cfg.user!r}") from None
            raise CollectorError(f"vcenter {name}: login failed: {e}") from None
        except (OSError, http.client.HTTPException, ssl.SSLError) as e:
            session.close()
            raise CollectorError(f"vcenter {name}: cannot reach {self.cfg.url}: {_reason(e)}") from None


def _reason(e: BaseException) -> str:
    return getattr(e, "strerror", None) or str(e) or type(e).__name__
