"""One logged-in session to a vCenter or ESXi host: pyvmomi's, with the bulk reads in raw SOAP.

pyvmomi's SoapStubAdapter holds the session: its pool of kept-alive connections (direct, or through an HTTP
CONNECT proxy), their TLS context, the session cookie and the API version every request names; Login,
LoginByToken (a SAML bearer token in the WS-Security header) and Logout are its typed calls. Everything else
the collector asks is written out here (soapxml.envelope) and parsed with ElementTree as it arrives: the bulk
reads (RetrievePropertiesEx, WaitForUpdatesEx, QueryPerf) because pyvmomi's pure-Python deserializer costs
~8 ms per VM, and the small calls around them (RetrieveServiceContent, CurrentTime, QueryOptions,
CreateContainerView, the event log's calls) because a typed ServiceContent makes pyvmomi build the classes
of every object it names.

What pyvmomi does not do is here. Every call, pyvmomi's typed ones too, goes through one transport
(_Stub.exchange), the one place a call's connection lives:
- an answer is input from outside and bounded as it arrives: at most `max_response_bytes` of XML once inflated
  (a gzip bomb stops there, not in memory) and a sixteenth of that in elements, and never a DOCTYPE
  (defusedxml reads the prolog; vSphere never sends one, and entity expansion would otherwise depend on the
  expat the interpreter links). The small calls (the version document, the service content, login, the clock,
  options) answer a few KB and are held to SMALL_MAX_BYTES. Past either bound the call fails with
  SoapFaultError InvalidResponse;
- a kept-alive connection the server closed while it idled (vCenter's reverse proxy does) is found dead only
  when a call is sent on it: the call is sent once more, on a fresh connection, before it fails;
- a pinned thumbprint is checked on every connection, in place of the CA and the host name (pyvmomi checks it
  only after CA verification failed, and then turns verification off in the context every later connection
  shares: those are never checked at all);
- vimServiceVersions.xml answering anything but 200 is an error naming its URL and status (pyVim's
  SmartConnect says only "is down or is not a VIM server");
- each call is one deadline (agent/core/deadline.py) of the collector's timeout, and no later than its cycle's
  end, over all of it: connecting, the request (sent again included), every byte of the answer. pyvmomi's
  socket timeout bounds one read only, so a vCenter that trickled its answer (a byte a second) held the
  collector's worker for as long as it liked and every later cycle was skipped; when the deadline passes the
  call's socket is shut down from outside, the call fails with "timed out after", the pool is dropped and the
  next call connects afresh.

Memory: pyVmomi registers, when imported, the types of every API it ships (vim, and pbm, sms, eam, vslm, vSAN
health); it imports each of their modules only if it can, and the collector needs vim and the core alone, so
the others are marked absent before it is imported: an agent's session costs 4.3 MB of peak RSS more than the
hand-written one did, instead of 7.3 (`agent --once` of 40 VMs, pyvmomi 9.1). Its typed ServiceContent would
add 1.8 MB more.

The password or token is resolved only when logging in, and never appears in a message.
"""

from __future__ import annotations

import http.client
import logging
import re
import ssl
import sys
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from datetime import datetime
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import urlparse
from urllib.request import getproxies_environment, proxy_bypass_environment
from xml.etree import ElementTree as ET
from xml.parsers.expat import ExpatError

from defusedxml import DefusedXmlException
from defusedxml.ElementTree import DefusedXMLParser

from db2vtop.agent.core.clock import CLOCK
from db2vtop.agent.core.deadline import Deadline, DeadlineError, deadline
from db2vtop.agent.core.secrets import SecretError
from db2vtop.collectors.base import CollectorError
from db2vtop.collectors.vsphere.config import VCenterConfig
from db2vtop.collectors.vsphere.soapxml import NS, Node, envelope, this, to_int, value

for _api in ("eam", "pbm", "sms", "vslm", "vsanhealth"):  # see "Memory" above; a no-op once pyVmomi is imported
    sys.modules.setdefault(f"pyVmomi._typeinfo_{_api}", None)  # type: ignore[arg-type]

