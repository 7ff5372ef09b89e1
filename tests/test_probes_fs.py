"""Filesystem exhaustion, measured for real on small filesystems the test makes itself.

Each scenario runs a helper inside a private mount namespace (``unshare -m``): a tmpfs with
``size=`` and ``nr_inodes=`` (inodes, blocks, deleted-but-open files), or a loop-mounted ext4
image with 10 % root-reserved blocks filled by an unprivileged writer. The helper prints the
probe readings and the differential as JSON; the mounts vanish with the namespace. Skipped, with
the reason, where unshare/mount is not permitted.

Also here: the mount table (network/parallel/FUSE classes) and the hung-mount timeout.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time

import pytest

from denpex_tui.probes import sampler
from denpex_tui.probes.mounts import MountTable, fs_class

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

HELPER = r"""
import json, os, subprocess, sys, time
scenario, mnt, root = sys.argv[1:4]
sys.path.insert(0, root)

def sh(*a):
    subprocess.run(a, check=True, capture_output=True, timeout=30)

try:
    if scenario == "reserved":
        sh("mount", "-o", "loop", sys.argv[4], mnt)
        os.chown(mnt, 65534, 65534)
    else:
        opts = {"inodes": "size=4m,nr_inodes=64", "blocks": "size=1m,nr_inodes=1000",
                "deleted": "size=4m,nr_inodes=1000", "leak": "size=4m,nr_inodes=1000"}[scenario]
        sh("mount", "-t", "tmpfs", "-o", opts, "denpex-test", mnt)
except (subprocess.CalledProcessError, OSError) as e:
    err = getattr(e, "stderr", b"") or b""
    print(json.dumps({"skip": "cannot mount here: " + (err.decode(errors="replace").strip()
                                                       or str(e))}))
    sys.exit(0)

from denpex_tui.probes.sampler import Prober
from denpex_tui.probes.differential import differential
from denpex_tui.probes.du import clear_du_cache

facts = {}
pids = []
child = None
try:
    if scenario == "inodes":
        n = 0
        try:
            while True:
                open(os.path.join(mnt, "f%d" % n), "wb").close()
                n += 1
        except OSError as e:
            facts["errno"] = e.errno
        facts["files"] = n
    elif scenario == "blocks":
        try:
            with open(os.path.join(mnt, "big"), "wb") as f:
                while True:
                    f.write(b"b" * 65536)
                    f.flush()
        except OSError as e:
            facts["errno"] = e.errno
    elif scenario == "reserved":
        # opened as root (the test's tmp dirs are 0700), written as uid 65534: ext4 checks the
        # writer's credentials when it allocates blocks
        code = ("import os\nf = open(os.path.join(%r, 'fill'), 'wb')\n"
                "os.setgid(65534); os.setuid(65534)\n"
                "try:\n"
                "    while True:\n        f.write(b'r' * 4096); f.flush()\n"
                "except OSError as e:\n    print(e.errno)\n") % mnt
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=60)
        facts["errno"] = int(out.stdout.strip() or 0)
        # root may still write into the reserved blocks
        with open(os.path.join(mnt, "root-can"), "wb") as f:
            f.write(b"R" * 8192)
            f.flush()
            os.fsync(f.fileno())
        facts["root_wrote"] = True
    elif scenario == "deleted":
        code = ("import os, sys\n"
                "fd = os.open(os.path.join(%r, 'ckpt.pt'), os.O_CREAT | os.O_RDWR, 0o600)\n"
                "os.write(fd, b'c' * (3 << 20)); os.fsync(fd)\n"
                "os.unlink(os.path.join(%r, 'ckpt.pt'))\n"
                "print(os.fstat(fd).st_blocks * 512, flush=True)\n"
                "sys.stdin.readline()\n") % (mnt, mnt)
        child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True,
                                 env=dict(os.environ, RANK="4", LOCAL_RANK="0"))
        facts["held"] = int(child.stdout.readline())
        facts["child"] = child.pid
        pids = [child.pid]

    elif scenario == "leak":
        # FastFileWriter's bug, for real: every save opens a new file and never closes it, and
        # rotation deletes the save before last: the deleted files keep their blocks until ENOSPC
        code = ("import os, sys\n"
                "fds = []\n"
                "i = 0\n"
                "try:\n"
                "    while True:\n"
                "        p = os.path.join(%r, 'step_%%03d.pt' %% i)\n"
                "        fd = os.open(p, os.O_CREAT | os.O_WRONLY, 0o600)\n"
                "        fds.append(fd)\n"
                "        os.write(fd, b'w' * (512 << 10)); os.fsync(fd)\n"
                "        if i >= 2:\n"
                "            os.unlink(os.path.join(%r, 'step_%%03d.pt' %% (i - 2)))\n"
                "        i += 1\n"
                "except OSError as e:\n"
                "    print(i, e.errno, flush=True)\n"
                "sys.stdin.readline()\n") % (mnt, mnt)
        child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True,
                                 env=dict(os.environ, RANK="1", LOCAL_RANK="1"))
        saves, err = child.stdout.readline().split()
        facts.update(saves=int(saves), errno=int(err), child=child.pid)
        pids = [child.pid]

    prober = Prober(pids=pids, paths=[mnt], discover=False, watch_open_files=False)
    snap = prober.snapshot()
    clear_du_cache()
    sig = "deepspeed.fastfilewriter-fd-leak" if scenario == "deleted" else "os.enospc"
    out = {"facts": facts, "snapshot": snap.to_json(),
           "diff": differential("os.enospc", os.path.join(mnt, "x.pt"), snap).to_json()}
    if scenario == "leak":
        from denpex_tui.core.schema import snapshot_to_json
        from denpex_tui.probes.leak import leak_from_probe_json, name_leak

        err_path = os.path.join(mnt, "step_%03d.pt" % facts["saves"])
        out["leak"] = name_leak(differential("os.enospc", err_path, snap)).__dict__
        probe = json.loads(json.dumps({"snapshot": snapshot_to_json(snap)}))  # as probe.json holds it
        out["leak_bundle"] = leak_from_probe_json(probe, "os.enospc", err_path).__dict__
        child.stdin.close()
        child.wait(timeout=30)
        child = None
        clear_du_cache()
        snap2 = Prober(pids=[], paths=[mnt], discover=False, watch_open_files=False).snapshot()
        out["leak_after"] = name_leak(differential("os.enospc", err_path, snap2)).__dict__
    if scenario == "deleted":
        out["diff_leak"] = differential(sig, os.path.join(mnt, "x.pt"), snap).to_json()
        child.stdin.close()
        child.wait(timeout=30)
        child = None
        clear_du_cache()
        snap2 = Prober(pids=[], paths=[mnt], discover=False, watch_open_files=False).snapshot()
        out["after_exit"] = snap2.to_json()
        out["diff_after"] = differential("os.enospc", os.path.join(mnt, "x.pt"), snap2).to_json()
    print(json.dumps(out))
