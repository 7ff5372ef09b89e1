"""The probe's wire format read back (Snapshot.from_json), the stream source, the differential
on a remote node's snapshot, clock-skew estimates, and the transports' command lines."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

import pytest

from denpex_tui.core.commands import TemplateError, render_probe_command
from denpex_tui.probes.differential import differential
from denpex_tui.probes.metrics import metrics_for
from denpex_tui.probes.sampler import Prober
from denpex_tui.probes.skew import SkewEstimator
from denpex_tui.probes.source import LocalSource, StreamSource
from denpex_tui.probes.transports import (KUBECTL_TEMPLATE, TransportError, kubectl_channels,
                                          parse_hosts, slurm_channels, ssh_channels)
from denpex_tui.probes.wire import GARBAGE, INVALID, OTHER_SCHEMA, WireError, parse_line, snapshot_from_json

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def worker(tmp_path):
    """A process that holds a deleted-but-open file and looks like rank 3 of a job."""
    code = ("import os,sys; f=open(sys.argv[1],'wb'); f.write(b'x'*(1<<20)); f.flush(); "
            "os.unlink(sys.argv[1]); print('ready', flush=True); sys.stdin.read()")
    p = subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "ckpt.tmp")],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                         env=dict(os.environ, RANK="3", LOCAL_RANK="1"))
    assert p.stdout.readline().strip() == "ready"
    yield p
    p.kill()
    p.wait()


def _remote_line(pid: int, path: str) -> str:
    """What `denpex probe --stream --json` prints on a node: a real run of it."""
    r = subprocess.run([sys.executable, "-m", "denpex_tui.commands.probe", "--stream", "--json",
                        "--count", "1", "--pid", str(pid), "--path", path],
                       capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()[0]


def test_from_json_round_trips_a_real_stream_line(worker, tmp_path):
    line = _remote_line(worker.pid, str(tmp_path))
    snap = parse_line(line)
    orig = json.loads(line)
    again = snap.to_json()
    for k in ("schema", "host", "unix_time", "local_training_processes", "system"):
        assert again[k] == orig[k], k
    [p] = snap.processes
    assert (p.pid, p.rank, p.local_rank, p.readable) == (worker.pid, 3, 1, True)
    assert p.deleted_open_bytes >= 1 << 20 and p.deleted[0].path.endswith("ckpt.tmp")
    assert p.dev is None if hasattr(p, "dev") else True
    jp = again["processes"][0]
    for k, v in orig["processes"][0].items():
        assert jp[k] == v, k
    for a, b in zip(again["paths"], orig["paths"]):
        assert a == b
    assert snapshot_from_json(orig).to_json()["paths"] == orig["paths"]


@pytest.mark.parametrize("line,kind", [
    ("Welcome to node7, last login: Tue Dec  1", GARBAGE),
    ("srun: error: Unable to create step for job 12: Invalid generic resource", GARBAGE),
    ('{"schema": 1, "time": "2026', GARBAGE),  # a line cut when the node died
    ("[1, 2, 3]", GARBAGE),
    ('{"hello": "world"}', GARBAGE),
    ('{"schema": 2, "time": "2026-12-01T10:00:00+00:00", "host": "n1"}', OTHER_SCHEMA),
    ('{"schema": "1", "time": "2026-12-01T10:00:00+00:00", "host": "n1"}', OTHER_SCHEMA),
    ('{"schema": 1, "unix_time": 1.0, "processes": [{"pid": "12"}]}', INVALID),
    ('{"schema": 1, "unix_time": 1.0, "paths": [{"path": "/x", "bytes_free": true}]}', INVALID),
    ('{"schema": 1, "unix_time": 1.0, "processes": {"pid": 1}}', INVALID),
    ('{"schema": 1, "time": "yesterday"}', INVALID),
])
def test_bad_lines_raise_one_wire_error_of_their_kind(line, kind):
    with pytest.raises(WireError) as e:
        parse_line(line)
    assert e.value.kind == kind
    if kind == OTHER_SCHEMA:
        assert e.value.remote_schema in (2, "1")


def test_non_utf8_and_deeply_nested_lines_are_garbage():
    with pytest.raises(WireError) as e:
        parse_line(b'{"schema": 1, "host": "\xff"}')
    assert e.value.kind == GARBAGE
    with pytest.raises(WireError) as e:
        parse_line("{" + '"a":[' * 100000 + "]" * 100000 + "}")
    assert e.value.kind == GARBAGE


def test_stream_source_tags_its_node_and_answers_only_from_its_snapshot(worker, tmp_path):
    src = StreamSource("gpu-node-07")
    with pytest.raises(WireError):
        src.feed("Last login: Tue Dec  1 09:00:00 2026 from 10.0.0.1")
    snap = src.feed(_remote_line(worker.pid, str(tmp_path)))
    assert src.garbage == 1 and src.snapshots == 1
    assert all(p.node == "gpu-node-07" for p in snap.processes + snap.paths)
    assert snap.to_json()["processes"][0]["node"] == "gpu-node-07"
    assert src.read_path(str(tmp_path)).bytes_total is not None
    # a path the remote probe does not watch is not measured here instead
    other = src.read_path("/var/tmp")
    assert other.bytes_total is None and "not watched by the probe on gpu-node-07" in other.error
    du = src.du("/")
    assert du.du_bytes is None and "gpu-node-07" in du.reason


def test_differential_of_a_remote_rank_uses_its_nodes_readings(worker, tmp_path):
    src = StreamSource("n2")
    snap = src.feed(_remote_line(worker.pid, str(tmp_path)))
    d = differential("os.enospc", str(tmp_path / "ckpt" / "step100.pt"), snap, source=src,
                     checklist=[])
    assert d.measured_path == str(tmp_path)
    held = [c for c in d.candidates if c.cause == "deleted-open"][0]
    assert held.measured["holders"][0]["rank"] == 3
    assert "du_unavailable" in held.measured and "n2" in held.measured["du_unavailable"]
    # a path that the node does not watch: not measured, never the head node's disk instead
    d2 = differential("os.enospc", "/nvme/offload/swap.bin", snap, source=src, checklist=[])
    assert any("not watched by the probe on n2" in c for c in d2.caveats)
    assert all(c.verdict == "unknown" for c in d2.candidates if c.cause in ("blocks", "inodes"))
    m = metrics_for("/nvme/offload", snap, source=src)
    assert m["path.bytes_free_pct"] is None
    # the same differential on this machine's own source measures here
    local = LocalSource(Prober(pids=[worker.pid], paths=[str(tmp_path)], watch_shm=False))
    ls = local.snapshot()
    dl = differential("os.enospc", str(tmp_path), ls, source=local, checklist=[], du=True)
    assert [c.cause for c in dl.candidates][:4] == [c.cause for c in d.candidates][:4]


def test_skew_minimum_over_samples_and_uncertain_decisions():
    sk = SkewEstimator()
    # node n1's clock is 2.0 s behind the head; delays of 3..40 ms
    for i, delay in enumerate([0.040, 0.003, 0.012, 0.020, 0.008, 0.030]):
        sent = 1000.0 + i * 2
        sk.sample("n1", sent, sent + 2.0 + delay)
    for i, delay in enumerate([0.004, 0.010, 0.006, 0.009]):
        sent = 1000.0 + i * 2
        sk.sample("n2", sent, sent + delay)
    o1 = sk.offsets()["n1"]
    assert abs(o1.offset_s - 2.003) < 1e-9 and o1.samples == 6
    assert 0.005 <= o1.uncertainty_s < 0.02
    # n1 logs its failure at 1500.0 on its clock = 1502.003 head; n2 at 1501.0 = 1501.004
    c = sk.compare("n1", 1500.0, "n2", 1501.0)
    assert c.first == "n2" and not c.uncertain and "other order" in c.reason
    c = sk.compare("n1", 1499.0, "n2", 1501.0)
    assert c.first is None and c.uncertain and "within" in c.reason
    assert sk.compare("n1", 1.0, "n9", 2.0).uncertain
    assert sk.to_head_time("n1", 10.0) == pytest.approx(12.003)
    one = SkewEstimator()
    one.sample("a", 0.0, 0.1)
    one.sample("b", 0.0, 0.1)
    assert one.compare("a", 0.0, "b", 100.0).uncertain  # one sample: spread unknown
    assert one.to_json()["a"]["uncertainty_s"] is None


def test_probe_command_quotes_the_host_and_refuses_option_like_names():
    cmd = render_probe_command("ssh -o BatchMode=yes {host} denpex probe --stream --json", "gpu-07.cluster")
    assert shlex.split(cmd) == ["ssh", "-o", "BatchMode=yes", "gpu-07.cluster", "denpex", "probe",
                                "--stream", "--json"]
    for bad in ("-oProxyCommand=touch /tmp/x", "n1;reboot", "$(id)", "n1\n", "a b", "`id`", "",
                "n1\x1b[2J", "n\u202e1", "n1.", "x" * 300):
        with pytest.raises(TemplateError):
            render_probe_command("ssh {host} denpex probe --stream --json", bad)
    with pytest.raises(TemplateError, match="needs {host}"):
        render_probe_command("ssh n1 denpex probe", "n1")
    with pytest.raises(TemplateError, match="unknown placeholder"):
        render_probe_command("ssh {host} {path}", "n1")
    with pytest.raises(TemplateError):
        render_probe_command("ssh '{host} denpex", "n1")  # unbalanced quote
    assert render_probe_command("sh -c 'x {{y}}' {host}", "n1") == "sh -c 'x {y}' n1"


def test_kubectl_template_command_line():
    [c] = kubectl_channels(["trainer-worker-3"])
    assert c.argv[:2] == ["/bin/sh", "-c"]
    assert shlex.split(c.argv[2]) == ["kubectl", "exec", "trainer-worker-3", "--", "denpex",
                                      "probe", "--stream", "--json"]
    assert c.nodes == ["trainer-worker-3"] and KUBECTL_TEMPLATE.startswith("kubectl exec {host} --")
    [c] = kubectl_channels(["p-0"], "kubectl -n ml exec {host} -c trainer -- denpex probe --stream --json --logs /logs")
    assert shlex.split(c.argv[2])[:7] == ["kubectl", "-n", "ml", "exec", "p-0", "-c", "trainer"]
    with pytest.raises(TransportError):
        kubectl_channels(["--all-namespaces"])
    with pytest.raises(TransportError):
        parse_hosts("n1,-F/tmp/evil")
    assert parse_hosts("n1, n2,n1,,n3") == ["n1", "n2", "n3"]
    [s] = ssh_channels(["n1"])
    assert shlex.split(s.argv[2])[:3] == ["ssh", "-o", "BatchMode=yes"]


def test_slurm_step_command_line_from_a_node_list():
    [c] = slurm_channels("4242", nodes=(["gpu001", "gpu002", "gpu017"], "gpu[001-002,017]", "RUNNING"))
    assert c.labelled and c.nodes == ["gpu001", "gpu002", "gpu017"]
    assert c.argv[:4] == ["srun", "--jobid", "4242", "--overlap"]
    for a in ("--ntasks-per-node=1", "--nodes=3", "--nodelist=gpu[001-002,017]", "--label"):
        assert a in c.argv
    assert c.argv[-4:] == ["denpex", "probe", "--stream", "--json"]
    one = c.retry_one("gpu017")
    assert "--nodelist=gpu017" in one.argv and "--nodes=1" in one.argv and not one.labelled
    with pytest.raises(TransportError):
        slurm_channels("12; rm -rf ~", nodes=(["a"], "a", "RUNNING"))
    per = slurm_channels("12", "srun --jobid 12 --overlap -N1 -n1 -w {host} denpex probe --stream --json",
                         nodes=(["a1", "a2"], "a[1-2]", "RUNNING"))
    assert [p.nodes for p in per] == [["a1"], ["a2"]] and "-w a2" in per[1].argv[2]


def test_skew_resolution_says_below_what_gap_an_order_is_uncertain():
    sk = SkewEstimator()
    assert sk.resolution() is None
    for i, d in enumerate([0.010, 0.002, 0.030]):
        sk.sample("a", i, i + d)
        sk.sample("b", i, i + 1.0 + d)
    r = sk.resolution()
    assert r == pytest.approx(2 * (0.010 - 0.002))
    c = sk.compare("a", 10.0, "b", 9.0 + r / 4)  # b's clock is 1 s behind: nearly simultaneous
    assert c.uncertain


def test_cli_bad_remote_input_is_one_line_exit_2():
    def probe(*a):
        return subprocess.run([sys.executable, "-m", "denpex_tui", "probe", *a], capture_output=True,
                              text=True, timeout=60, cwd=ROOT)

    for args, msg in [(["--hosts", "n1,-oProxyCommand=x"], "not a host name"),
                      (["--hosts", "n1", "--probe-cmd", "ssh n1 denpex probe"], "needs {host}"),
                      (["--hosts", "n1", "--probe-cmd", "ssh {host} {pid}"], "unknown placeholder"),
                      (["--slurm-job", "12;id"], "not a Slurm job id"),
                      (["--hosts", "a", "--slurm-job", "1"], "one of"),
                      (["--probe-cmd", "ssh {host}"], "needs --hosts"),
                      (["--hosts", "a", "--stream"], "--stream is for this node"),
                      (["--hosts", "a", "--wait", "x"], "--wait")]:
        r = probe(*args)
        assert r.returncode == 2, (args, r.stderr)
        assert msg in r.stderr and len(r.stderr.strip().splitlines()) == 1, (args, r.stderr)
        assert "Traceback" not in r.stderr
    r = subprocess.run([sys.executable, "-m", "denpex_tui", "watch", "--hosts=n1,-x"],
                       capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 2 and "not a host name" in r.stderr


def test_watch_refuses_local_probe_options_with_remote_nodes():
    r = subprocess.run([sys.executable, "-m", "denpex_tui", "watch", "/tmp", "--hosts", "n1", "--pid", "1"],
                       capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 2 and "--probe-cmd" in r.stderr and len(r.stderr.splitlines()) == 1


def test_the_fleet_opens_no_network_socket_itself():
    """Denpex only starts the user's transports and reads their pipes: under a guard that fails
    on any AF_INET/AF_INET6 socket in this process, a real fleet (one streaming node, one dead)
    merges, and no UI library is imported on the way."""
    code = f"""