from pyVmomi import vim, vmodl  # noqa: E402
from pyVmomi.Security import ThumbprintMismatchException, VerifyCertThumbprint  # noqa: E402
from pyVmomi.SoapAdapter import COOKIE_NAME, SoapResponseDeserializer, SoapStubAdapter  # noqa: E402
from pyVmomi.VmomiSupport import GetServiceVersions, versionIdMap  # noqa: E402

log = logging.getLogger(__name__)

_SOAP_NS = "{http://schemas.xmlsoap.org/soap/envelope/}"
_XSI_TYPE = "{http://www.w3.org/2001/XMLSchema-instance}type"
#: the most one answer may hold once inflated, unless [[vcenter]] max_response_bytes says otherwise
MAX_RESPONSE_BYTES = 64 * 2**20
#: the small calls' answers (version document, service content, login, clock, options: a few KB each)
SMALL_MAX_BYTES = 2**20
#: elements an answer may hold: a sixteenth of its byte bound (empty elements cost far more memory than text). Real
#: answers are denser than the thirty-second this was: 26-132 bytes per element over the 472 distinct XML answers
#: recorded against vCenter 5.5-8.0.3 (every version of pyvmomi's test cassettes, those of VMware's 5.5 simulator left
#: out; the densest a version document, 26.3), the densest SOAP answer an ESXi 8.0.3 host's systemResources (27.1),
#: then a 6.7 host's hardware (29.6) and host configs (32.2-32.7); a sixteenth leaves the densest SOAP answer 1.7 to
#: spare
BYTES_PER_ELEMENT = 16
#: the newest vim25 API version this collector's requests and parsers were written against: a newer
#: server is spoken to in this version (it answers in the types this code knows), an older one in its own
NEWEST_API = (8, 0, 3, 0)
#: the version a stub starts with, before vimServiceVersions.xml is read (pyvmomi never moves a stub to an
#: older version than the one it has)
_BASE_VERSION = "vim.version.version1"
#: what a kept-alive connection the server closed while it idled raises when a request is sent on it
_DEAD = (ConnectionResetError, BrokenPipeError, ConnectionAbortedError, ssl.SSLEOFError, ssl.SSLZeroReturnError)
#: the method a SOAP request calls: the first element in its Body
_CALLED = re.compile(rb"<soapenv:Body><(?:\w+:)?(\w+)")


class SoapFaultError(CollectorError):
    """A fault (or a malformed answer) from a SOAP call; `name` is the vim fault type, `obj` the managed
    object a ManagedObjectNotFound names. `session_lost`: the session is gone (log in again)."""

    def __init__(self, name: str, message: str, obj: str = ""):
        super().__init__(f"{name}: {message}" if message else name)
        self.name, self.obj = name, obj
        self.session_lost = name == "NotAuthenticated"


class HTTPStatusError(http.client.HTTPException):
    def __init__(self, status: int, reason: str):
        super().__init__(f"HTTP {status} {reason}".strip())
        self.status = status


class PinError(ssl.SSLError):
    """A certificate that is not the one `thumbprint` pins."""

    def __str__(self) -> str:
        return str(self.args[0])


def is_session_lost(e: BaseException) -> bool:
    """The session expired, was ended, or lost its own view or collector: log in again and retry."""
    return isinstance(e, SoapFaultError) and e.session_lost


def is_unreachable(e: BaseException) -> bool:
    return isinstance(e, OSError | http.client.HTTPException | ssl.SSLError)


def tls_context(cfg: VCenterConfig) -> ssl.SSLContext:
    if not cfg.verify_tls or cfg.thumbprint:
        # explicit opt-out, warned about at start; or the thumbprint, checked on every connection, is the trust
        return ssl._create_unverified_context()
    try:
        return ssl.create_default_context(cafile=str(cfg.ca_file) if cfg.ca_file else None)
    except (OSError, ssl.SSLError) as e:
        raise CollectorError(f"vcenter {cfg.name}: cannot load ca_file {cfg.ca_file}: {e}") from None


