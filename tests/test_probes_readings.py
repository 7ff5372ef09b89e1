"""Probe readings of real child processes, checked exactly.

Each child sets RANK/LOCAL_RANK/WORLD_SIZE through its environment, lowers its own
RLIMIT_NOFILE, opens files, writes known sizes with fsync, unlinks some while open, reports what
it measured on itself (fd count from /proc/self/fd, st_blocks of the deleted files) and waits on
stdin for commands. The readings must match those figures exactly.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import queue
import subprocess
import sys
import threading
import time

import pytest
from helpers import psutil_create_time

from denpex_tui.probes import facade
from denpex_tui.probes.readings import SCHEMA
from denpex_tui.probes.sampler import Prober

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = r"""
import json, os, resource, sys
soft, hard, n, ndel, size = (int(x) for x in sys.argv[1:6])
d = sys.argv[6]
resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
fds = []
for i in range(n):
    fd = os.open(os.path.join(d, "f%d.bin" % i), os.O_CREAT | os.O_RDWR, 0o600)
    os.write(fd, b"x" * (size * (i + 1)))
    os.fsync(fd)
    fds.append(fd)
deleted = 0
for i in range(ndel):
    os.unlink(os.path.join(d, "f%d.bin" % i))
    deleted += os.fstat(fds[i]).st_blocks * 512
if ndel:
    fds.append(os.dup(fds[0]))  # a second fd on a deleted inode: counted once
shm = 0
nshm = 0
if len(sys.argv) > 7 and sys.argv[7] == "shm":
    m = os.memfd_create("torch_test_seg")
    os.write(m, b"s" * 100000)
    shm += os.fstat(m).st_blocks * 512
    p = "/dev/shm/denpex_test_%d" % os.getpid()
    s = os.open(p, os.O_CREAT | os.O_RDWR, 0o600)
    os.write(s, b"t" * 50000)
    os.unlink(p)
    shm += os.fstat(s).st_blocks * 512
    nshm = 2
extra = []

def count():
    return len(os.listdir("/proc/self/fd")) - 1  # minus the listdir fd itself

print(json.dumps({"fds": count(), "deleted_bytes": deleted, "shm_bytes": shm, "nshm": nshm}),
      flush=True)
print("ready", flush=True)
for line in sys.stdin:
    cmd = line.split()
    if not cmd or cmd[0] == "exit":
        break
    if cmd[0] == "open":
        for _ in range(int(cmd[1])):
            extra.append(os.open(os.devnull if len(cmd) > 2 else sys.argv[6], os.O_RDONLY))
    elif cmd[0] == "close":
        for _ in range(int(cmd[1])):
            os.close(extra.pop())
    print("ok %d" % count(), flush=True)
