"""Start and stop the Go vSphere scenario simulator (tests/infra/vsphere-sim) for tests and benches; read a recorded
SOAP answer as the collector reads one off the wire."""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import ssl
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

ROOT = Path(__file__).resolve().parents[2]
BINARY = ROOT / "build" / "vsphere-sim"
MODELS_BINARY = ROOT / "build" / "vcsim-models"


def ensure_built(binary: Path = BINARY) -> Path:
    """`make vsphere-sim` (or `make vcsim-models`): a no-op when the binary is newer than its sources."""
    subprocess.run(["make", "-s", "-C", str(ROOT), binary.name], check=True)
    return binary



def process_cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds a live process has used so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

def one_host(luns: dict[str, str], vms: list[dict[str, Any]], perf: dict[str, Any]) -> dict[str, Any]:
    """A scenario of one host, esx01 (2 sockets of 8 cores, hyperthreaded, 256 GiB), running `vms`, each VM
    on a datastore of its own (`ds_<vm>`) over its LUN (`luns`: VM name -> NAA id); `perf` the host's."""
    return {"datacenter": "DC1",
            "datastores": [{"name": f"ds_{vm}", "type": "VMFS", "capacity_gb": 1024, "free_gb": 512, "luns": [lun]}
                           for vm, lun in luns.items()],
            "hosts": [{"name": "esx01", "cluster": "prod", "cpu_sockets": 2, "cpu_cores": 16, "cpu_threads": 32,
                       "cpu_mhz": 2600, "memory_mb": 262144, "numa_nodes": 2, "hyperthreading": True, "perf": perf,
                       "vms": vms}]}


class Simulator:
    """One simulator process on 127.0.0.1; `stop()` always ends it."""

    def __init__(self, scenario: Path, listen: str = "127.0.0.1:0", esx: bool = False, start_timeout: float = 120):
        self.scenario = scenario
        self.listen = listen
        self.esx = esx
        self.start_timeout = start_timeout
        self.proc: subprocess.Popen | None = None
        self.url = ""
        self._tmp = ""

    @classmethod
    def of(cls, scenario: dict[str, Any], directory: Path, **kw: Any) -> Simulator:
        """A simulator (not started) of this scenario, its file written in `directory`."""
        path = directory / "scenario.json"
        path.write_text(json.dumps(scenario))
        return cls(path, **kw)

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1].split("/", 1)[0])

    def command(self) -> list[str]:
        args = [str(ensure_built()), "--scenario", str(self.scenario), "--listen", self.listen]
        return [*args, "--esx"] if self.esx else args

    def start(self) -> Simulator:
        args = self.command()
        # its datastore folders go in a TMPDIR of our own, removed even after a SIGKILL
        self._tmp = tempfile.mkdtemp(prefix="vsphere-sim-")
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env={**os.environ, "TMPDIR": self._tmp})
        deadline = time.monotonic() + self.start_timeout
        line = ""
        while time.monotonic() < deadline and self.proc.poll() is None:
            line = self.proc.stdout.readline()  # the first line is the URL
            if line:
                break
        if not line.startswith("URL="):
            err = self.proc.stderr.read() if self.proc.poll() is not None else ""
            self.stop()
            raise RuntimeError(f"vsphere-sim did not start: {line!r} {err[-2000:]}")
        self.url = line.strip().removeprefix("URL=")
        return self

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def kill(self) -> None:
        """SIGKILL, as a crashed vCenter: no goodbye to clients."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        shutil.rmtree(self._tmp, ignore_errors=True)

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        for f in (self.proc.stdout, self.proc.stderr):
            if f:
                f.close()
        shutil.rmtree(self._tmp, ignore_errors=True)

    def stats(self) -> dict[str, Any]:
        """SOAP calls served so far, by method (the simulator's own count)."""
        ctx = ssl._create_unverified_context()
        with urllib.request.urlopen(self.url.replace("/sdk", "/sim/stats"), context=ctx, timeout=10) as r:
            return json.loads(r.read())

    def vcenter_only(self, d: Path, extra: str = "") -> Path:
        """A config in `d` with only this simulator as `[[vcenter]]` (its certificate as the CA, the password in
        VC1_PASSWORD), the guest off and a store no agent recorded in (triage reads vCenter's hour); `extra`
        appended."""
        ca = d / "sim-ca.pem"
        ca.write_text(ssl.get_server_certificate(("127.0.0.1", self.port)))
        path = d / "vc.toml"
        path.write_text(f'[store]\npath = "{d / "none.db"}"\n[guest]\nenabled = false\n[[vcenter]]\nname = "vc1"\n'
                        f'url = "{self.url}"\nuser = "monitor"\npassword_env = "VC1_PASSWORD"\nca_file = "{ca}"\n'
                        + extra)
        return path

    def cpu_seconds(self) -> float:
        assert self.proc is not None
        return process_cpu_seconds(self.proc.pid)

    def __enter__(self) -> Simulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class Model(Simulator):
    """One of govmomi's own simulator models served unpatched (tests/infra/vcsim-models): `vpx` (simulator.VPX(), a
    vCenter) or `esx` (simulator.ESX(), a standalone ESXi host), no scenario."""

    def __init__(self, model: str, listen: str = "127.0.0.1:0", start_timeout: float = 120):
        super().__init__(Path(), listen, esx=model == "esx", start_timeout=start_timeout)
        self.model = model

    def command(self) -> list[str]:
        return [str(ensure_built(MODELS_BINARY)), "--model", self.model, "--listen", self.listen]


def soap_body(data: bytes) -> ET.Element:
    """The first element of a SOAP answer's Body, parsed as the collector parses one off the wire: a Fault or
    malformed XML raises SoapFaultError."""
    from db2vtop.collectors.vsphere.connection import _first, _parse_stream
    return _first(_parse_stream(Answer(data), None, None, max(len(data), 1)))


class Answer:
    """What the collector's parser reads of an HTTP response: its body, in chunks, and its Content-Encoding."""

    def __init__(self, body: bytes, encoding: str = ""):
        self.body = io.BytesIO(body)
        self.encoding = encoding

    def read(self, n: int) -> bytes:
        return self.body.read(n)

    def getheader(self, name: str, default: str = "") -> str:
        return self.encoding if name == "Content-Encoding" and self.encoding else default
