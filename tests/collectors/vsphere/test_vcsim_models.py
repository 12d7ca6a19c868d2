"""db2vtop against govmomi's own simulator models, unpatched (tests/infra/vcsim-models): simulator.VPX(), a vCenter, and
simulator.ESX(), a standalone ESXi host, with the storage data govmomi captured from real hosts. No scenario of ours
shaped them. `agent --once`, `query`, `triage` and `stacks` name every VM, host, datastore and LUN exactly as the
API names them (read here with pyvmomi, not with db2vtop's parser), the hosts' LUN facts are complete, and the MPIO
and queue-depth rules judge them."""

from __future__ import annotations

import json
import re
import ssl

import pytest
from pyVim.connect import Disconnect, SmartConnect
from pyVmomi import vim, vmodl

from db2vtop.agent.core.store import Store
from db2vtop.checks.rule import FactIndex
from db2vtop.checks.rules.vsphere import HbaQueueDepth, MultipathRoundRobin, RedundantPaths
from tests.conftest import run_cli
from tests.infra.vsphere_sim import Model

ENV = {"VC1_PASSWORD": "anything"}


def the_api(url: str) -> dict:
    """Names and storage as the API gives them, read with pyvmomi: VMs, hosts (each device: scsiLun joined to
    multipathInfo by key), datastores (with the canonical names of their VMFS extents, if any)."""
    host, port = re.match(r"https://([^:/]+):(\d+)/", url).groups()
    si = SmartConnect(host=host, port=int(port), user="monitor", pwd="x", sslContext=ssl._create_unverified_context())
    try:
        content = si.RetrieveContent()
        pc = vmodl.query.PropertyCollector

        def rows(kind, paths):
            view = content.viewManager.CreateContainerView(content.rootFolder, [kind], True)
            spec = pc.FilterSpec(objectSet=[pc.ObjectSpec(obj=o) for o in view.view],
                                 propSet=[pc.PropertySpec(type=kind, pathSet=paths)])
            return [(o.obj, {p.name: p.val for p in o.propSet})
                    for o in content.propertyCollector.RetrieveContents([spec])]
        datastores = {}
        for obj, p in rows(vim.Datastore, ["name", "info"]):
            vmfs = getattr(p["info"], "vmfs", None)
            datastores[p["name"]] = {"moid": obj._moId,
                                     "extents": [e.diskName for e in vmfs.extent] if vmfs is not None else []}
        by_moid = {d["moid"]: name for name, d in datastores.items()}
        hosts = {}
        for _, p in rows(vim.HostSystem, ["name", "config.storageDevice", "datastore"]):
            mounted = [by_moid[d._moId] for d in p["datastore"]]
            devices = {d.key: d for d in p["config.storageDevice"].scsiLun}
            luns = {}
            for u in p["config.storageDevice"].multipathInfo.lun:
                d = devices[u.lun]
                luns[d.canonicalName] = {
                    "uuid": u.id, "type": d.lunType, "queue_depth": d.queueDepth or None, "policy": u.policy.policy,
                    "satp": u.storageArrayTypePolicy.policy if u.storageArrayTypePolicy else None,
                    "paths": [{"name": x.name, "state": x.pathState} for x in u.path],
                    "datastore": next((ds for ds in mounted if d.canonicalName in datastores[ds]["extents"]), "")}
            hosts[p["name"]] = {"luns": luns, "datastores": sorted(mounted)}
        vms = {p["name"] for _, p in rows(vim.VirtualMachine, ["name"])}
        return {"vms": vms, "hosts": hosts, "datastores": set(datastores), "about": content.about.apiType}
    finally:
        Disconnect(si)


@pytest.fixture(scope="module", params=["vpx", "esx"])
def ran(request, tmp_path_factory):
    """The model, what its API says, and one `agent --once` into a store of its own."""
    d = tmp_path_factory.mktemp(request.param)
    with Model(request.param) as model:
        api = the_api(model.url)
        cfg, store = model.vcenter_only(d), d / "agent.db"
        agent = run_cli("agent", "--once", "-c", str(cfg), "--store", str(store), timeout=300, env=ENV)
        triage = run_cli("triage", "-c", str(cfg), "--store", str(store), "--format", "json", timeout=300, env=ENV)
        stacks = run_cli("stacks", "-c", str(cfg), "--store", str(store), "--format", "json", timeout=300, env=ENV)
        yield {"model": request.param, "api": api, "cfg": cfg, "store": store, "agent": agent, "triage": triage,
               "stacks": stacks}


def test_the_models_are_what_govmomi_ships(ran):
    """Each host's devices as govmomi captured them from a real ESXi host: the multipath id is the SCSI UUID, the
    name on scsiLun only (what the project's own simulator used to leave out)."""
    api = ran["api"]
    assert api["about"] == ("VirtualCenter" if ran["model"] == "vpx" else "HostAgent") and api["vms"]
    for host in api["hosts"].values():
        assert host["luns"] and all(lun["uuid"] != name for name, lun in host["luns"].items())


