"""The vSphere session (pyvmomi's) against what stands between the agent and a real vCenter, in the collector
and in real agent processes on the real simulator: a reverse proxy that closes idle keep-alive connections,
sessions that end or lose their own objects, a version document that answers 503, an HTTP CONNECT proxy, an
ESXi host whose certificate names only itself.

Before: cycles after an idle period failed with SSLEOFError and logged in again; a session's lost view or
collector failed every cycle; a 503 on vimServiceVersions.xml made the session speak unversioned urn:vim25;
HTTPS_PROXY was ignored, and a certificate could only be trusted through a CA or not verified at all.
"""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import os
import signal
import ssl
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from db2vtop.agent.config import load_config
from db2vtop.agent.gather import look_now
from db2vtop.collectors.base import CollectorError
from db2vtop.collectors.vsphere.collector import VSphereCollector
from db2vtop.collectors.vsphere.config import VCenterConfig
from db2vtop.collectors.vsphere.connection import Connector, PinError
from tests.faults.agent import AGENT, ROOT
from tests.faults.hostile_vcenter import HostileVCenter
from tests.faults.tcp_peers import ConnectProxy, IdleClosingRelay
from tests.infra.vsphere_sim import Simulator

SCENARIO = {"hosts": [{"name": "esx01", "vms": [{"name": "db01", "perf": {"cpu.ready.summation": 800}},
                                                 {"name": "db02"}]}]}
ENV = {"VC_TEST_PASSWORD": "anything"}


@pytest.fixture(autouse=True)
def password(monkeypatch):
    for k, v in ENV.items():
        monkeypatch.setenv(k, v)


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    with Simulator.of(SCENARIO, tmp_path_factory.mktemp("sim")) as s:
        yield s


def config(d: Path, url: str, extra: str = "") -> Path:
    d.mkdir(parents=True, exist_ok=True)
    cfg = d / "config.toml"
    cfg.write_text(f'[store]\npath = "{d / "m.db"}"\n[guest]\nenabled = false\n[[vcenter]]\nname = "vc1"\n'
                   f'url = "{url}"\nuser = "monitor"\npassword_env = "VC_TEST_PASSWORD"\n{extra}\n')
    return cfg


def once(d: Path, url: str, extra: str = "", env: dict[str, str] | None = None) -> tuple[int, str]:
    """`db2vtop agent --once` of one [[vcenter]]: its exit status and its log."""
    done = subprocess.run([*AGENT, "agent", "--once", "-c", str(config(d, url, extra))], cwd=ROOT, timeout=120,
                          capture_output=True, text=True, env={**os.environ, **ENV, **(env or {})})
    return done.returncode, done.stdout + done.stderr


def calls(sim: Simulator, method: str) -> int:
    return sim.stats()["methods"].get(method, 0)


def cycles(cfg: VCenterConfig, n: int, between: Callable[[int], None]) -> int:
    """`n` cycles of one collector, `between(i)` after cycle i (each must succeed), then its close: its logins."""
    async def go() -> int:
        c = VSphereCollector(cfg)
        try:
            for i in range(n):
                c._inventory_at = 0.0  # each cycle as one a full interval after the last: the inventory is polled
                await c.collect()
                between(i)
            return c.logins
        finally:
            await c.close()
    return asyncio.run(go())


def test_connections_closed_while_idle_fail_no_cycle_and_log_in_once(tmp_path, sim):
    """vCenter's reverse proxy closes a kept-alive connection idle for a while; every cycle then finds its
    pooled connections dead. Each call is sent again on a fresh one: no cycle fails, the session is kept, and
    it is logged out at the end over a connection found dead too."""
    ca = tmp_path / "sim.pem"
    ca.write_text(ssl.get_server_certificate(("127.0.0.1", sim.port)))
    logins, logouts = calls(sim, "Login"), calls(sim, "Logout")
    with IdleClosingRelay(("127.0.0.1", sim.port), idle_s=0.5) as relay:
        cfg = VCenterConfig(name="vc1", url=f"https://127.0.0.1:{relay.port}/sdk", user="monitor",
                            password_env="VC_TEST_PASSWORD", ca_file=ca)
        assert cycles(cfg, 3, lambda _: time.sleep(1.2)) == 1  # past the relay's limit after each cycle
    assert relay.connections > 3  # connections were closed under it and opened again
    assert (calls(sim, "Login") - logins, calls(sim, "Logout") - logouts) == (1, 1)


def test_a_lost_session_costs_one_login_and_no_failed_cycle(sim):
    """The sessions end (SIGUSR1: every call then answers NotAuthenticated, as after vCenter's session
    timeout); later the session's own container view and property collector are gone while it still holds
    them (ManagedObjectNotFound). Each time: one new login within the next cycle, and that cycle is ok."""
    with HostileVCenter(sim.url) as front:
        def between(i: int) -> None:
            if i == 0:
                sim.signal(signal.SIGUSR1)
                time.sleep(0.5)  # delivered
            elif i == 1:  # the watch's collector is made by then
                front.destroy_own_objects()
        logins = calls(sim, "Login")
        cfg = VCenterConfig(name="vc1", url=front.url, user="monitor", password_env="VC_TEST_PASSWORD",
                            allow_plaintext=True)
        assert cycles(cfg, 3, between) == 3
    assert calls(sim, "Login") - logins == 3