def proxy_of(cfg: VCenterConfig) -> str | None:
    """The HTTP proxy the session goes through: `proxy`, else the environment's (https_proxy / HTTPS_PROXY for
    an https:// url, http_proxy for http://, unless no_proxy names the host), as curl and pip read them."""
    if cfg.proxy:
        return cfg.proxy
    u = urlparse(cfg.url)
    found = getproxies_environment().get(u.scheme)
    if not found or proxy_bypass_environment(u.hostname or ""):
        return None
    if "://" not in found:
        found = "http://" + found
    p = urlparse(found)
    if p.scheme != "http" or not p.hostname or p.username is not None:
        raise CollectorError(f"vcenter {cfg.name}: the {u.scheme}_proxy of the environment is not an http:// "
                             "proxy URL without credentials (what db2vtop can use); set proxy in [[vcenter]]")
    return found


class _Stub(SoapStubAdapter):
    """pyvmomi's stub (its pool, proxy tunnel, TLS context, cookie and version) with every call carried by
    exchange(), pyvmomi's typed ones too (InvokeMethod), and a pinned thumbprint checked on each connection."""

    def __init__(self, url: str, context: ssl.SSLContext, timeout_s: float, pool: int,
                 thumbprint: str | None = None, proxy: str | None = None):
        p = urlparse(proxy) if proxy else None
        super().__init__(url=url, version=_BASE_VERSION, sslContext=context, httpConnectionTimeout=timeout_s,
                         poolSize=pool, thumbprint=thumbprint,
                         httpProxyHost=p.hostname if p else None, httpProxyPort=(p.port or 80) if p else 80)
        self.url, self.timeout_s = url, timeout_s
        self.where = urlparse(url).hostname or url  # vCenter's, through a proxy too

    def GetConnection(self) -> http.client.HTTPConnection:  # noqa: N802 - pyvmomi's name
        conn = super().GetConnection()
        if self.thumbprint:
            try:
                VerifyCertThumbprint(conn.sock.getpeercert(True), self.thumbprint)
            except ThumbprintMismatchException as e:
                conn.close()
                raise PinError(f"the TLS certificate of {self.url} is not the one thumbprint pins: its "
                               f"{_DIGESTS[len(e.expected)]} thumbprint is {_colons(e.actual)}") from None
        return conn

    def exchange(self, method: str, path: str, body: bytes | None, read: Callable[[http.client.HTTPResponse], Any],
                 ok: tuple[int, ...] = (200, 500)) -> Any:
        """One HTTP exchange on a pooled connection: `read(response)` once its status is one of `ok`. A
        connection the server closed while it idled is dropped, with the pool (its other connections idled as
        long), and the request sent once more on a fresh one; any other connection error drops the pool. The
        whole exchange is one deadline (see the module's docstring)."""
        called = _CALLED.search(body) if body else None
        what = f"{called.group(1).decode() if called else method + ' ' + path} to {self.where}"
        try:
            with deadline(self.timeout_s, what) as d:
                return self._exchange(d, method, path, body, read, ok)
        except DeadlineError:
            self.DropConnections()
            raise

    def _exchange(self, d: Deadline, method: str, path: str, body: bytes | None,
                  read: Callable[[http.client.HTTPResponse], Any], ok: tuple[int, ...]) -> Any:
        for attempt in (1, 2):
            conn = self.GetConnection()  # a new one connects within the socket timeout (its TLS handshake too)
            if conn.sock is not None:
                d.guard(conn.sock)
            headers = {"Content-Type": "text/xml; charset=UTF-8", "Accept-Encoding": "gzip"}
            if body is not None:
                headers["SOAPAction"] = self.versionId
            if self.cookie:
                headers["Cookie"] = self.cookie
            try:
                conn.request(method, path, body, headers)
                resp = conn.getresponse()
            except _DEAD as e:
                conn.close()
                self.DropConnections()
                if attempt == 2 or d.expired:
                    raise
                log.debug("%s: a kept-alive connection was closed (%s); sending again on a new one", self.url,
                          type(e).__name__)
                continue
            except (OSError, http.client.HTTPException):
                conn.close()
                self.DropConnections()  # the server may have restarted: none of the kept connections is good
                raise
            try:
                for set_cookie in resp.headers.get_all("Set-Cookie") or ():
                    found = SimpleCookie(set_cookie).get(COOKIE_NAME)
                    if found is not None:
                        self.SetSessionId(found.value)
                if resp.status not in ok:
                    raise HTTPStatusError(resp.status, resp.reason)
                result = read(resp)
            except (OSError, http.client.HTTPException):
                conn.close()
                self.DropConnections()
                raise
            except BaseException:
                conn.close()  # an answer read only in part cannot be reused
                raise
            self.ReturnConnection(conn)
            return result
        raise AssertionError("unreachable")

    def InvokeMethod(self, mo: Any, info: Any, args: Any, outerStub: Any = None) -> Any:  # noqa: N802, N803
        """pyvmomi's typed call: its request and its reading of the answer, the answer bounded by exchange()."""
        body = self.SerializeRequest(mo, info, args)
        for modify in self.requestModifierList:
            body = modify(body)
        status, data = self.exchange("POST", self.path, body, lambda resp: (resp.status, _small(resp)))
        try:
            obj = SoapResponseDeserializer(outerStub or self).Deserialize(data, info.result)
        except (ExpatError, ValueError, TypeError, KeyError, AttributeError) as e:
            raise SoapFaultError("InvalidResponse", f"unreadable {info.wsdlName} answer: {e}") from None
        if status == 200:
            return obj
        if isinstance(obj, vmodl.MethodFault):
            raise obj
        raise SoapFaultError("InvalidResponse", f"{info.wsdlName} failed without a fault")