def test_agent_once_exits_0(ran):
    assert ran["agent"].returncode == 0, ran["agent"].stderr[-2000:]


def test_facts_name_every_vm_host_and_datastore_as_the_api_does(ran):
    api = ran["api"]
    with Store(ran["store"]) as s:
        facts = s.facts()
    names = {kind: {f.tags[tag] for f in facts if f.kind == kind} for kind, tag in
             (("vsphere_vm", "vm"), ("vsphere_host", "host"), ("vsphere_datastore", "datastore"))}
    assert names == {"vsphere_vm": api["vms"], "vsphere_host": set(api["hosts"]),
                     "vsphere_datastore": api["datastores"]}
    for f in facts:
        if f.kind == "vsphere_host":
            assert sorted(f.data["datastores"]) == api["hosts"][f.tags["host"]]["datastores"]


def test_host_lun_facts_are_complete_and_canonical(ran):
    """Every device by its canonical name, with the queue depth, paths, policy, SATP and datastore the API gives."""
    api = ran["api"]
    with Store(ran["store"]) as s:
        hosts = {f.tags["host"]: f.data for f in s.facts("vsphere_host")}
    for name, want in api["hosts"].items():
        got = {x["lun"]: x for x in hosts[name]["luns"]}
        assert set(got) == set(want["luns"])
        for lun, w in want["luns"].items():
            g = got[lun]
            assert (g["uuid"], g["type"], g["queue_depth"], g["policy"], g["satp"], g["datastore"]) == (
                w["uuid"], w["type"], w["queue_depth"], w["policy"], w["satp"], w["datastore"]), lun
            assert g["paths"] == w["paths"] and g["paths_active"] == sum(p["state"] == "active" for p in w["paths"])
    disks = [g for h in hosts.values() for g in h["luns"] if g["type"] == "disk"]
    assert disks and all(g["queue_depth"] for g in disks)  # govmomi's local disk: 1024


def test_the_mpio_and_queue_depth_rules_judge_them(ran):
    """govmomi's devices are a host's own (SATP VMW_SATP_LOCAL, one path): not an array's LUN, so neither Round
    Robin, path redundancy nor an HBA's queue depth is asked of them."""
    api = ran["api"]
    with Store(ran["store"]) as s:
        index = FactIndex()
        index.add(s.facts("vsphere_host"))
    depth = {(v.subject["host"], v.subject["lun"]): v.severity
             for v in HbaQueueDepth().judge_facts(index, HbaQueueDepth.defaults)}
    assert any(x["type"] == "disk" for d in api["hosts"].values() for x in d["luns"].values())
    assert depth == {}
    assert MultipathRoundRobin().judge_facts(index, {}) == []
    assert RedundantPaths().judge_facts(index, RedundantPaths.defaults) == []


def test_query_names_what_the_api_names(ran):
    api = ran["api"]
    luns = {lun for h in api["hosts"].values() for lun in h["luns"]}
    allowed = {"vm": api["vms"], "host": set(api["hosts"]), "datastore": api["datastores"], "lun": luns}
    seen = set()
    with Store(ran["store"]) as s:
        measurements = [m for m in s.measurements() if m.startswith("vsphere_")]
    assert {"vsphere_vm", "vsphere_host"} <= set(measurements)
    for m in measurements:
        r = run_cli("query", "--store", str(ran["store"]), "-m", m, "--since", "2h")
        assert r.returncode == 0, r.stderr
        for row in json.loads(r.stdout):
            for tag, names in allowed.items():
                if tag in row["tags"]:
                    assert row["tags"][tag] in names, (m, row["tags"])
                    seen.add(tag)
            # a wildcard echoed back as an instance (govmomi's simulator does) names nothing
            assert "*" not in row["tags"].values(), (m, row["tags"])
    assert {"vm", "host"} <= seen


def test_triage_names_what_the_api_names(ran):
    r = ran["triage"]
    assert r.returncode in (0, 1, 2), r.stderr[-2000:]
    api = ran["api"]
    out = json.loads(r.stdout)
    for f in out["findings"]:
        s = f["subject"]
        assert s.get("vm", next(iter(api["vms"]))) in api["vms"], s
        assert s.get("host", next(iter(api["hosts"]))) in api["hosts"], s
        if "datastore" in s:
            assert s["datastore"] in api["datastores"], s
        if "lun" in s:
            assert s["lun"] in api["hosts"][s["host"]]["luns"], s
    assert {v["vm"] for v in out["verdicts"]} <= api["vms"]


def test_stacks_are_the_vms_the_api_names(ran):
    r = ran["stacks"]
    assert r.returncode == 0, r.stderr[-2000:]
    stacks = json.loads(r.stdout)
    assert {s["vm"] for s in stacks} == ran["api"]["vms"] and {s["stack"] for s in stacks} == ran["api"]["vms"]
    assert {s["vcenter"] for s in stacks} == {"vc1"}