def test_a_version_document_answering_503_is_a_clear_error(tmp_path, sim):
    with HostileVCenter(sim.url) as front:
        front.faults = {"vimServiceVersions.xml": "503"}
        status, log = once(tmp_path, front.url, "allow_plaintext = true")
        assert front.hits.get("vimServiceVersions.xml")
        assert status == 1, log[-2000:]  # --once: a collector failed
        assert (f"vcenter vc1: {front.url}/vimServiceVersions.xml answered HTTP 503 Service Unavailable: cannot "
                "tell which API version to speak") in log, log[-2000:]
        assert "Traceback" not in log
        front.faults = {}
        status, log = once(tmp_path, front.url, "allow_plaintext = true")
        assert status == 0, log[-2000:]


def test_a_proxy_carries_every_call_when_set_and_none_when_not(tmp_path, sim):
    """The vCenter's name resolves only at the proxy: a session that reached it at all went through it."""
    name = "vcenter.behind-the-proxy.invalid"
    url = f"https://{name}:{sim.port}/sdk"
    with ConnectProxy({name: "127.0.0.1"}) as proxy:
        status, log = once(tmp_path / "key", url, f'proxy = "{proxy.url}"\nverify_tls = false')
        assert status == 0, log[-2000:]
        assert proxy.tunnels and set(proxy.tunnels) == {f"{name}:{sim.port}"}
        status, log = once(tmp_path / "env", url, "verify_tls = false", env={"HTTPS_PROXY": proxy.url})
        assert status == 0, log[-2000:]  # the environment's, as curl and pip read it
        through = len(proxy.tunnels)
        status, log = once(tmp_path / "direct", sim.url, "verify_tls = false")
        assert status == 0, log[-2000:]
        status, log = once(tmp_path / "bypass", sim.url, "verify_tls = false",
                           env={"HTTPS_PROXY": proxy.url, "NO_PROXY": "127.0.0.1"})
        assert status == 0, log[-2000:]
        assert len(proxy.tunnels) == through  # none without a proxy, or for a host no_proxy names


def cn_only_certificate(d: Path) -> tuple[Path, Path, bytes]:
    """A self-signed certificate naming its host only by CN, as ESXi's own: (cert, key, DER)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "esx01.localdomain")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=30)).sign(key, hashes.SHA256()))
    cert_path, key_path = d / "esx.pem", d / "esx.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path, cert.public_bytes(serialization.Encoding.DER)


def test_a_cn_only_self_signed_certificate_is_trusted_by_its_thumbprint_alone(tmp_path, sim):
    """The right thumbprint in a real agent; the others where the agent logs in (its Connector: one process, not
    five agents' start-up)."""
    cert, key, der = cn_only_certificate(tmp_path)
    sha256 = hashlib.sha256(der).hexdigest().upper()

    def login(**tls: object) -> str:
        """Logged in with these settings: "" (and logged out), or the error the agent would log."""
        cfg = VCenterConfig(name="vc1", url=esx.url, user="monitor", password_env="VC_TEST_PASSWORD", **tls)
        try:
            Connector(cfg, 20).connect().close()
        except CollectorError as e:
            return str(e)
        return ""

    with HostileVCenter(sim.url, cert=str(cert), key=str(key)) as esx:
        pinned = ":".join(sha256[i:i + 2] for i in range(0, 64, 2))  # as vSphere and openssl show it
        status, log = once(tmp_path / "right", esx.url, f'thumbprint = "{pinned}"')
        assert status == 0, log[-2000:]
        assert "Traceback" not in log
        assert login(thumbprint=hashlib.sha1(der).hexdigest()) == ""  # vCenter's older screens show SHA-1
        assert login(thumbprint=hashlib.sha256(b"another certificate").hexdigest()) == (
            f"vcenter vc1: the TLS certificate of {esx.url} is not the one thumbprint pins: its SHA-256 "
            f"thumbprint is {pinned}")
        assert f"TLS certificate of {esx.url} is not trusted" in login()  # default verification
        assert f"TLS certificate of {esx.url} is not trusted" in login(ca_file=cert)  # its name is not 127.0.0.1


def test_a_certificate_changed_under_a_pinned_session_is_refused_at_its_next_connection(tmp_path, sim):
    """Each new connection is checked against the thumbprint, not only the first (pyvmomi's own check runs only
    where CA verification failed, and turns it off for every later connection of the stub)."""
    cert, key, der = cn_only_certificate(tmp_path)
    (tmp_path / "other").mkdir()
    other_cert, other_key, _ = cn_only_certificate(tmp_path / "other")
    with HostileVCenter(sim.url, cert=str(cert), key=str(key)) as esx:
        cfg = VCenterConfig(name="vc1", url=esx.url, user="monitor", password_env="VC_TEST_PASSWORD",
                            thumbprint=hashlib.sha256(der).hexdigest())
        session = Connector(cfg, 20).connect()
        try:
            assert session.call("CurrentTime", "ServiceInstance", "ServiceInstance") is not None
            esx.present(str(other_cert), str(other_key))  # another machine answers from now on
            session.stub.DropConnections()  # so the next call opens a connection
            with pytest.raises(PinError, match="is not the one thumbprint pins"):
                session.call("CurrentTime", "ServiceInstance", "ServiceInstance")
        finally:
            esx.present(str(cert), str(key))
            session.close()


def test_triage_and_stacks_reading_a_vcenter_now_log_out(tmp_path, sim):
    """`db2vtop triage` and `stacks` read the sources once (look_now), as an agent's cycle does; their session is
    logged out when they are done, not left to vCenter's idle timeout against its session limit."""
    logins, logouts = calls(sim, "Login"), calls(sim, "Logout")
    look = look_now(load_config(config(tmp_path, sim.url, "verify_tls = false")), 600.0, facts_only=True)
    assert look.sources == {"vsphere:vc1": "ok: 4 facts"}
    assert (calls(sim, "Login") - logins, calls(sim, "Logout") - logouts) == (1, 1)
