"""The live engine against hostile files: FIFOs in place of logs, binary files, links
out of the tree, sparse files. Tailer end to end, real time, bounded waits."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from test_live_tailer import data_of, events, run_tailer, until

LINE = b"[rank0]:[W1218 20:27:21.426 ProcessGroupNCCL.cpp:1168] Warning: WorkNCCL(SeqNum=1, OpType=BROADCAST)\n"


@pytest.mark.parametrize("inotify", [True, False])
def test_file_replaced_by_a_fifo_then_by_a_file_is_followed_promptly(tmp_path, inotify):
    p = tmp_path / "console.log"
    p.write_bytes(LINE)
    box = {}

    async def scenario(t, items):
        await until(lambda: LINE in data_of(items, "console.log"))
        fifo = tmp_path / "fifo.tmp"
        os.mkfifo(fifo)
        os.rename(fifo, p)
        await until(lambda: any("FIFO" in e.detail for e in events(items, "error")), timeout=15)
        new = tmp_path / "new.tmp"
        new.write_bytes(b"[rank0]: after the FIFO\n")
        os.rename(new, p)
        t0 = time.monotonic()
        await until(lambda: b"after the FIFO" in data_of(items, "console.log"), timeout=20)
        box["dt"] = time.monotonic() - t0

    run_tailer([str(p)], scenario, inotify=inotify, poll_max=2.0, poll_max_watched=10.0, timeout=60)
    assert box["dt"] < 5.0  # under load too (before: 10-66 s, or never)


def test_repeated_truncations_to_a_nonzero_size_do_not_double_the_view_lines(tmp_path):
    """Issue: truncating to a non-zero size made the tailer deliver the lines before the
    cut again (up to 12 times); findings hid it by de-duplication, the view did not."""
    from denpex_tui.core.catalog import load_catalog
    from denpex_tui.live.engine import Engine
    from denpex_tui.live.events import LinesEvent
    from denpex_tui.live.tailer import TailOptions

    def line(i: int) -> bytes:
        return (f"[rank0]:[E1218 20:27:{i % 60:02d}.426415540 ProcessGroupNCCL.cpp:629] [Rank 0] Watchdog caught "
                f"collective operation timeout: WorkNCCL(SeqNum={i}, OpType=BROADCAST, NumelIn=131072000, "
                f"NumelOut=131072000, Timeout(ms)=600000) ran for 600081 milliseconds before timing out.\n").encode()

    p = tmp_path / "rank0.log"
    p.write_bytes(b"".join(line(i) for i in range(40)))
    seen: list[str] = []

    async def main():
        eng = Engine([str(p)], load_catalog(include_user=False), processes=False, keep_lines=10000,
                     tailer_options=TailOptions(poll_min=0.02, poll_max=0.2, poll_max_watched=0.5))

        async def drive():
            try:
                await until(lambda: eng.history_done, timeout=20)  # the 40 lines: history, read once
                nxt = 40
                for _ in range(12):
                    size = p.stat().st_size
                    keep = p.read_bytes()[: size * 3 // 4]
                    os.truncate(p, keep.rfind(b"\n") + 1)  # cut at a line boundary
                    with open(p, "ab") as fh:
                        fh.write(line(nxt))
                    nxt += 1
                    await until(lambda: any(f"SeqNum={nxt - 1}," in s for s in seen), timeout=20)
            finally:
                eng.stop()

        task = asyncio.ensure_future(drive())
        async for ev in eng.run():
            if isinstance(ev, LinesEvent):
                seen.extend(ll.text for ll in ev.lines)
        await task

    asyncio.run(asyncio.wait_for(main(), 90))
    assert len(seen) == len(set(seen)) == 12  # each new line once, none of the lines before a cut again


def test_the_engine_queue_is_bounded_in_bytes():
    """The tailer -> engine hand-off held 1024 chunks whatever their size: with the 1 MiB
    pieces of one huge line, a gigabyte."""
    from denpex_tui.live._queue import ByteQueue
    from denpex_tui.live.sources import Chunk

    async def main():
        q = ByteQueue(max_bytes=4 << 20)
        piece = Chunk("s", "p", b"x" * (1 << 20) + b"\n", 0)
        n = 0

        async def producer():
            nonlocal n
            for _ in range(64):
                await q.put(piece)
                n += 1

        task = asyncio.ensure_future(producer())
        await asyncio.sleep(0.05)
        assert n == 4 and q.bytes <= 5 << 20  # waits for the consumer
        got = 0
        while got < 64:
            await q.get()
            got += 1
            await asyncio.sleep(0)
            assert q.bytes <= 5 << 20
        await task

    asyncio.run(main())


def _vm(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith(key + ":"))


def test_follow_one_huge_line_stays_bounded_in_memory(tmp_path):
    """`scan --follow` on a 384 MiB line without a newline: peak RSS stays far below the
    line (the bench measures 138 MB for 2 GiB)."""
    import subprocess
    import sys

    p = tmp_path / "rank0.log"
    size = 384 << 20
    with open(p, "wb") as fh:
        fh.write(LINE)
        block = b"x" * (32 << 20)
        for _ in range(size // len(block)):
            fh.write(block)
        fh.write(b"\n")
    proc = subprocess.Popen([sys.executable, "-m", "denpex_tui", "scan", "--follow", str(p)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        def rchar() -> int:
            with open(f"/proc/{proc.pid}/io") as fh:
                return next(int(line.split()[1]) for line in fh if line.startswith("rchar:"))
        while rchar() < size and time.monotonic() < deadline:
            time.sleep(0.1)
        assert rchar() >= size, "the file was not read in time"
        time.sleep(1.0)  # the last pieces parsed
        hwm = _vm(proc.pid, "VmHWM")
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    assert hwm < 200e6, f"peak RSS {hwm / 1e6:.0f} MB for a {size >> 20} MiB line"


@pytest.fixture
def stalling_mount(tmp_path):
    from fusemount import fuse_mount

    with fuse_mount("fuse_stall.py", tmp_path, STALL_DAEMONS) as mnt:
        yield mnt


STALL_DAEMONS: list = []  # the FUSE daemons of stalling_mount (a test may end one early)


def test_a_time_out_keeps_the_findings_already_made(stalling_mount):
    """The mount stops answering after the file's first 8 MiB, which hold a CUDA OOM: the
    source is reported as hung and the OOM is still the diagnosis (it was discarded)."""
    import json
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "denpex_tui", "scan", "--json", "--io-timeout", "2",
                        str(stalling_mount / "rank3.log")], capture_output=True, text=True, timeout=60)
    assert "rank3.log: a read did not answer in 2 s (hung filesystem?)" in r.stderr
    doc = json.loads(r.stdout)
    assert [f["signature"] for f in doc["findings"]] == ["cuda.oom"]
    assert doc["incidents"] and doc["incidents"][0]["initiating"]["rank"] == 3
    assert r.returncode == 1, r.stderr


OOM3 = b"[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 19.68 GiB. GPU 0 has a total capacity of 23.68 GiB of which 11.88 GiB is free.\n"


def _sparse(p) -> None:
    """A real line, then a 1 TiB hole (``truncate -s 1T``)."""
    p.write_bytes(OOM3)
    os.truncate(p, 1 << 40)


def test_scan_skips_a_sparse_region_at_seek_speed_and_keeps_the_finding(tmp_path):
    import json
    import subprocess
    import sys

    p = tmp_path / "rank3.log"
    _sparse(p)
    with open(p, "ab") as fh:
        fh.write(b"[rank3]: after the hole\n")
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "denpex_tui", "scan", "--json", "--io-timeout", "5", str(p)],
                       capture_output=True, text=True, timeout=120)
    assert time.monotonic() - t0 < 10
    assert "hung" not in r.stderr and r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    assert [f["signature"] for f in doc["findings"]] == ["cuda.oom"]


def test_follow_skips_a_sparse_region_at_seek_speed(tmp_path):
    p = tmp_path / "rank3.log"
    _sparse(p)
    box = {}

    async def scenario(t, items):
        await until(lambda: OOM3 in data_of(items, "rank3.log"))
        await asyncio.sleep(0.5)
        with open(p, "ab") as fh:  # the writer goes on after the hole
            fh.write(b"[rank3]: after the hole\n")
        t0 = time.monotonic()
        await until(lambda: b"after the hole" in data_of(items, "rank3.log"), timeout=20)
        box["dt"] = time.monotonic() - t0
        box["chunks"] = [c for c in items if hasattr(c, "data") and b"after the hole" in c.data]

    run_tailer([str(p)], scenario, timeout=40)
    assert box["dt"] < 5.0  # under load too (before: 10-66 s, or never)
    assert b"\x00" not in box["chunks"][0].data and "sparse" in box["chunks"][0].note


def _tree_with_links(tmp_path):
    import sys

    tree, outside = tmp_path / "logs", tmp_path / "elsewhere"
    tree.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_bytes(b"[rank0]: a line from outside the log tree\n")
    (tree / "rank0.log").symlink_to(outside / "secret.txt")
    (tree / "rank1.log").symlink_to("/proc/kmsg")
    os.mkfifo(outside / "fifo")
    (tree / "rank2.log").symlink_to(outside / "fifo")
    (tree / "rank3.log").write_bytes(OOM3)
    with open(os.path.realpath(sys.executable), "rb") as fh:  # a real binary, named like a log
        (tree / "rank5.log").write_bytes(fh.read(64 << 10))
    return tree


def test_follow_reports_links_out_of_the_tree_refuses_special_files_and_skips_binaries(tmp_path):
    tree = _tree_with_links(tmp_path)

    async def scenario(t, items):
        await until(lambda: OOM3 in data_of(items, "rank3.log"))
        await until(lambda: len(events(items, "error")) >= 3, timeout=10)
        await asyncio.sleep(0.5)

    items = run_tailer([str(tree) + "/"], scenario)
    by_name = {}
    for e in events(items):
        by_name.setdefault(os.path.basename(e.path), []).append((e.state, e.detail))
    assert any("followed a link outside the tree" in d for s, d in by_name["rank0.log"])
    assert by_name["rank1.log"] == [("error", "a link to a file of /proc: /proc/kmsg: not followed")]
    assert by_name["rank2.log"] == [("error", "a link to a FIFO, device or socket: not followed")]
    assert ("error", "binary file, not a log: not followed") in by_name["rank5.log"]
    assert data_of(items, "rank5.log") == b""
    assert data_of(items, "rank1.log") == b""


def test_scan_reports_links_out_of_the_tree_and_refuses_special_files(tmp_path):
    import subprocess
    import sys

    tree = _tree_with_links(tmp_path)
    r = subprocess.run([sys.executable, "-m", "denpex_tui", "scan", str(tree)], capture_output=True, text=True, timeout=60)
    assert "rank0.log: followed a link outside the tree" in r.stderr
    assert "rank1.log: a link to a file of /proc: /proc/kmsg: skipped" in r.stderr
    assert "rank2.log: a link to a FIFO, device or socket: skipped" in r.stderr
    r = subprocess.run([sys.executable, "-m", "denpex_tui", "scan", "/proc/kmsg"], capture_output=True, text=True,
                       timeout=60)
    assert "not a regular file (a file of /proc: /proc/kmsg)" in r.stderr and r.returncode == 2


def test_the_engine_ends_when_stopped_while_its_queue_is_not_empty(tmp_path):
    """The end-of-stream marker could be taken while a batch was drained from the queue and
    then forgotten: run() never ended (seen under a storm of 2 000 files)."""
    from denpex_tui.core.catalog import load_catalog
    from denpex_tui.live.engine import Engine

    for r in range(16):
        (tmp_path / f"rank{r}.log").write_bytes(LINE * 20000)  # 2 MB of history each

    async def main():
        for _ in range(5):
            eng = Engine([str(tmp_path)], load_catalog(include_user=False), processes=False)
            n = 0
            async for _ev in eng.run():
                n += 1
                if n == 1:
                    eng.stop()  # the tailer ends with chunks still queued for the engine

    asyncio.run(asyncio.wait_for(main(), 60))