finally:
    if child is not None:
        child.kill()
        child.wait()
"""


def _can_unshare() -> str | None:
    if not sys.platform.startswith("linux"):
        return "Linux only"
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return "unshare/mount not installed"
    r = subprocess.run(["unshare", "-m", "--propagation", "private", "true"],
                       capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        return "unshare -m not permitted here: " + (r.stderr.strip() or f"exit {r.returncode}")
    return None


def run_scenario(scenario: str, tmp_path, *extra: str) -> dict:
    why = _can_unshare()
    if why:
        pytest.skip(why)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r = subprocess.run(
        ["unshare", "-m", "--propagation", "private", sys.executable, "-c", HELPER, scenario,
         str(mnt), ROOT, *extra],
        capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise AssertionError(f"helper failed ({r.returncode}): {r.stderr[-3000:]}")
    out = json.loads(r.stdout.strip().splitlines()[-1])
    if "skip" in out:
        pytest.skip(out["skip"])
    out["mnt"] = str(mnt)
    return out


def _path(snap: dict, mnt: str) -> dict:
    [p] = [p for p in snap["paths"] if p["path"] == mnt]
    return p


def _verdicts(diff: dict) -> dict:
    return {c["cause"]: c["verdict"] for c in diff["candidates"]}


def _checklist(diff: dict) -> dict:
    return {c["condition"]: c["result"] for c in diff["checklist"] if c["condition"]}


def test_inode_exhaustion(tmp_path):
    out = run_scenario("inodes", tmp_path)
    assert out["facts"]["errno"] == 28  # ENOSPC with bytes free
    p = _path(out["snapshot"], out["mnt"])
    assert p["fstype"] == "tmpfs" and p["mount"] == out["mnt"] and p["network_fs"] is False
    assert p["inodes_total"] == 64 and p["inodes_free"] == 0
    assert out["facts"]["files"] == 63  # the root directory holds one inode
    assert p["bytes_free"] == p["bytes_total"] == 4 << 20
    v = _verdicts(out["diff"])
    assert v["inodes"] == "likely" and v["blocks"] == "unlikely"
    assert v["reserved"] == "unlikely" and v["deleted-open"] == "unlikely"
    assert v["quota"] == "unknown" and v["shm"] == "unlikely"
    cl = _checklist(out["diff"])
    assert cl["path.inodes_free_pct < 1 and path.bytes_free_pct >= 1"] is True
    assert cl["path.bytes_free_pct < 1"] is False
    assert out["diff"]["note"] == "measured now, not at failure time"


def test_block_exhaustion(tmp_path):
    out = run_scenario("blocks", tmp_path)
    assert out["facts"]["errno"] == 28
    p = _path(out["snapshot"], out["mnt"])
    assert p["bytes_total"] == 1 << 20 and p["bytes_free"] == 0 and p["bytes_reserved"] == 0
    assert p["inodes_free"] > 900
    v = _verdicts(out["diff"])
    assert v["blocks"] == "likely" and v["inodes"] == "unlikely" and v["reserved"] == "unlikely"
    assert v["deleted-open"] == "unlikely"  # df used == du: the data is reachable
    cl = _checklist(out["diff"])
    assert cl["path.bytes_free_pct < 1"] is True
    assert cl["path.df_du_gap_pct > 5"] is False


def test_deleted_but_open_files_hold_the_space(tmp_path):
    out = run_scenario("deleted", tmp_path)
    held = out["facts"]["held"]
    assert held == 3 << 20
    [proc] = out["snapshot"]["processes"]
    assert proc["pid"] == out["facts"]["child"] and proc["rank"] == 4
    assert proc["deleted_open_files"] == 1 and proc["deleted_open_bytes"] == held
    p = _path(out["snapshot"], out["mnt"])
    assert p["deleted_open_bytes"] == held
    assert p["bytes_total"] - p["bytes_free"] == held  # df counts what du cannot see
    m = out["diff"]["metrics"]
    assert m["path.df_du_gap_pct"] == pytest.approx(75.0)
    assert m["proc.deleted_open_bytes"] == held
    [cand] = [c for c in out["diff"]["candidates"] if c["cause"] == "deleted-open"]
    assert cand["verdict"] == "likely"
    assert cand["measured"]["holders"][0]["pid"] == proc["pid"]
    assert cand["measured"]["du"] == 0
    leak = _checklist(out["diff_leak"])
    assert leak["proc.deleted_open_bytes > 0"] is True
    assert leak["path.df_du_gap_pct > 5"] is True
    assert leak["proc.fd_growth_per_save > 0"] is None  # no trend: not measurable here
    # the holder exits: the blocks come back, the gap closes
    after = _path(out["after_exit"], out["mnt"])
    assert after["bytes_free"] == after["bytes_total"]
    assert out["diff_after"]["metrics"]["path.df_du_gap_pct"] == pytest.approx(0.0)
    assert _verdicts(out["diff_after"])["deleted-open"] == "unlikely"


def test_ext4_reserved_blocks(tmp_path):
    if shutil.which("mkfs.ext4") is None:
        pytest.skip("mkfs.ext4 not installed")
    if not os.path.exists("/dev/loop-control"):
        pytest.skip("no loop devices (/dev/loop-control missing)")
    img = tmp_path / "ext4.img"
    with open(img, "wb") as f:
        f.truncate(8 << 20)
    r = subprocess.run(["mkfs.ext4", "-q", "-F", "-m", "10", "-N", "128", "-O", "^has_journal",
                        str(img)], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        pytest.skip("mkfs.ext4 failed: " + r.stderr.strip()[-200:])
    out = run_scenario("reserved", tmp_path, str(img))
    assert out["facts"]["errno"] == 28 and out["facts"]["root_wrote"]
    p = _path(out["snapshot"], out["mnt"])
    assert p["fstype"] == "ext4" and p["source"].startswith("/dev/loop")
    assert p["bytes_free"] == 0  # f_bavail: nothing left for unprivileged writers
    assert p["bytes_reserved_pct"] > 8  # ~10 % kept for root
    v = _verdicts(out["diff"])
    assert v["reserved"] == "likely" and v["blocks"] == "likely"
    cl = _checklist(out["diff"])
    assert cl["path.bytes_free_pct < 1 and path.bytes_reserved_pct >= 1"] is True


# --- mount table and hung mounts ----------------------------------------------------------

MOUNTINFO = """\
22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw
40 27 0:50 / /mnt/nfs rw,relatime shared:7 - nfs4 fileserver:/export/home rw,vers=4.2
41 27 0:51 / /lustre rw - lustre 10.0.0.1@o2ib:/scratch rw,flock
42 27 0:52 / /mnt/ssh rw,nosuid - fuse.sshfs me@host:/data rw,user_id=0
43 27 0:53 / /beegfs rw - beegfs beegfs_nodev rw
44 27 0:54 / /gpfs/fs1 rw - gpfs fs1 rw
45 27 0:55 /sub /bind rw - ext4 /dev/vda rw
46 27 0:56 / /with\\040space rw - tmpfs tmpfs rw
47 27 0:57 / /mnt/ro ro,relatime - ext4 /dev/vdb ro
48 27 0:58 / /dev/shm rw - tmpfs tmpfs rw,size=65536k
49 48 0:59 / /dev/shm rw - tmpfs shm rw,size=6144k
"""


def test_mount_table_lookup_and_classes():
    t = MountTable(text=MOUNTINFO)
    assert t.find("/mnt/nfs/user/ckpt").fstype == "nfs4"
    assert t.find("/mnt/nfs").network and t.find("/mnt/nfsx").fstype == "ext4"
    assert t.find("/lustre/run1").fs_class == "parallel"
    assert t.find("/mnt/ssh/x").fs_class == "fuse" and t.find("/mnt/ssh/x").network
    assert t.find("/beegfs").fs_class == "parallel"
    assert t.find("/gpfs/fs1/a").fs_class == "parallel"
    assert t.find("/bind/x").root == "/sub"
    assert t.find("/with space/f").mount_point == "/with space"
    assert t.find("/mnt/ro/x").readonly
    assert t.find("/dev/shm/x").source == "shm"  # the last of stacked mounts wins
    assert t.find("/tmp/x").mount_point == "/"
    assert fs_class("fuse-overlayfs") == "local" and fs_class("tmpfs") == "memory"
    assert fs_class("smb3") == "network" and fs_class("ceph") == "parallel"
    assert fs_class("9p") == "network" and fs_class("fuse.juicefs") == "parallel"


def test_hung_network_mount_times_out(tmp_path, monkeypatch):
    # a mount table that says tmp_path is on NFS, and a statvfs that blocks like a dead server
    text = MOUNTINFO + f"60 27 0:70 / {tmp_path} rw - nfs4 deadserver:/x rw\n"
    release = threading.Event()
    real = sampler._statvfs_and_dev

    def hanging(path):
        if path.startswith(str(tmp_path)):
            release.wait(30)
        return real(path)

    monkeypatch.setattr(sampler, "_statvfs_and_dev", hanging)
    meter = sampler.PathMeter(MountTable(text=text), timeout=0.3, guard=sampler._HangGuard())
    t0 = time.monotonic()
    r, _dev = meter.read(str(tmp_path))
    assert time.monotonic() - t0 < 2.0
    assert r.error == "did not answer in 0.3 s" and r.bytes_free is None and r.network_fs is True
    assert r.fstype == "nfs4" and r.to_json()["bytes_total"] is None
    # still stuck: answered at once, no second thread piles up
    t0 = time.monotonic()
    r2, _ = meter.read(str(tmp_path))
    assert r2.error == "did not answer in 0.3 s" and time.monotonic() - t0 < 0.2
    assert len(meter.guard.stuck()) == 1
    release.set()
    time.sleep(0.2)
    r3, _ = meter.read(str(tmp_path))
    assert r3.error is None and r3.bytes_total and r3.bytes_total > 0


def test_local_path_is_not_threaded(tmp_path, monkeypatch):
    calls = []
    guard = sampler._HangGuard()
    orig = guard.call
    monkeypatch.setattr(guard, "call", lambda *a, **k: calls.append(a[0]) or orig(*a, **k))
    t = MountTable(text="27 1 254:0 / / rw - ext4 /dev/vda rw\n")
    meter = sampler.PathMeter(t, guard=guard)
    r, dev = meter.read(str(tmp_path))
    assert r.error is None and dev == os.stat(tmp_path).st_dev and calls == []


def test_fd_leak_of_deleted_checkpoints_is_named_from_the_readings(tmp_path):
    """The second founding entry's mechanism on a real 4 MiB tmpfs: a writer that never closes its
    checkpoint files while rotation deletes them fails with ENOSPC; the live readings, and the same
    readings read back as an evidence bundle's probe.json, name the leak; once the holder exits
    (the blocks come back) nothing points at it any more."""
    out = run_scenario("leak", tmp_path)
    assert out["facts"]["errno"] == 28 and out["facts"]["saves"] >= 4
    [proc] = out["snapshot"]["processes"]
    assert proc["rank"] == 1 and proc["deleted_open_files"] >= 2
    assert out["leak"]["named"] is True and "deepspeed.fastfilewriter-fd-leak" in out["leak"]["why"]
    assert f"pid {proc['pid']} (rank 1)" in out["leak"]["why"]
    assert out["leak_bundle"]["named"] is True
    assert out["leak_after"]["named"] is False
