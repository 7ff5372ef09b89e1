"""Tailer end to end: directories, globs, late files, errors, exec sources, hung mounts."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time

import pytest

from denpex_tui.live import sources
from denpex_tui.live.execsource import ExecSource, parse_exec_spec
from denpex_tui.live.sources import Chunk, SourceEvent
from denpex_tui.live.pollwork import TokenBucket
from denpex_tui.live.tailer import TailOptions, Tailer

FAST = dict(poll_min=0.02, poll_max=0.2, poll_max_watched=0.5, dir_poll_min=0.1, dir_poll_max=0.3)


def run_tailer(paths, scenario, *, timeout=20.0, execs=(), mounts=None, proctable=None, **kw):
    """Run a Tailer while ``scenario(tailer, items)`` drives it; return all items."""
    params = dict(FAST)
    params.update(kw)

    async def main():
        t = Tailer(paths, execs, options=TailOptions(**params), mounts=mounts, proctable=proctable)
        items: list = []

        async def drive():
            try:
                await scenario(t, items)
            finally:
                t.stop()

        task = asyncio.ensure_future(drive())

        async def consume():
            async for it in t.run():
                items.append(it)

        await asyncio.wait_for(consume(), timeout)
        await task
        return items

    return asyncio.run(main())


async def until(pred, timeout=5.0):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if pred():
            return True
        await asyncio.sleep(0.02)
    raise AssertionError("condition not met in time")


def data_of(items, suffix):
    return b"".join(i.data for i in items if isinstance(i, Chunk) and i.path.endswith(suffix))


def events(items, state=None):
    return [i for i in items if isinstance(i, SourceEvent) and (state is None or i.state == state)]


@pytest.mark.parametrize("inotify", [False, True])
def test_directory_picks_up_late_files_and_new_attempt_dirs(tmp_path, inotify):
    root = tmp_path / "logs"
    (root / "attempt_0" / "0").mkdir(parents=True)
    (root / "attempt_0" / "0" / "stdout.log").write_bytes(b"r0 start\n")
    (root / "attempt_0" / "0" / "model.pt").write_bytes(b"\0\1binary")
    (root / "attempt_0" / "0" / "train.log.1").write_bytes(b"old rotated line\n")

    async def scenario(t, items):
        await until(lambda: b"r0 start" in data_of(items, "stdout.log"))
        (root / "attempt_0" / "1").mkdir()
        (root / "attempt_0" / "1" / "stdout.log").write_bytes(b"r1 late\n")
        await until(lambda: b"r1 late" in data_of(items, "1/stdout.log"))
        (root / "attempt_1" / "0").mkdir(parents=True)
        (root / "attempt_1" / "0" / "stderr.log").write_bytes(b"restart\n")
        (root / "attempt_1" / "0" / "x.log.1").write_bytes(b"rotated later: not history\n")
        await until(lambda: b"restart" in data_of(items, "stderr.log"))
        await asyncio.sleep(0.5)

    items = run_tailer([str(root) + "/"], scenario, inotify=inotify)
    paths = {i.path for i in items if isinstance(i, Chunk)}
    assert not any(p.endswith("model.pt") for p in paths)
    hist = [i for i in items if isinstance(i, Chunk) and i.path.endswith("train.log.1")]
    assert hist and all(c.history for c in hist)
    assert not any(p.endswith("x.log.1") for p in paths)
    assert [c.history for c in items if isinstance(c, Chunk) and c.path.endswith("0/stdout.log") and b"r0" in c.data] == [True]
    assert all(not c.history for c in items if isinstance(c, Chunk) and b"late" in c.data)


def test_glob_is_reevaluated(tmp_path):
    (tmp_path / "n1").mkdir()
    (tmp_path / "n1" / "rank0.log").write_bytes(b"a\n")
    (tmp_path / "n1" / "other.log").write_bytes(b"no\n")

    async def scenario(t, items):
        await until(lambda: b"a\n" in data_of(items, "rank0.log"))
        (tmp_path / "n2").mkdir()
        (tmp_path / "n2" / "rank9.log").write_bytes(b"b\n")
        await until(lambda: b"b\n" in data_of(items, "rank9.log"))

    items = run_tailer([str(tmp_path / "*" / "rank*.log")], scenario, inotify=False)
    assert data_of(items, "other.log") == b""


def test_deleted_file_is_reported_and_others_keep_going(tmp_path):
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_bytes(b"a1\n")
    b.write_bytes(b"b1\n")

    async def scenario(t, items):
        await until(lambda: b"a1" in data_of(items, "a.log") and b"b1" in data_of(items, "b.log"))
        os.unlink(a)
        await until(lambda: events(items, "deleted"), timeout=8)
        with open(b, "ab") as fh:
            fh.write(b"b2\n")
        await until(lambda: b"b2" in data_of(items, "b.log"))

    items = run_tailer([str(a), str(b)], scenario, inotify=False)
    assert [e.path for e in events(items, "deleted")] == [str(a)]


def test_fifo_and_missing_paths_are_errors_not_fatal(tmp_path):
    fifo = tmp_path / "pipe.log"
    os.mkfifo(fifo)
    ok = tmp_path / "ok.log"
    ok.write_bytes(b"fine\n")
    missing = tmp_path / "nope.log"

    async def scenario(t, items):
        await until(lambda: b"fine" in data_of(items, "ok.log"))
        await until(lambda: len(events(items, "error")) >= 2)
        missing.write_bytes(b"appeared\n")
        await until(lambda: b"appeared" in data_of(items, "nope.log"))

    items = run_tailer([str(fifo), str(ok), str(missing)], scenario, inotify=False)
    errs = {e.path: e.detail for e in events(items, "error")}
    assert "FIFO" in errs[str(fifo)]
    assert "not found" in errs[str(missing)]


def test_hung_stat_stalls_only_its_source(tmp_path, monkeypatch):
    """A stat that never returns (dead NFS mount) must not freeze the loop or other files."""
    hung_dir = tmp_path / "dead"
    hung_dir.mkdir()
    (hung_dir / "r1.log").write_bytes(b"x\n")
    good = tmp_path / "good.log"
    good.write_bytes(b"")
    release = threading.Event()
    real_fstat, real_stat = sources.os_fstat, sources.os_stat
    hung_fds: set[int] = set()
    armed = threading.Event()

    def fstat(fd):
        if fd in hung_fds and armed.is_set():
            release.wait(10)
        return real_fstat(fd)

    def stat(path, *a, **k):
        if armed.is_set() and str(path).startswith(str(hung_dir)):
            release.wait(10)
        return real_stat(path, *a, **k)

    real_open = sources.os_open

    def op(path, flags, *a):
        fd = real_open(path, flags, *a)
        if str(path).startswith(str(hung_dir)):
            hung_fds.add(fd)
        return fd

    monkeypatch.setattr(sources, "os_fstat", fstat)
    monkeypatch.setattr(sources, "os_stat", stat)
    monkeypatch.setattr(sources, "os_open", op)
    # two "mounts": the dead dir is its own mount point in this fake table
    from denpex_tui.probes.mounts import MountTable

    mounts = MountTable(text=f"20 1 8:1 / / rw - ext4 /dev/x rw\n21 20 0:50 / {hung_dir} rw - nfs4 srv:/e rw\n")

    async def scenario(t, items):
        await until(lambda: b"x\n" in data_of(items, "r1.log"))
        armed.set()
        await until(lambda: any("timed out" in e.detail for e in events(items, "error")), timeout=5)
        # the loop is responsive and the other file still flows
        t0 = time.monotonic()
        await asyncio.sleep(0.05)
        assert time.monotonic() - t0 < 0.5
        with open(good, "ab") as fh:
            fh.write(b"still flowing\n")
        await until(lambda: b"still flowing" in data_of(items, "good.log"), timeout=3)
        release.set()
        await until(lambda: any(e.detail.startswith("resumed") for e in events(items, "added")), timeout=5)

    try:
        items = run_tailer([str(hung_dir / "r1.log"), str(good)], scenario, inotify=False, call_timeout=0.5, mounts=mounts)
    finally:
        release.set()
    err = [e for e in events(items, "error") if "timed out" in e.detail]
    assert err and err[0].path == str(hung_dir / "r1.log")


def test_metadata_cap_is_respected(tmp_path):
    paths = []
    for i in range(40):
        p = tmp_path / f"r{i}.log"
        p.write_bytes(b"x\n")
        paths.append(str(p))
    rate = 100.0
    box = {}

    async def scenario(t, items):
        await until(lambda: len(events(items, "added")) == 40, timeout=5)
        box["t0"], box["c0"] = time.monotonic(), t.metadata_calls()
        await asyncio.sleep(2.0)
        box["t1"], box["c1"] = time.monotonic(), t.metadata_calls()

    run_tailer(paths, scenario, inotify=False, poll_min=0.01, poll_max=0.05, max_meta_per_s=rate)
    per_s = (box["c1"] - box["c0"]) / (box["t1"] - box["t0"])
    assert per_s <= rate * 1.15 + 30 / 2.0, per_s
    assert per_s > rate * 0.5  # and it is actually used


def test_token_bucket():
    t = [0.0]
    b = TokenBucket(10, burst=5, clock=lambda: t[0])
    assert sum(b.take(1, 0.0) for _ in range(10)) == 5
    assert b.wait_time(1, 0.0) == pytest.approx(0.1)
    assert b.take(1, 0.1)
    b.charge(3, 0.1)
    assert not b.take(1, 0.2)


def test_from_end_skips_history(tmp_path):
    p = tmp_path / "a.log"
    p.write_bytes(b"old\n" * 100)

    async def scenario(t, items):
        await until(lambda: events(items, "added"))
        with open(p, "ab") as fh:
            fh.write(b"new\n")
        await until(lambda: b"new" in data_of(items, "a.log"))

    items = run_tailer([str(p)], scenario, from_end=True, inotify=False)
    assert data_of(items, "a.log") == b"new\n"


def test_exec_source_lines_rank_and_exit_event():
    async def scenario(t, items):
        await until(lambda: events(items, "exited"))

    items = run_tailer([], scenario, execs=["5=printf 'one\\ntwo\\nthr'; printf 'ee\\n'; echo err >&2; exit 7"])
    chunks = [i for i in items if isinstance(i, Chunk)]
    assert b"".join(c.data for c in chunks) == b"one\ntwo\nthree\nerr\n"
    assert all(c.kind == "exec" and c.rank == 5 for c in chunks)
    ex = events(items, "exited")
    assert len(ex) == 1 and "exit code 7" in ex[0].detail


def test_exec_stop_kills_process_group(tmp_path):
    marker = tmp_path / "pid"

    async def main():
        src = ExecSource(f"sh -c 'echo $$ > {marker}; sleep 60' & wait", None)
        agen = src.run()
        first = await agen.__anext__()
        assert first.state == "added"
        for _ in range(100):
            if marker.exists() and marker.read_text().strip():
                break
            await asyncio.sleep(0.02)
        child = int(marker.read_text())
        await src.stop(grace=1.0)
        await agen.aclose()
        return child

    child = asyncio.run(main())
    time.sleep(0.1)
    try:
        with open(f"/proc/{child}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        state = "gone"
    assert state in ("gone", "Z", "X")  # killed (a zombie until its new parent reaps it)


def test_parse_exec_spec():
    assert parse_exec_spec("3=kubectl logs -f pod-3") == (3, "kubectl logs -f pod-3")
    assert parse_exec_spec("kubectl logs -f pod-3") == (None, "kubectl logs -f pod-3")
    assert parse_exec_spec("FOO=1 ./run.sh") == (None, "FOO=1 ./run.sh")
    assert parse_exec_spec("tail -F x --n=3") == (None, "tail -F x --n=3")
    assert parse_exec_spec("12=a=b") == (12, "a=b")
    with pytest.raises(ValueError):
        parse_exec_spec("3=  ")


def test_backpressure_bounds_buffered_bytes(tmp_path):
    p = tmp_path / "big.log"
    p.write_bytes((b"y" * 99 + b"\n") * 200_000)  # 20 MB of history
    seen = {"max": 0, "bytes": 0}

    async def main():
        t = Tailer([str(p)], options=TailOptions(inotify=False, max_buffered=1 << 20, batch_bytes=1 << 19, **FAST))
        async for it in t.run():
            seen["max"] = max(seen["max"], t._buffered)
            if isinstance(it, Chunk):
                seen["bytes"] += len(it.data)
                await asyncio.sleep(0.001)  # slow consumer
                if seen["bytes"] >= 20_000_000:
                    t.stop()

    asyncio.run(asyncio.wait_for(main(), 30))
    assert seen["bytes"] == 20_000_000
    assert seen["max"] <= (1 << 20) + sources.READ_CHUNK


def test_no_textual_or_rich_imports():
    code = (
        "import sys, denpex_tui.live, denpex_tui.live.tailer, denpex_tui.live.stall, denpex_tui.live.proctable\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('textual', 'rich')]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=os.path.dirname(os.path.dirname(__file__)))


def test_stream_survives_cancelled_anext(tmp_path):
    p = tmp_path / "a.log"
    p.write_bytes(b"")

    async def main():
        t = Tailer([str(p)], options=TailOptions(inotify=False, **FAST))
        it = t.run()
        got = []
        for i in range(30):
            try:
                item = await asyncio.wait_for(it.__anext__(), 0.02)
            except asyncio.TimeoutError:
                if i == 10:
                    with open(p, "ab") as fh:
                        fh.write(b"after timeouts\n")
                continue
            got.append(item)
        t.stop()
        async for item in it:
            got.append(item)
        return got

    got = asyncio.run(asyncio.wait_for(main(), 20))
    assert b"after timeouts\n" in b"".join(c.data for c in got if isinstance(c, Chunk))


def test_directory_listed_only_when_mtime_changes(tmp_path, monkeypatch):
    root = tmp_path / "logs"
    root.mkdir()
    (root / "a.log").write_bytes(b"a\n")
    old = time.time() - 100
    os.utime(root, (old, old))  # not "recent": no re-list for the coarse-mtime guard
    calls = []
    real = sources.os_scandir

    def scandir(path):
        calls.append(str(path))
        return real(path)

    monkeypatch.setattr(sources, "os_scandir", scandir)

    async def scenario(t, items):
        await until(lambda: b"a\n" in data_of(items, "a.log"))
        await asyncio.sleep(1.5)  # several directory polls, no change
        n = len(calls)
        (root / "b.log").write_bytes(b"b\n")
        await until(lambda: b"b\n" in data_of(items, "b.log"))
        box["before"], box["after"] = n, len(calls)

    box = {}
    run_tailer([str(root) + "/"], scenario, inotify=False)
    assert box["before"] == 1  # listed once at start, not at every poll
    assert box["after"] >= 2


def test_worker_threads_are_niced_when_polite(tmp_path, monkeypatch):
    p = tmp_path / "a.log"
    p.write_bytes(b"x\n")
    seen = []
    real = sources.os_fstat

    def fstat(fd):
        seen.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
        return real(fd)

    monkeypatch.setattr(sources, "os_fstat", fstat)

    async def scenario(t, items):
        await until(lambda: b"x\n" in data_of(items, "a.log"))

    before = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    run_tailer([str(p)], scenario, inotify=False, polite=True)
    assert seen and min(seen) >= 10
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == before  # the loop thread is not reniced


def test_stop_from_another_thread(tmp_path):
    p = tmp_path / "a.log"
    p.write_bytes(b"x\n")

    async def main():
        t = Tailer([str(p)], options=TailOptions(inotify=False, **FAST))
        threading.Timer(0.5, t.stop).start()
        n = 0
        async for _ in t.run():
            n += 1
        return n

    assert asyncio.run(asyncio.wait_for(main(), 10)) >= 1


def test_process_events_join_the_stream(tmp_path):
    from denpex_tui.live.proctable import ProcessEvent

    class FakeTable:
        async def run(self):
            yield ProcessEvent(42, 3, 3, "started", 1.0)
            await asyncio.sleep(0.1)
            yield ProcessEvent(42, 3, 3, "exited", 2.0)

    async def scenario(t, items):
        await until(lambda: any(getattr(i, "state", None) == "exited" for i in items))

    items = run_tailer([], scenario, proctable=FakeTable())
    assert [(i.pid, i.state) for i in items if isinstance(i, ProcessEvent)] == [(42, "started"), (42, "exited")]


@pytest.mark.parametrize("inotify", [False, True])
def test_rotation_with_delayed_recreate_is_followed_promptly(tmp_path, inotify):
    """Rename, and the new file appears only later: found within about a second even
    with slow safety-net intervals (nothing else announces the new file)."""
    p = tmp_path / "a.log"
    p.write_bytes(b"one\n")
    box = {}

    async def scenario(t, items):
        await until(lambda: b"one" in data_of(items, "a.log"))
        await asyncio.sleep(0.3)
        os.rename(p, str(p) + ".1")
        await asyncio.sleep(1.2)  # the name is checked (and missing) meanwhile
        p.write_bytes(b"two\n")
        t0 = time.monotonic()
        await until(lambda: b"two" in data_of(items, "a.log"), timeout=5)
        box["dt"] = time.monotonic() - t0

    run_tailer([str(p)], scenario, inotify=inotify, poll_max=2.0, poll_max_watched=30.0)
    assert box["dt"] < 1.5


def test_stop_cleans_up_even_if_the_consumer_is_cancelled():
    """The engine's pattern: stop(), then cancel the task iterating run(). The exec
    command must still be killed (no orphan ``kubectl logs -f``)."""

    async def main():
        t = Tailer([], ["exec sleep 60"], options=TailOptions(inotify=False))
        seen = []

        async def consume():
            async for item in t.run():
                seen.append(item)

        task = asyncio.ensure_future(consume())
        await until(lambda: any(isinstance(i, SourceEvent) and i.state == "added" for i in seen))
        pid = int(seen[0].detail.split()[1].rstrip(","))
        t.stop()
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        await asyncio.sleep(0.5)
        return pid

    pid = asyncio.run(main())
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        state = "gone"
    assert state in ("gone", "Z", "X")


def test_many_local_files_open_at_once_not_behind_the_metadata_cap(tmp_path):
    """The cap protects a network filesystem's metadata servers; opening files on a local one
    is not throttled: 800 rank files were first read at ~100 files/s (8 s) behind it."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    n = 800
    if soft < n + 200:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, n + 400), hard))
        n = min(n, resource.getrlimit(resource.RLIMIT_NOFILE)[0] - 200)
    root = tmp_path / "logs"
    root.mkdir()
    for r in range(n):
        (root / f"rank{r}.log").write_bytes(b"[rank%d]: step 0\n" % r)
    box = {}

    async def scenario(t, items):
        t0 = time.monotonic()
        box["all"] = await until(lambda: len({i.path for i in items if isinstance(i, Chunk)}) == n, timeout=15)
        box["s"] = time.monotonic() - t0
        box["charged"] = t.metadata_calls()

    run_tailer([str(root)], scenario, timeout=30)
    assert box["all"], "not every file was read"
    assert box["s"] < 4.0, box
