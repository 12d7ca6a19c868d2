"""The agent's alerts over time and on the wire, against a real HTTP receiver (tests/infra/alertmanager.py).

What pages is judged by checks/alerts.py; here the Alerter is handed the alerts of chosen moments (`apply`), so
the flap guard, the filters, the spool and the restart are checked at exact times. The real Alertmanager and a
real verdict are in tests/agent/sinks/test_alertmanager.py.
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import time
from dataclasses import replace
from pathlib import Path

import pytest

from db2vtop.agent.core.config import AlertConfig, AlertingConfig, CoreConfig, StackConfig
from db2vtop.agent.sinks import alerts
from db2vtop.agent.sinks.alerts import Alerter
from db2vtop.checks.alerts import EPISODE, FINDING, Alert, episode_alerts, triage_command
from db2vtop.checks.culprits import Culprit
from db2vtop.checks.topology import StackEntities
from db2vtop.checks.verdict import Cause, Episode, StackVerdict
from tests.infra.alertmanager import WebhookReceiver
from tests.infra.influxd import wait_for

S = 10**9
T0 = 1_800_000_000 * S


def alert(key: str, severity: str = "critical", layer: str = "storage", stacks: tuple[str, ...] = ("prod",),
          vms: tuple[str, ...] = ("db2prod01",)) -> Alert:
    return Alert(key, {"alertname": EPISODE, "severity": severity, "layer": layer, "rule": "stack-verdict",
                       "datastore": "ds01"}, {"summary": f"{key} is slow", "since": ""}, T0, list(vms), list(stacks))


def config(tmp_path: Path, *receivers: AlertConfig) -> CoreConfig:
    return CoreConfig(alert=list(receivers), alerting=AlertingConfig(state_dir=tmp_path / "alerts"))


def webhook(name: str, url: str, **kw) -> AlertConfig:
    return AlertConfig(name=name, url=url, kind="webhook", allow_plaintext=True, retry_interval=0.1,
                       max_retry_delay=0.5, **kw)


@pytest.fixture
def hook():
    h = WebhookReceiver().start()
    yield h
    h.stop()


def changes(h: WebhookReceiver) -> list[tuple[str, str]]:
    return [(b["change"], b["alert"]["fingerprint"]) for b in h.bodies()]


def test_a_flapping_condition_pages_once_and_resolves_once_clear_for_the_guard(tmp_path, hook):
    a = Alerter(config(tmp_path, webhook("hook", hook.url)), tmp_path / "m.db", judge=False)
    try:
        fp = alert("ds01").fingerprint
        for t, current in ((0, [alert("ds01")]), (20, []), (40, [alert("ds01")]), (60, []), (100, []), (119, [])):
            a.apply({x.key: x for x in current}, T0 + t * S)
        wait_for(lambda: len(hook.bodies()) == 1, 10, "the firing change")
        assert changes(hook) == [("firing", fp)]  # back within the guard: never resolved, never paged again
        a.apply({}, T0 + 121 * S)  # clear since 60 s, for 61 s
        wait_for(lambda: len(hook.bodies()) == 2, 10, "the resolved change")
    finally:
        a.close(5)
    first, last = hook.bodies()
    assert changes(hook) == [("firing", fp), ("resolved", fp)]
    assert last["alert"]["endsAt"] == "2027-01-15T08:01:00.000Z"  # when it was last seen clear: T0 + 60 s
    assert first["alert"]["startsAt"] == "2027-01-15T08:00:00.000Z" and first["alert"]["endsAt"] is None
    assert [b["seq"] for b in hook.bodies()] == [1, 2]


def test_each_receiver_is_told_what_its_filters_let_through(tmp_path, hook):
    receivers = (webhook("all", hook.url), webhook("crit", hook.url, min_severity="critical"),
                 webhook("host", hook.url, layers=["host"]), webhook("test", hook.url, stacks=["test*"]))
    a = Alerter(config(tmp_path, *receivers), tmp_path / "m.db", judge=False)
    try:
        storage = alert("ds01", severity="warning")
        host = alert("esx01", layer="host", stacks=("test1", "prod"))
        a.apply({storage.key: storage, host.key: host}, T0)
        a.apply({storage.key: replace(storage, labels={**storage.labels, "severity": "critical"}), host.key: host},
                T0 + 20 * S)
        wait_for(lambda: len(hook.bodies()) == 7, 10, "every receiver's changes")
    finally:
        a.close(5)
    got = sorted((b["receiver"], b["change"], b["alert"]["labels"]["layer"], b["alert"]["labels"]["severity"])
                 for b in hook.bodies())
    assert got == [("all", "firing", "host", "critical"), ("all", "firing", "storage", "warning"),
                   ("all", "updated", "storage", "critical"),  # a change of severity is told again
                   ("crit", "firing", "host", "critical"), ("crit", "firing", "storage", "critical"),
                   ("host", "firing", "host", "critical"), ("test", "firing", "host", "critical")]


def test_a_receiver_down_gets_every_change_in_order_after_a_restart_of_the_agent(tmp_path, hook):
    """Changes wait in the receiver's spool while it refuses connections; a new agent on the same directory
    delivers them once, in order, and does not page again for what still fires (the state file)."""
    cfg = config(tmp_path, webhook("hook", hook.url))
    hook.stop()
    a = Alerter(cfg, tmp_path / "m.db", judge=False)
    first, second = alert("ds01"), alert("esx01", layer="host")
    a.apply({first.key: first}, T0)
    a.apply({first.key: first, second.key: second}, T0 + 20 * S)
    a.apply({second.key: second}, T0 + 40 * S)
    a.apply({second.key: second}, T0 + 101 * S)  # the first clear for 61 s: resolved
    wait_for(lambda: a.outboxes[0].stats.state == "failing", 10, "the receiver failing")
    assert "Connection refused" in a.outboxes[0].stats.last_error
    assert a.outboxes[0].snapshot()["pending"] == 3
    a.close(0)
    hook.start()
    b = Alerter(cfg, tmp_path / "m.db", judge=False)
    try:
        wait_for(lambda: len(hook.bodies()) == 3, 20, "the spooled changes")
        b.apply({second.key: second}, T0 + 120 * S)  # still firing: nothing new to tell
    finally:
        b.close(5)
    assert changes(hook) == [("firing", first.fingerprint), ("firing", second.fingerprint),
                             ("resolved", first.fingerprint)]
    assert len({x["id"] for x in hook.bodies()}) == 3 and [x["seq"] for x in hook.bodies()] == [1, 2, 3]


def test_a_crash_between_spooling_a_change_and_saving_the_state_tells_it_once(tmp_path, hook, monkeypatch):
    """The agent dies after a change is in the spool and before the state file says it was told (the state
    file's write fails where a kill -9 would land, the agent is left unclosed): the next agent finds the change
    in the spool, delivers it once and does not page again for it, nor for its resolve."""
    cfg = config(tmp_path, webhook("hook", hook.url))
    first = alert("ds01")
    save = alerts.write_private

    def dies(path, data, durable=False):
        if path.name == alerts.STATE_FILE:
            deadline = time.monotonic() + 2  # time for a sender that does not wait for the state file
            while not hook.bodies() and time.monotonic() < deadline:
                time.sleep(0.02)
            raise OSError(errno.EIO, "the agent died here")
        return save(path, data, durable=durable)

    a = Alerter(cfg, tmp_path / "m.db", judge=False)
    monkeypatch.setattr(alerts, "write_private", dies)
    with pytest.raises(OSError):
        a.apply({first.key: first}, T0)
    monkeypatch.setattr(alerts, "write_private", save)
    for box in a.outboxes:  # as a kill -9 would: nothing more delivered, the spool's lock let go, no state saved
        box.close(0)
    b = Alerter(cfg, tmp_path / "m.db", judge=False)
    try:
        wait_for(lambda: len(hook.bodies()) >= 1, 20, "the spooled change")
        b.apply({first.key: first}, T0 + 20 * S)  # still firing: nothing new
        b.apply({}, T0 + 100 * S)  # clear ...
        b.apply({}, T0 + 200 * S)  # ... for the flap guard: resolved once
        wait_for(lambda: len(hook.bodies()) >= 2, 20, "the resolve")
    finally:
        b.close(5)
    assert changes(hook) == [("firing", first.fingerprint), ("resolved", first.fingerprint)]
    assert [x["seq"] for x in hook.bodies()] == [1, 2]


def test_the_webhook_body_is_the_documented_schema_and_signed(tmp_path, hook, monkeypatch):
    monkeypatch.setenv("HOOK_KEY", "k3y")
    a = Alerter(config(tmp_path, webhook("hook", hook.url, secret_env="HOOK_KEY")), tmp_path / "m.db", judge=False)
    try:
        x = alert("ds01", vms=("db2a", "db2b"), stacks=("a", "b"))
        a.apply({x.key: x}, T0)
        wait_for(lambda: hook.received, 10, "the change")
    finally:
        a.close(5)
    _, headers, body, raw = hook.received[0]
    assert set(body) == {"version", "id", "seq", "change", "status", "receiver", "agent", "sent_by", "alert"}
    assert (body["version"], body["change"], body["status"], body["receiver"]) == ("1", "firing", "firing", "hook")
    assert set(body["alert"]) == {"fingerprint", "labels", "annotations", "startsAt", "endsAt", "vms", "stacks"}
    assert body["alert"]["vms"] == ["db2a", "db2b"] and body["alert"]["labels"]["alertname"] == EPISODE
    assert headers["x-db2vtop-signature"] == "sha256=" + hmac.new(b"k3y", raw, hashlib.sha256).hexdigest()


def test_ten_vms_blamed_on_one_datastore_are_one_alert_naming_the_ten():
    judged = []
    for i in range(10):
        stack = StackConfig(name=f"db2ten{i:02d}", vm=f"db2ten{i:02d}", vcenter="vc1")
        ent = StackEntities(stack, T0, T0 + 600 * S, None, vm=stack.vm, vcenter="vc1",  # type: ignore[arg-type]
                            luns={"naa.600a0980383031": "ds_shared"})
        cause = Cause("array", ["host esx01 KAVG 0.1 ms, DAVG 40.0 ms"], None, 8.0)
        since = T0 + (i % 3) * 20 * S
        # each ranks the datastore's VMs over its own episode: backup01 first, itself among the others
        shares = {"backup01": 60.0 + i, f"db2ten{i:02d}": 4.0, f"db2ten{(i + 1) % 10:02d}": 4.0}
        culprits = [Culprit(vm, "vc1", "esx09" if vm == "backup01" else "esx01", "datastore ds_shared", share,
                            "iops", share * 100, "IOPS", own=vm == stack.vm) for vm, share in shares.items()]
        episode = Episode("storage", since, T0 + 600 * S, None, [cause], {}, 30, "medium", culprits)
        judged.append((StackVerdict(stack.name, "storage", cause.summary, "medium", cause.chain, vm=stack.vm,
                                    vcenter="vc1", since=since, causes=[cause], until=T0 + 600 * S,
                                    episodes=[episode]), ent))
    found = episode_alerts(judged)
    assert len(found) == 1
    (a,) = found.values()
    assert a.labels == {"alertname": EPISODE, "severity": "critical", "layer": "storage", "rule": "stack-verdict",
                        "vcenter": "vc1", "datastore": "ds_shared"}
    assert a.vms == [f"db2ten{i:02d}" for i in range(10)] and a.starts_at == T0
    assert a.annotations["triage"] == triage_command(a.vms)
    assert a.annotations["triage"].startswith("db2vtop triage --vm db2ten00 --vm db2ten01")
    assert "10 stacks" in a.annotations["summary"] and a.annotations["since"] == "2027-01-15T08:00:00+00:00"
    # the culprits the ten verdicts share, each VM once at its largest share
    assert a.annotations["culprit"] == ("backup01 (esx09) 69.0 % of the datastore ds_shared, 6,900 IOPS; "
                                        "db2ten00 (esx01) 4.0 % of the datastore ds_shared, 400 IOPS; "
                                        "db2ten01 (esx01) 4.0 % of the datastore ds_shared, 400 IOPS (+8 more)")
    assert FINDING != EPISODE


def test_a_failing_receiver_is_a_line_of_the_tui_status(tmp_path):
    from rich.console import Console

    from db2vtop.agent.core.model import ALERT_MEASUREMENT, Sample
    from db2vtop.agent.core.store import Store
    from db2vtop.tui.data import Reader, load_status
    from db2vtop.tui.widgets import StatusLine

    path = tmp_path / "m.db"
    with Store(path, writer=True) as s:
        s.write([Sample(ALERT_MEASUREMENT, {"receiver": "am", "kind": "alertmanager", "agent": "a"},
                        {"state": "failing", "last_error": "unreachable: Connection refused", "firing": 2,
                         "pending": 3}, T0),
                 Sample(ALERT_MEASUREMENT, {"receiver": "hook", "kind": "webhook", "agent": "a"},
                        {"state": "ok", "last_error": "", "firing": 1, "pending": 0}, T0)])
    with Store(path) as s:
        found = {x.collector: x for x in load_status(Reader(s), T0 + S)}
    assert (found["alerts→am"].status, found["alerts→am"].detail) == ("failing", "2 firing, 3 waiting")
    assert (found["alerts→hook"].status, found["alerts→hook"].detail) == ("ok", "1 firing")
    line = StatusLine()
    line.update = lambda renderable, layout=False: setattr(line, "shown", renderable)  # type: ignore[method-assign]
    line.show(list(found.values()), [])
    console = Console(width=200, record=True)
    console.print(line.shown)
    text = console.export_text()
    assert "alerts→hook ok 1 firing" in text
    assert "✖ alerts→am failing (2 firing, 3 waiting): unreachable: Connection refused" in text


@pytest.mark.parametrize(("text", "key", "said"), [
    ('url = "http://am:9093"\ntoken_env = "T"\n', "alert[0].url", "unencrypted"),
    ('url = "https://am:9093"\nsecret_env = "K"\n', "alert[0].secret_env", "signs a webhook"),
    ('url = "https://am:9093"\ntoken_env = "T"\ntoken_file = "/x"\n', "alert[0]", "both set"),
    ('url = "https://am:9093"\nlayers = ["disk"]\n', "alert[0].layers[0]", '"storage-network"'),
    ('url = "https://am:9093"\nmin_severity = "info"\n', "alert[0].min_severity", '"critical"'),
    ('url = "https://am:9093"\ntoken = "s3cret"\n', "alert[0].token", "never written in the config"),
])
def test_config_refuses_a_receiver_that_would_leak_or_cannot_work(tmp_path, text, key, said):
    from tests.infra.configs import error_of

    e = error_of(tmp_path, '[[alert]]\nname = "am"\n' + text)
    assert e.key == key and said in e.problem, e


def test_config_check_reads_each_receivers_secrets(tmp_path):
    from tests.conftest import run_cli

    cfg = tmp_path / "c.toml"
    cfg.write_text('[[alert]]\nname = "hook"\nkind = "webhook"\nurl = "https://h.example.com/x"\nsecret_env = "K"\n')
    cfg.chmod(0o600)
    r = run_cli("config", "check", "-c", str(cfg), env={"K": ""})
    assert r.returncode == 2 and "alert[0]: secret not readable: environment variable K" in r.stderr
    r = run_cli("config", "check", "-c", str(cfg), env={"K": "k3y"})
    assert r.returncode == 0 and "alert hook (webhook)" in r.stdout, r.stderr


def test_a_receiver_that_trickles_or_sends_a_hostile_retry_after_is_held_to_its_bounds():
    """A receiver's POST is one deadline (a trickled answer ended at `timeout`; before, urllib's per-read timeout
    let it run for as long as it trickled), and its Retry-After a finite delay up to max_retry_delay (before:
    `inf` was 3600 s, an HTTP-date nothing)."""
    import email.utils
    import time

    from db2vtop.agent.sinks.receivers import DeliveryError, Receiver, test_change
    from tests.faults.hostile_http import Answer, HostileHTTP

    def trickle() -> object:  # 30 s of answer, a byte every 0.2 s
        for _ in range(150):
            time.sleep(0.2)
            yield b" "

    with HostileHTTP(lambda m, p, b: Answer(200, trickle(), {}, 150)) as slow, \
            pytest.raises(DeliveryError, match="timed out after 1s") as e:
        Receiver(webhook("slow", slow.url + "/hook", timeout=1.0), "a1").send([test_change(T0)])
    assert e.value.state == "unreachable"
    for value in ("inf", "1e300", email.utils.formatdate(time.time() + 86400, usegmt=True)):
        with HostileHTTP(lambda m, p, b, v=value: Answer(503, [b"busy"], {"Retry-After": v}, 4)) as busy, \
                pytest.raises(DeliveryError) as e:
            Receiver(replace(webhook("busy", busy.url + "/hook"), max_retry_delay=7.0), "a1").send([test_change(T0)])
        assert e.value.state == "retrying" and e.value.retry_after == 7.0, value
