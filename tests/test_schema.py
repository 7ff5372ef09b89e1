"""core/schema.py: every object a bundle carries is rebuilt exactly from its JSON."""

import dataclasses
import json
import os
from datetime import datetime, timedelta, timezone

import pytest
from helpers import CORPUS

from denpex_tui.core import schema
from denpex_tui.probes.differential import differential_from_json
from denpex_tui.probes.wire import WireError, snapshot_from_json
from denpex_tui.core.model import Finding
from denpex_tui.core.scan import scan_paths


@pytest.fixture(scope="module")
def scanned():
    return scan_paths([str(CORPUS / "deepspeed_enospc_checkpoint")], jobs=1)


def _same(a, b):
    assert json.loads(json.dumps(a)) == json.loads(json.dumps(b))


def test_findings_round_trip_on_a_real_run(scanned):
    assert scanned.findings
    for f in scanned.findings:
        j = schema.finding_to_json(f)
        back = schema.finding_from_json(json.loads(json.dumps(j)))
        assert back == f  # every dataclass field, including times at full precision
        _same(schema.finding_to_json(back), j)
        # the public face is a subset, unchanged
        for k, v in f.to_json().items():
            assert j[k] == v


def test_finding_extra_is_serialised_generically():
    t = datetime(2026, 11, 29, 17, 40, 17, 345678, tzinfo=timezone(timedelta(hours=1)))
    f = Finding("os.enospc", "t", "initiating", "error", "checkpoint-save", "os", "/x.log", 3, 4, 10,
                "OSError: [Errno 28] No space left on device: '/ckpt/a.pt'", time=t,
                extra={"fields": {"errno": 28, "path": "/ckpt/a.pt", "spans": (1, 2)}, "tb_end_line": 9,
                       "when": t, "obj": object.__name__})
    j = json.loads(json.dumps(schema.finding_to_json(f)))
    assert j["extra"]["fields"] == {"errno": 28, "path": "/ckpt/a.pt", "spans": [1, 2]}
    back = schema.finding_from_json(j)
    assert back.time == t and back.extra["fields"]["errno"] == 28
    _same(schema.finding_to_json(back), j)


def test_incidents_round_trip_on_a_real_run(scanned):
    assert scanned.incidents and scanned.incidents[0].initiating.rank == 2
    for inc in scanned.incidents:
        j = json.loads(json.dumps(schema.incident_to_json(inc)))
        back = schema.incident_from_json(j)
        assert back == inc
        _same(schema.incident_to_json(back), j)
        _same(back.to_json(), inc.to_json())


def test_markers_round_trip(scanned):
    ms = scanned.job.markers()
    assert ms
    for m in ms:
        assert schema.marker_from_json(json.loads(json.dumps(schema.marker_to_json(m)))) == m


def test_probe_snapshot_round_trip(tmp_path):
    from denpex_tui.probes.sampler import Prober

    (tmp_path / "held").write_bytes(b"x" * 8192)
    fh = open(tmp_path / "held", "rb")
    os.unlink(tmp_path / "held")  # a deleted-open file held by this process
    snap = Prober(paths=[str(tmp_path)], pids=[os.getpid()]).snapshot()
    j = json.loads(json.dumps(schema.snapshot_to_json(snap)))
    back = snapshot_from_json(j)
    fh.close()
    assert back.host == snap.host and back.time == snap.time
    # the one reader of snapshots (probes/wire.py, made for untrusted streams) gives back every
    # reading a bundle's probe.json holds; how long each read took is not part of a reading
    plain = [dataclasses.replace(p, read_cost_s=None, mount_root=None) for p in snap.paths]
    assert [dataclasses.replace(p, read_cost_s=None, mount_root=None) for p in back.paths] == plain
    assert [p.pid for p in back.processes] == [p.pid for p in snap.processes]
    me = next(p for p in back.processes if p.pid == os.getpid())
    mine = next(p for p in snap.processes if p.pid == os.getpid()).deleted
    assert me.deleted and [(f.fd, f.path, f.bytes) for f in me.deleted] == [(f.fd, f.path, f.bytes) for f in mine]
    _same(back.to_json(), snap.to_json())


def test_differential_round_trip(tmp_path):
    from denpex_tui.probes.differential import differential
    from denpex_tui.probes.sampler import Prober

    snap = Prober(paths=[str(tmp_path)]).snapshot()
    d = differential("os.enospc", str(tmp_path / "x.pt"), snap)
    j = json.loads(json.dumps(schema.differential_to_json(d)))
    back = differential_from_json(j)
    assert back == d
    _same(schema.differential_to_json(back), j)


def test_other_schema_is_refused():
    with pytest.raises(WireError):
        snapshot_from_json({"schema": 2, "time": "x"})
    with pytest.raises(schema.SchemaError):
        schema.finding_from_json({"title": "no signature"})