_DIGESTS = {40: "SHA-1", 64: "SHA-256", 128: "SHA-512"}


def _colons(hexdigest: str) -> str:
    return ":".join(hexdigest[i:i + 2] for i in range(0, len(hexdigest), 2)).upper()


class Session:
    """A vCenter's logged-in session: pyvmomi's stub, and the managed objects the collector talks to (from
    the ServiceContent). `owned` holds the objects this session made (its view, collector, filter): one the
    server no longer knows means the session was lost."""

    def __init__(self, url: str, context: ssl.SSLContext, timeout_s: float, max_bytes: int = MAX_RESPONSE_BYTES,
                 *, thumbprint: str | None = None, proxy: str | None = None, pool: int = 5):
        self.url = url
        self.stub = _Stub(url, context, timeout_s, pool, thumbprint, proxy)
        self.max_bytes = max_bytes  # one answer, inflated
        self.owned: set[str] = set()
        self.server_offset_s = 0.0     # server clock minus ours
        self.max_query_metrics = 0     # vCenter's config.vpxd.stats.maxQueryMetrics, 0 if unset/unlimited
        self.property_collector = self.view_manager = self.root_folder = ""
        self.perf_manager = self.session_manager = self.setting = self.event_manager = ""

    def server_now(self) -> float:
        return CLOCK.now() + self.server_offset_s

    # --- calls ------------------------------------------------------------------------

    def post_each(self, body: bytes, tag: str, handle: Callable[[ET.Element], None]) -> ET.Element:
        """POST one SOAP request and parse the answer as it arrives: each `tag` element is handed to
        `handle` as soon as it is complete, then emptied, so a bulk answer is never held whole as a
        tree. Returns the Body's first child (what is left of it); a Fault raises SoapFaultError."""
        return self._first(self.stub.exchange("POST", self.stub.path, body,
                                               lambda resp: _parse_stream(resp, tag, handle, self.max_bytes)))

    def post(self, body: bytes, limit: int | None = None) -> ET.Element:
        """POST one SOAP request on the session; returns the Body's first child (an answer of at most
        `limit` bytes, the session's max_bytes unless given)."""
        bound = limit or self.max_bytes
        return self._first(self.stub.exchange("POST", self.stub.path, body,
                                              lambda resp: _parse_stream(resp, None, None, bound)))

    def call(self, method: str, this_type: str, this_moid: str, args: str = "") -> ET.Element | None:
        """One small call: `<method>` on a managed object with already-escaped arguments; its returnval."""
        el = self.post(envelope(f'<{method} xmlns="urn:vim25">{this(this_type, this_moid)}{args}</{method}>'),
                       SMALL_MAX_BYTES)
        return el.find(NS + "returnval")

    def _first(self, root: ET.Element) -> ET.Element:
        try:
            return _first(root)
        except SoapFaultError as e:
            if e.name == "ManagedObjectNotFound" and e.obj in self.owned:
                e.session_lost = True
            raise

    # --- the session's life -------------------------------------------------------------

    def negotiate(self) -> None:
        """Speak the newest vim25 version both sides know (vimServiceVersions.xml, as every vSphere client
        reads it). A server that does not answer it is an error: speaking without a version would have it
        answer in its oldest types."""
        path = self.stub.path.rstrip("/") + "/vimServiceVersions.xml"
        u = urlparse(self.url)
        where = f"{u.scheme}://{u.netloc}{path}"
        try:
            doc = self.stub.exchange("GET", path, None, lambda resp: _parse_whole(resp, SMALL_MAX_BYTES), ok=(200,))
        except HTTPStatusError as e:
            raise CollectorError(f"{where} answered {e}: cannot tell which API version to speak") from None
        except SoapFaultError as e:
            raise CollectorError(f"{where}: {e}") from None
        offered = [v.text or "" for ns in doc.findall("namespace") if ns.findtext("name") == "urn:vim25"
                   for v in (ns.find("version"), *ns.findall("priorVersions/version")) if v is not None]
        version = spoken_version(offered)
        if version is None:
            raise CollectorError(f"{where} offers no vim25 API version this client speaks "
                                 f"(offered: {', '.join(offered[:8]) or 'none'})")
        self.stub.ComputeVersionInfo(_PYVMOMI_VERSIONS[version])

    def login(self, user: str, password: str | None = None, token: str | None = None) -> None:
        """Log in with the password, or with a SAML bearer token (LoginByToken, the token in the request's
        WS-Security header); then read the server's clock and vCenter's QueryPerf limit."""
        self._service_content()
        manager = vim.SessionManager(self.session_manager, self.stub)
        try:
            if token is None:
                manager.Login(user, password or "", None)
            else:
                self.stub.samlToken = token
                try:
                    manager.LoginByToken(None)
                finally:
                    self.stub.samlToken = None
        except vmodl.MethodFault as e:
            raise SoapFaultError(type(e)._wsdlName, e.msg or "") from None
        self.read_clock()
        self.max_query_metrics = self._max_query_metrics()

    def _service_content(self) -> None:
        content = self.call("RetrieveServiceContent", "ServiceInstance", "ServiceInstance")
        sc = value(content) if content is not None else None
        if not isinstance(sc, Node):
            raise SoapFaultError("InvalidResponse", "RetrieveServiceContent answered without a ServiceContent")
        refs = {k: getattr(sc.get(k), "value", "") for k in ("propertyCollector", "viewManager", "rootFolder",
                                                             "perfManager", "sessionManager", "setting",
                                                             "eventManager")}
        missing = [k for k in ("propertyCollector", "viewManager", "rootFolder", "perfManager", "sessionManager")
                   if not refs[k]]
        if missing:
            raise SoapFaultError("InvalidResponse", f"ServiceContent without {', '.join(missing)}")
        self.property_collector, self.view_manager = refs["propertyCollector"], refs["viewManager"]
        self.root_folder, self.perf_manager = refs["rootFolder"], refs["perfManager"]
        self.session_manager, self.setting = refs["sessionManager"], refs["setting"]
        self.event_manager = refs["eventManager"]

    def read_clock(self) -> float:
        """vCenter's clock (CurrentTime) minus ours, in seconds, taken against the middle of the call (its
        error is half the round trip); server_now() follows it until the next reading. The collector reads
        it each cycle: a vCenter clock stepped by NTP is seen at once."""
        asked = CLOCK.now()
        now = self.call("CurrentTime", "ServiceInstance", "ServiceInstance")
        if now is None or not now.text:
            raise SoapFaultError("InvalidResponse", "CurrentTime answered without a time")
        self.server_offset_s = _epoch(now.text) - (asked + CLOCK.now()) / 2
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
        """Log out (vCenter counts a session never logged out against its limit for as long as its idle
        timeout) and close the connections."""
        try:
            if self.stub.cookie and self.session_manager:
                vim.SessionManager(self.session_manager, self.stub).Logout()
        except Exception:  # the session may already be gone; closing must not fail
            log.debug("logout failed", exc_info=True)
        finally:
            self.stub.DropConnections()