import socket, sys
real = socket.socket
class Guard(real):
    def __init__(self, family=-1, *a, **k):
        if family in (socket.AF_INET, socket.AF_INET6, -1):
            raise AssertionError("network socket opened")
        super().__init__(family, *a, **k)
socket.socket = Guard
from denpex_tui.probes.transports import template_channels
from denpex_tui.commands.remote import collect
tpl = "sh -c 'if [ $0 = n1 ]; then exec {sys.executable} -m denpex_tui.commands.probe --stream --json --interval 0.2; else exit 255; fi' {{host}}"
fleet = collect(template_channels(["n1", "n2"], tpl), wait=30)
d = fleet.merged_json()
st = {{n["node"]: n["status"] for n in d["nodes"]}}
assert st == {{"n1": "ok", "n2": "no-answer"}}, st
assert {{p["node"] for p in d["paths"]}} == {{"n1"}}
bad = [m for m in sys.modules if m.split(".")[0] in ("textual", "rich")]
assert not bad, bad
print("ok")
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=90,
                       cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT))
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_a_remote_differential_names_its_node(worker, tmp_path):
    src = StreamSource("n7")
    snap = src.feed(_remote_line(worker.pid, str(tmp_path)))
    d = differential("os.emfile", None, snap, source=src, checklist=[])
    assert d.node == "n7" and d.to_json()["node"] == "n7"
    local = LocalSource(Prober(pids=[worker.pid], watch_shm=False))
    assert differential("os.emfile", None, local.snapshot(), source=local, checklist=[]).node is None


def test_descriptive_fields_from_a_node_are_made_safe_paths_and_argv_kept_exact():
    line = json.dumps({"schema": 1, "unix_time": 1.0, "host": "n1\x1b]0;x\x07",
                       "processes": [{"pid": 5, "status": "running\x1b[2J", "error": "e\x9b",
                                      "cmdline": ["python", "--x=\x1b[31m"]}],
                       "paths": [{"path": "/ckpt/\x1b[1m", "fstype": "ext4\x1b[5m"}]})
    s = parse_line(line)
    assert "\x1b" not in s.host and "\x1b" not in s.processes[0].status
    assert "\x9b" not in s.processes[0].error and "\x1b" not in s.paths[0].fstype
    assert s.processes[0].cmdline[1] == "--x=\x1b[31m" and s.paths[0].path == "/ckpt/\x1b[1m"
