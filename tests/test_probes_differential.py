"""The ENOSPC/EMFILE differential beyond the exhaustion scenarios of test_probes_fs.py."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from denpex_tui.core.conditions import METRICS
from denpex_tui.probes.differential import NOTE, differential, differential_kind
from denpex_tui.probes.du import du_filesystem
from denpex_tui.probes.metrics import metrics_for
from denpex_tui.probes.readings import PathReading, Snapshot
from denpex_tui.probes.sampler import Prober
from denpex_tui.probes.trends import TrendTracker


def verdicts(d):
    return {c.cause: c.verdict for c in d.candidates}


def test_kinds():
    assert differential_kind("os.enospc") == "enospc"
    assert differential_kind("torch.save-write-failed") == "enospc"
    assert differential_kind("deepspeed.fastfilewriter-fd-leak") == "enospc"
    assert differential_kind("os.shm-enospc") == "enospc"
    assert differential_kind("os.emfile") == "emfile"
    assert differential_kind("torch.dataloader-too-many-open-files") == "emfile"
    assert differential_kind("deepspeed.aio-parallelism-config") is None
    assert differential_kind("nccl.watchdog-timeout") is None
    with pytest.raises(ValueError):
        differential("nccl.watchdog-timeout", None, Snapshot(time=0, host="h"))


def test_metrics_cover_the_doc_table(tmp_path):
    snap = Prober(pids=[os.getpid()], paths=[str(tmp_path)]).snapshot()
    m = metrics_for(str(tmp_path), snap, trends=TrendTracker(), du=False)
    assert set(m) == set(METRICS)
    assert m["path.bytes_free_pct"] is not None and m["proc.fd_used_pct"] is not None
    assert m["path.df_du_gap_pct"] is None  # du=False: not walked, not zero
    assert m["proc.fd_growth_per_save"] is None  # no saves seen


def test_path_missing_here_makes_path_causes_unknown(tmp_path):
    snap = Prober(pids=[], paths=[str(tmp_path)], discover=False).snapshot()
    gone = tmp_path / "node-local-nvme" / "zero_stage_3" / "x.swp"
    d = differential("os.enospc", str(gone), snap, error_node="gpu-node-07")
    v = verdicts(d)
    assert v["blocks"] == v["inodes"] == v["reserved"] == v["deleted-open"] == "unknown"
    # never a reading of another filesystem (the nearest existing ancestor): where to measure it
    assert not d.here and d.measured_path is None and d.mount is None
    cmd = f"df -h -- {gone.parent} && df -i -- {gone.parent}"
    assert d.where() == f"{gone} is not on this machine: measure it on gpu-node-07 with: {cmd}"
    assert d.caveats == [d.where()] and d.summary().startswith("not on this machine")
    by = {c.cause: c for c in d.candidates}
    assert by["blocks"].evidence == f"not on this machine: measure it on gpu-node-07 with: {cmd}"
    assert all(by[k].measured == {} and "GiB" not in by[k].evidence
               for k in ("blocks", "inodes", "reserved", "deleted-open"))
    assert by["deleted-open"].check.startswith(f"lsof -nP +L1 2>/dev/null | grep -F -- {gone.parent}")
    assert d.metrics["path.bytes_free_pct"] is None
    assert d.note == NOTE == "measured now, not at failure time"
    # a file that was never written, in a directory that exists: its filesystem is measured
    d2 = differential("os.enospc", str(tmp_path / "ckpt.pt"), snap, du=False)
    assert verdicts(d2)["blocks"] == "unlikely" and d2.caveats == []
    assert d2.measured_path == os.path.realpath(tmp_path)
    assert d2.where().startswith(f"measured {os.path.realpath(tmp_path)} on {d2.mount}")
    # no path in the error and none given with --path: nothing is measured, nothing is claimed
    assert differential("os.enospc", None, snap, du=False).measured_path == os.path.realpath(tmp_path)  # --path
    d3 = differential("os.enospc", None, Snapshot(time=time.time(), host="h", paths=[]), du=False)
    assert d3.measured_path is None and verdicts(d3)["blocks"] == "unknown"
    assert d3.where() == "nothing measured: the error names no path"


def test_edquot_and_lustre_quota():
    lustre = PathReading(path="/lustre/scratch/run", mount="/lustre", fstype="lustre",
                         fs_class="parallel", network_fs=True, exists=True,
                         measured_path="/lustre/scratch/run", bytes_total=10 ** 15,
                         bytes_free=10 ** 14, bytes_reserved=0, bytes_used=9 * 10 ** 14,
                         inodes_total=10 ** 9, inodes_free=10 ** 8)
    snap = Snapshot(time=time.time(), host="h", paths=[lustre])
    d = differential("os.enospc", "/lustre/scratch/run", snap)
    by = {c.cause: c for c in d.candidates}
    assert by["quota"].verdict == "unknown" and by["quota"].check.startswith("lfs quota")
    assert "Lustre can report an exceeded quota as ENOSPC" in by["quota"].evidence
    assert by["lustre-ost"].check.startswith("lfs df")
    assert by["deleted-open"].measured["du_unavailable"] == "network filesystem: not walked"
    dq = differential("os.edquot", "/lustre/scratch/run", snap)
    assert verdicts(dq)["quota"] == "likely"


def test_shm_name_points_at_dev_shm(tmp_path):
    snap = Prober(pids=[], paths=[str(tmp_path)], discover=False).snapshot()
    if snap.shm is None:
        pytest.skip("no /dev/shm")
    d = differential("os.shm-enospc", "</torch_7504_611462219_0>", snap, du=False)
    assert verdicts(d)["shm"] == "likely" and d.mount == snap.shm.mount
    d = differential("os.enospc", str(tmp_path / "x.pt"), snap, du=False)
    assert verdicts(d)["shm"] == "unlikely"


NEAR_LIMIT = r"""
import os, resource, sys
resource.setrlimit(resource.RLIMIT_NOFILE, (64, 1024))
held = []
while len(os.listdir("/proc/self/fd")) - 1 < 62:
    held.append(os.open(os.devnull, os.O_RDONLY))