def spoken_version(offered: list[str]) -> str | None:
    """The newest of the server's vim25 versions that pyvmomi knows and is not newer than NEWEST_API."""
    usable = [v for v in offered if v in _PYVMOMI_VERSIONS and _version(v) <= NEWEST_API]
    return max(usable, key=_version) if usable else None


#: pyvmomi's vim25 versions by the id vimServiceVersions.xml gives them ("8.0.3.0": "vim.version.v8_0_3_0")
_PYVMOMI_VERSIONS = {versionIdMap[v]: v for v in reversed(GetServiceVersions("vim25"))
                     if re.fullmatch(r"\d+(\.\d+)*", versionIdMap[v])}


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


def _small(resp: http.client.HTTPResponse) -> bytes:
    """A small answer whole, for pyvmomi to read: SMALL_MAX_BYTES at most, without a DOCTYPE."""
    prolog, chunks = _Prolog(), []
    try:
        for chunk in _body(resp, SMALL_MAX_BYTES):
            prolog.feed(chunk)
            chunks.append(chunk)
    except ET.ParseError as e:
        raise SoapFaultError("InvalidResponse", f"unparsable SOAP response: {e}") from None
    except DefusedXmlException as e:
        raise _refused(e) from None
    return b"".join(chunks)


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
    name, obj = "ServerFault", ""
    if detail is not None and len(detail):
        d = detail[0]
        name = d.get(_XSI_TYPE) or re.sub(r"^\{[^}]*\}", "", d.tag).removesuffix("Fault")
        name = name.split(":")[-1]
        obj = (d.findtext(NS + "obj") or "").strip()
    return SoapFaultError(name, message, obj)


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
        cfg, name = self.cfg, self.cfg.name
        password = token = None
        try:
            if (ref := cfg.token()) is not None:
                token = ref.resolve()
            elif (ref := cfg.password()) is not None:
                password = ref.resolve(cfg.user)
        except SecretError as e:
            raise CollectorError(f"vcenter {name}: {'token' if cfg.token() else 'password'}: {e}") from None
        proxy = proxy_of(cfg)
        via = f" through the proxy {proxy}" if proxy else ""
        session = Session(cfg.url, tls_context(cfg), self.timeout_s, cfg.max_response_bytes,
                          thumbprint=cfg.thumbprint, proxy=proxy, pool=cfg.workers + 2)
        try:
            session.negotiate()
            session.login(cfg.user, password, token)
            return session
        except ssl.SSLCertVerificationError as e:
            raise CollectorError(
                f"vcenter {name}: TLS certificate of {cfg.url} is not trusted ({e.verify_message}); give its CA "
                "in ca_file, pin it with thumbprint, or set verify_tls = false to skip verification") from None
        except PinError as e:
            raise CollectorError(f"vcenter {name}: {e}") from None
        except SoapFaultError as e:
            session.close()
            if e.name == "InvalidLogin":
                refused = "login by token refused" if token is not None else f"login refused for user {cfg.user!r}"
                raise CollectorError(f"vcenter {name}: {refused}") from None
            raise CollectorError(f"vcenter {name}: login failed: {e}") from None
        except CollectorError as e:
            session.close()
            raise CollectorError(f"vcenter {name}: {e}") from None
        except (OSError, http.client.HTTPException, ssl.SSLError) as e:
            session.close()
            raise CollectorError(f"vcenter {name}: cannot reach {cfg.url}{via}: {_reason(e)}") from None


def _reason(e: BaseException) -> str:
    return getattr(e, "strerror", None) or str(e) or type(e).__name__
