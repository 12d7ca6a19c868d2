"""A corrupt InfluxDB spool under the real agent and a real influxd.

A first run spools while InfluxDB is unreachable; between the runs one byte of a record in the
middle of the spool is flipped, the cursor is overwritten with garbage and a directory takes a
segment's name. Before: the flipped byte cut the rest of its segment, the garbage cursor silently
deleted the whole spool, the directory stopped the sink from starting. Now the second run delivers
every record but the bad one, says what it skipped, and moves the directory aside.
"""

from __future__ import annotations

import re
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path

from db2vtop.agent.core.store import Store
from tests.conftest import run_cli
from tests.infra.influxd import influx_keys, refused_url, running

_HEADER = struct.Struct("<III")
_MAGIC = 8
_SEP = re.compile(r"(?<!\\)[,]")


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text)


def line_key(line: str) -> tuple[str, tuple[tuple[str, str], ...], int]:
    """(measurement, sorted tags, ts) of a line-protocol line, as tests/infra/influxd.py keys points."""
    series = re.match(r"(?:\\.|[^ \\])+", line).group()
    measurement, *tags = _SEP.split(series)
    pairs = [re.split(r"(?<!\\)=", t, maxsplit=1) for t in tags]
    return (_unescape(measurement), tuple(sorted((_unescape(k), _unescape(v)) for k, v in pairs if v)),
            int(line.rsplit(" ", 1)[1]))


def framed(data: bytes) -> Iterator[tuple[int, bytes | None]]:
    """Each record of a segment's bytes, in order: (offset of its payload, the payload, or None where it is cut
    short or its CRC does not match)."""
    pos = _MAGIC
    while pos + _HEADER.size <= len(data):
        n, _points, crc = _HEADER.unpack_from(data, pos)
        payload = data[pos + _HEADER.size:pos + _HEADER.size + n]
        yield pos + _HEADER.size, payload if len(payload) == n and zlib.crc32(payload) == crc else None
        pos += _HEADER.size + n


def records(spool: Path) -> list[tuple[Path, int, list[str]]]:
    """Every record of every segment: (segment, offset of its payload, its lines)."""
    out = []
    for seg in sorted(spool.glob("seg-*.spool")):
        for offset, payload in framed(seg.read_bytes()):
            assert payload is not None, (seg, offset)
            out.append((seg, offset, payload.decode().splitlines()))
    return out


def config(path: Path, influx: str, store: Path, spool: Path) -> Path:
    """An agent config whose [influxdb] has the keys `influx` (url, bucket, org, token)."""
    path.write_text(f'[store]\npath = "{store}"\n[guest]\ninterval = "500ms"\n[influxdb]\n{influx}'
                    f'spool_dir = "{spool}"\nspool_max_bytes = "1MiB"\n'
                    'flush_interval = "200ms"\nretry_interval = "200ms"\nmax_retry_delay = "1s"\n'
                    'flush_timeout = "20s"\nstats_interval = "1s"\n')
    return path


def test_a_corrupt_spool_delivers_every_record_but_the_bad_one(tmp_path, influx_version):
    with running(influx_version, tmp_path / "influxd") as srv:
        bucket = srv.create_db("c")
        store, spool = tmp_path / "m.db", tmp_path / "spool"
        with refused_url() as url:
            away = config(tmp_path / "away.toml", srv.agent_section(bucket).replace(srv.url, url), store, spool)
            r = run_cli("agent", "-c", str(away), "--duration", "5", timeout=120)
        assert r.returncode == 0, r.stderr
        spooled = records(spool)
        segments = sorted({seg for seg, _, _ in spooled})
        bad = spooled[1]  # in the middle of the oldest segment: good records before and after it
        assert len(spooled) > 4 and spooled[2][0] == bad[0], spooled
        data = bytearray(bad[0].read_bytes())
        data[bad[1] + 10] ^= 0xFF
        bad[0].write_bytes(bytes(data))
        (spool / "cursor").write_bytes(b"\xff" * 16)
        top = int(segments[-1].stem[4:])
        (spool / f"seg-{top + 1:016d}.spool").mkdir()

        there = config(tmp_path / "there.toml", srv.agent_section(bucket), store, spool)
        r = run_cli("agent", "-c", str(there), "--duration", "3", timeout=120)
        assert r.returncode == 0, r.stderr
        delivered = influx_keys(srv, "c") | influx_keys(srv, "c", findings=True) | influx_keys(srv, "c", facts=True)
    expected = {line_key(x) for rec in spooled if rec is not bad for x in rec[2]}
    missing = expected - delivered
    assert not missing, sorted(missing)[:5]
    assert not {line_key(x) for x in bad[2]} & delivered  # skipped, not delivered half-read
    log = r.stderr
    assert f"are corrupt (about {len(bad[2])} points lost)" in log, log[-3000:]
    assert "cursor" in log and "delivering everything from the oldest" in log
    assert f"seg-{top + 1:016d}.spool is not a regular file; moved aside" in log
    assert (spool / f"seg-{top + 1:016d}.bad").is_dir()
    with Store(store) as st:  # counted in the sink's self-metric, apart from points a full spool drops
        last = list(st.rows("db2vtop_sink", 0))[-1].fields
    assert (last["corrupt"], last["dropped"]) == (len(bad[2]), 0), last
    assert "Traceback" not in log