print(len(os.listdir("/proc/self/fd")) - 1, flush=True)
sys.stdin.readline()
"""


def test_emfile_fd_limit_measured_on_a_real_process():
    p = subprocess.Popen([sys.executable, "-c", NEAR_LIMIT], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True,
                         env=dict(os.environ, RANK="3", LOCAL_RANK="3"))
    try:
        n = int(p.stdout.readline())
        snap = Prober(pids=[p.pid]).snapshot()
        d = differential("os.emfile", None, snap, TrendTracker())
        by = {c.cause: c for c in d.candidates}
        assert by["fd-limit"].verdict == "likely"
        assert f"{n} fds open of a soft limit of 64" in by["fd-limit"].evidence
        assert "raised to the hard limit 1024" in by["fd-limit"].evidence
        assert by["fd-leak"].verdict == "unknown"
        assert by["system-fd-table"].verdict == "unlikely"
        cl = {c.condition: c.result for c in d.checklist if c.condition}
        if "proc.fd_used_pct >= 95" in cl:  # os.emfile's built-in checklist
            assert cl["proc.fd_used_pct >= 95"] is (n * 100 / 64 >= 95)
        assert d.metrics["proc.fd_used_pct"] == pytest.approx(100 * n / 64)
    finally:
        p.kill()
        p.wait()
        p.stdin.close()
        p.stdout.close()


def test_emfile_leak_verdict_from_trends():
    from denpex_tui.probes.readings import ProcessReading

    tr = TrendTracker()
    for k in range(4):
        tr.ingest(Snapshot(time=k * 10.0, host="h", processes=[ProcessReading(
            pid=9, rank=3, fds=50 + 30 * k, fd_soft_limit=256, create_time=1.0, readable=True)]))
        tr.note_checkpoint_save(3, k * 10.0 + 5)
    last = Snapshot(time=40.0, host="h", processes=[ProcessReading(
        pid=9, rank=3, fds=170, fd_soft_limit=256, fd_hard_limit=256, create_time=1.0,
        readable=True)])
    tr.ingest(last)
    d = differential("os.emfile", None, last, tr)
    by = {c.cause: c for c in d.candidates}
    assert by["fd-leak"].verdict == "likely" and "30 more fds" in by["fd-leak"].evidence
    assert d.metrics["proc.fd_growth_per_save"] == pytest.approx(30.0)


def test_du_is_bounded(tmp_path):
    for i in range(50):
        (tmp_path / f"f{i}").write_bytes(b"x" * 10)
    r = du_filesystem(str(tmp_path), max_entries=10, use_cache=False)
    assert r.du_bytes is None and "capped" in r.reason
    os.link(tmp_path / "f0", tmp_path / "hardlink")  # same inode: counted once
    r = du_filesystem(str(tmp_path), use_cache=False)
    expect = os.stat(tmp_path).st_blocks * 512 + sum(
        os.stat(tmp_path / f"f{i}").st_blocks * 512 for i in range(50))
    assert r.du_bytes == expect and r.entries == 51