"""


def _start_reader(proc: subprocess.Popen) -> "queue.Queue[str | None]":
    """Lines of the child's stdout through a queue (select() cannot see lines already buffered
    by the text wrapper)."""
    q: "queue.Queue[str | None]" = queue.Queue()

    def pump():
        for line in proc.stdout:
            q.put(line.strip())
        q.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return q


def _readline(q, timeout: float = 10.0) -> str:
    try:
        line = q.get(timeout=timeout)
    except queue.Empty:
        raise TimeoutError("child did not answer") from None
    if line is None:
        raise RuntimeError("child exited")
    return line


class Child:
    def __init__(self, tmp_path, soft=200, hard=400, n=6, ndel=2, size=10000, shm=False,
                 env=None):
        e = dict(os.environ)
        e.update({"RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8"})
        e.update(env or {})
        args = [sys.executable, "-c", CHILD, str(soft), str(hard), str(n), str(ndel), str(size),
                str(tmp_path)] + (["shm"] if shm else [])
        self.p = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, text=True, env=e)
        self.q = _start_reader(self.p)
        try:
            self.info = json.loads(_readline(self.q))
            assert _readline(self.q) == "ready"
        except BaseException:
            self.kill()
            raise
        self.pid = self.p.pid

    def cmd(self, text: str) -> int:
        self.p.stdin.write(text + "\n")
        self.p.stdin.flush()
        line = _readline(self.q)
        assert line.startswith("ok ")
        return int(line.split()[1])

    def kill(self):
        try:
            self.p.kill()
        finally:
            self.p.wait(timeout=10)
            for f in (self.p.stdin, self.p.stdout):
                try:
                    f.close()
                except Exception:
                    pass


@pytest.fixture
def child(tmp_path):
    made = []

    def make(**kw):
        c = Child(tmp_path, **kw)
        made.append(c)
        return c

    yield make
    for c in made:
        c.kill()


def _proc(snap, pid):
    [r] = [p for p in snap.processes if p.pid == pid]
    return r


def test_readings_are_exact(child, tmp_path):
    c = child(soft=200, hard=400, n=6, ndel=2, size=10000)
    pr = Prober(pids=[c.pid], paths=[str(tmp_path)])
    snap = pr.snapshot()
    r = _proc(snap, c.pid)
    assert r.readable is True and r.error is None
    assert (r.rank, r.local_rank, r.world_size) == (5, 1, 8)
    assert r.fds == c.info["fds"]
    assert (r.fd_soft_limit, r.fd_hard_limit) == (200, 400)
    assert r.deleted_open_files == 2  # the dup of a deleted inode is not counted twice
    assert r.deleted_open_bytes == c.info["deleted_bytes"] > 0
    assert r.fds_by_kind["file"] == 7  # 6 files + the dup
    assert r.fds_by_kind["pipe"] == 2  # stdin, stdout
    assert r.fds_by_kind["dev"] == 1  # stderr -> /dev/null
    assert r.open_under_watched == {os.path.realpath(tmp_path): 7}
    assert r.shm_open_files == 0 and r.shm_open_bytes == 0
    assert r.status in ("sleeping", "running")
    assert r.rss_bytes > 0
    assert r.uid == os.getuid()
    assert r.fd_used_pct == pytest.approx(100.0 * c.info["fds"] / 200)
    paths = {p.path: p for p in snap.paths}
    tp = paths[os.path.realpath(tmp_path)] if os.path.realpath(tmp_path) in paths else paths[str(tmp_path)]
    assert tp.open_fds == 7
    assert tp.deleted_open_bytes == c.info["deleted_bytes"]
    st = os.statvfs(tmp_path)
    assert tp.bytes_total == st.f_blocks * st.f_frsize
    assert tp.inodes_total == st.f_files


def test_fd_count_delta_is_exact(child, tmp_path):
    c = child(n=3, ndel=0)
    pr = Prober(pids=[c.pid])
    before = _proc(pr.snapshot(), c.pid).fds
    assert before == c.info["fds"]
    after_count = c.cmd("open 17")
    after = _proc(pr.snapshot(), c.pid).fds
    assert after - before == 17 == after_count - c.info["fds"]
    c.cmd("close 5")
    assert _proc(pr.snapshot(), c.pid).fds - before == 12


def test_memfd_and_dev_shm_are_counted_apart(child, tmp_path):
    if not hasattr(os, "memfd_create") or not os.path.isdir("/dev/shm"):
        pytest.skip("needs memfd_create and /dev/shm")
    c = child(n=2, ndel=1, shm=True)
    r = _proc(Prober(pids=[c.pid]).snapshot(), c.pid)
    assert r.shm_open_files == c.info["nshm"] == 2
    assert r.shm_open_bytes == c.info["shm_bytes"]
    assert r.fds_by_kind["shm"] == 2
    assert r.deleted_open_files == 1  # the shm segments are not "deleted-open" files
    assert r.deleted_open_bytes == c.info["deleted_bytes"]


def test_exited_process_is_unreadable_with_nulls(child):
    c = child(n=1, ndel=0)
    ct = facade.read_process(c.pid).create_time
    pr = Prober(pids=[c.pid])
    assert _proc(pr.snapshot(), c.pid).readable
    c.kill()
    r = facade.read_process(c.pid, expect_create_time=ct)
    assert r.readable is False and r.error in ("exited", "pid reused")
    for name in ("fds", "fd_soft_limit", "fd_hard_limit", "deleted_open_files",
                 "deleted_open_bytes", "rss_bytes", "fds_by_kind"):
        assert getattr(r, name) is None, name
    r2 = _proc(pr.snapshot(), c.pid)
    assert r2.readable is False and r2.error in ("exited", "pid reused")
    j = r2.to_json()
    assert j["fds"] is None and j["deleted_open_bytes"] is None and j["rss_bytes"] is None
    assert j["readable"] is False


def test_pid_reuse_guard():
    # a live pid whose start time differs from the one we watched is another process now
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        real = facade.read_process(p.pid)
        assert real.readable and real.create_time is not None
        r = facade.read_process(p.pid, expect_create_time=real.create_time - 3.0)
        assert r.readable is False and r.error == "pid reused"
        assert r.fds is None and r.rss_bytes is None and r.fd_soft_limit is None
        same = facade.read_process(p.pid, expect_create_time=real.create_time)
        assert same.readable and same.error is None
    finally:
        p.kill()
        p.wait()


def test_create_time_matches_psutil():
    psutil = pytest.importorskip("psutil")
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert facade.read_process(p.pid).create_time == pytest.approx(psutil_create_time(p.pid), abs=1e-6)
    finally:
        p.kill()
        p.wait()


def test_zombie_is_unreadable():
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with open(f"/proc/{p.pid}/stat", "rb") as f:
                raw = f.read()
            if raw[raw.rindex(b")") + 2:].split()[0] == b"Z":
                break
            time.sleep(0.02)
        r = facade.read_process(p.pid)
        assert r.status == "zombie" and r.readable is False and r.error == "zombie"
        assert r.fds is None and r.rss_bytes is None
    finally:
        p.wait()


def test_access_denied_is_unreadable_not_zero(child):
    if os.getuid() != 0:
        pytest.skip("needs root to drop to another uid")
    c = child(n=2, ndel=1)
    code = (
        "import json, os, sys\n"
        f"sys.path.insert(0, {ROOT!r})\n"
        "from denpex_tui.probes.facade import read_process\n"
        "os.setgid(65534); os.setuid(65534)\n"
        f"r = read_process({c.pid})\n"
        "print(json.dumps(r.to_json()))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=30, cwd="/")
    if out.returncode != 0:
        pytest.skip("cannot run python as uid 65534 here: " + out.stderr.strip()[-200:])
    j = json.loads(out.stdout)
    assert j["readable"] is False and j["error"] == "access denied"
    assert j["fds"] is None and j["deleted_open_files"] is None
    assert j["deleted_open_bytes"] is None and j["fds_by_kind"] is None


def test_nonexistent_pid_never_raises():
    r = facade.read_process(2 ** 22 + 12345)
    assert r.readable is False and r.error == "exited" and r.fds is None


def test_snapshot_json_schema(child, tmp_path):
    c = child(n=2, ndel=1)
    snap = Prober(pids=[c.pid], paths=[str(tmp_path), str(tmp_path / "not" / "there")]).snapshot()
    j = json.loads(json.dumps(snap.to_json()))
    assert j["schema"] == SCHEMA == 1
    t = dt.datetime.fromisoformat(j["time"])
    assert t.tzinfo is not None and t.utcoffset() is not None
    assert j["host"]
    proc_keys = {"pid", "rank", "local_rank", "cmdline", "fds", "fd_soft_limit", "fd_hard_limit",
                 "deleted_open_files", "deleted_open_bytes", "rss_bytes", "status"}
    path_keys = {"path", "mount", "fstype", "bytes_total", "bytes_free", "bytes_reserved",
                 "inodes_total", "inodes_free", "network_fs"}
    [p] = j["processes"]
    assert proc_keys <= set(p)
    assert isinstance(p["cmdline"], list) and p["rank"] == 5 and p["local_rank"] == 1
    assert p["readable"] is True
    for pth in j["paths"]:
        assert path_keys <= set(pth)
        assert isinstance(pth["network_fs"], bool)
    missing = [x for x in j["paths"] if x["path"].endswith("/not/there")]
    assert missing and missing[0]["exists"] is False
    assert missing[0]["measured_path"] == os.path.realpath(tmp_path)
    assert any(x["shm"] for x in j["paths"]) == os.path.isdir("/dev/shm")


def test_reserved_and_free_are_f_bavail_based(tmp_path):
    snap = Prober(pids=[], paths=[str(tmp_path)], discover=False, watch_shm=False,
                  watch_open_files=False).snapshot()
    [r] = snap.paths
    st = os.statvfs(r.measured_path)
    f = st.f_frsize
    # statvfs is read again here: allow for other writers between the two calls
    assert abs(r.bytes_free - st.f_bavail * f) < 64 * 1024 * 1024
    assert r.bytes_reserved == pytest.approx((st.f_bfree - st.f_bavail) * f, rel=0.01, abs=1 << 26)
    assert r.mount and r.fstype and r.network_fs is False
