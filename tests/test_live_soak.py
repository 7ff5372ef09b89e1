"""Soak: writers append, rotate (rename+recreate, with late writes to the old file) and
copytruncate while the Tailer follows the directory; every line must be seen exactly
once and in order, except lines the writers themselves destroyed.

Design of the writers, so that the expected set is well defined:

* Each file has one *main* writer (``W0``) with an ``O_APPEND`` fd.  Lines are numbered
  per (file, writer) and written with one ``write()`` each, sometimes in two halves
  (partial lines; not in the racer's file, where the halves would interleave).  Rotated files are never deleted (``x.log.N`` are shifted up), so
  every line that was not destroyed is still in some file at the end.
* Before each rotation the main writer waits until the follower has seen at least one
  line of the current generation (as ``logrotate`` runs daily, not twice between two
  polls); between that point and the operation it keeps writing, so the follower may
  be behind when the rotation happens.
* One file also has a *racer* (``W1``) that keeps appending on its own fd, never
  reopening: after a rename rotation it writes to the old inode, and during a
  copytruncate its lines written between the copy and the truncate are destroyed.

Expected: for every (file, writer) the sequence of seen numbers is strictly
increasing (in order, no duplicates); every line that survives in some file at the end
was seen; no line was seen that was never written.  For files without a racer nothing
is destroyed, so seen == written.  No ``possibly-lost`` event.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import shutil
import threading
import time
from collections import defaultdict

import pytest

from denpex_tui.live.sources import Chunk, SourceEvent
from denpex_tui.live.tailer import TailOptions, Tailer

LINE = re.compile(rb"^F(\d+) W(\d+) (\d{8}) [a-z]*$")


class Files:
    def __init__(self, root):
        self.root = root
        self.written: dict[tuple[int, int], int] = defaultdict(int)  # (fid, wid) -> count
        self.seen: dict[tuple[int, int], list[int]] = defaultdict(list)
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.lock = threading.Lock()

    def path(self, fid):
        return os.path.join(self.root, f"rank{fid}.log")

    def line(self, fid, wid, rnd):
        seq = self.written[(fid, wid)]
        self.written[(fid, wid)] += 1
        return f"F{fid} W{wid} {seq:08d} {'x' * rnd.randint(0, 120)}\n".encode(), seq

    def shift(self, fid):
        base = self.path(fid)
        n = 1
        while os.path.exists(f"{base}.{n}"):
            n += 1
        for k in range(n - 1, 0, -1):
            os.rename(f"{base}.{k}", f"{base}.{k + 1}")

    def max_seen(self, fid, wid=0):
        s = self.seen.get((fid, wid))
        return s[-1] if s else -1


def main_writer(files: Files, fid: int, seed: int, duration: float, ops: list, lock: threading.Lock | None,
                partial: bool = True):
    rnd = random.Random(seed)
    path = files.path(fid)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    gen_first = None
    next_op = time.monotonic() + rnd.uniform(0.3, 1.0)
    t_end = time.monotonic() + duration
    try:
        while time.monotonic() < t_end and not files.stop.is_set():
            for _ in range(rnd.randint(1, 15)):
                data, seq = files.line(fid, 0, rnd)
                if gen_first is None:
                    gen_first = seq
                if partial and rnd.random() < 0.05:
                    cut = rnd.randint(1, len(data) - 1)
                    os.write(fd, data[:cut])
                    time.sleep(rnd.uniform(0, 0.03))
                    os.write(fd, data[cut:])
                else:
                    os.write(fd, data)
            time.sleep(rnd.uniform(0.001, 0.02))
            if time.monotonic() < next_op or gen_first is None:
                continue
            # pacing: the follower has read into the current generation
            t0 = time.monotonic()
            while files.max_seen(fid) < gen_first:
                if time.monotonic() - t0 > 15:
                    files.errors.append(f"F{fid}: follower never reached generation starting at {gen_first}")
                    return
                # keep writing a little while we wait
                data, seq = files.line(fid, 0, rnd)
                os.write(fd, data)
                time.sleep(0.01)
            for _ in range(rnd.randint(0, 30)):  # the follower may be behind at the op
                data, _ = files.line(fid, 0, rnd)
                os.write(fd, data)
            op = rnd.choice(["rename", "copytruncate"])
            ops.append((fid, op))
            with lock or _nolock:
                files.shift(fid)
                if op == "rename":
                    os.rename(path, path + ".1")
                    for _ in range(rnd.randint(0, 3)):  # late writes before reopening
                        data, _ = files.line(fid, 0, rnd)
                        os.write(fd, data)
                    os.close(fd)
                    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o644)
                else:
                    shutil.copyfile(path, path + ".1")
                    os.truncate(path, 0)
            gen_first = None
            next_op = time.monotonic() + rnd.uniform(0.3, 1.2)
    finally:
        os.close(fd)


class _NoLock:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


_nolock = _NoLock()


def racer(files: Files, fid: int, seed: int, duration: float):
    rnd = random.Random(seed)
    fd = os.open(files.path(fid), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    t_end = time.monotonic() + duration
    try:
        while time.monotonic() < t_end and not files.stop.is_set():
            data, _ = files.line(fid, 1, rnd)
            os.write(fd, data)
            time.sleep(rnd.uniform(0.0, 0.006))
    finally:
        os.close(fd)


def surviving(root) -> dict[tuple[int, int], set[int]]:
    out: dict[tuple[int, int], set[int]] = defaultdict(set)
    for name in os.listdir(root):
        with open(os.path.join(root, name), "rb") as fh:
            for ln in fh.read().split(b"\n"):
                m = LINE.match(ln)
                if m:
                    out[(int(m.group(1)), int(m.group(2)))].add(int(m.group(3)))
    return out


@pytest.mark.timeout(120)
@pytest.mark.parametrize("inotify,duration", [(False, 12.0), (True, 6.0)])
def test_soak_every_line_once_in_order(tmp_path, inotify, duration):
    root = str(tmp_path / "logs")
    os.makedirs(root)
    files = Files(root)
    n_files = 5
    racer_fid = 0
    ops: list = []
    events: list[SourceEvent] = []
    bad_chunks: list[str] = []
    seed = int(os.environ.get("DENPEX_SOAK_SEED", "1234")) + int(inotify)

    def consume_chunk(c: Chunk):
        if not c.data.endswith(b"\n"):
            bad_chunks.append(f"no newline at end: {c.path}@{c.offset}")
        if c.partial_end:
            bad_chunks.append(f"partial line flushed: {c.path}@{c.offset} {c.note} {c.data[:80]!r}")
        for ln in c.data.split(b"\n")[:-1]:
            m = LINE.match(ln)
            if not m:
                bad_chunks.append(f"garbled line in {c.path}@{c.offset}: {ln[:100]!r}")
                continue
            files.seen[(int(m.group(1)), int(m.group(2)))].append(int(m.group(3)))

    async def main():
        t = Tailer([root + "/"], options=TailOptions(inotify=inotify, poll_min=0.02, poll_max=0.25, dir_poll_min=0.1, dir_poll_max=0.5))
        # no partial lines in the racer's file: two writers would interleave the halves
        threads = [threading.Thread(target=main_writer, args=(files, fid, seed + fid, duration, ops, None, fid != racer_fid))
                   for fid in range(n_files)]
        threads.append(threading.Thread(target=racer, args=(files, racer_fid, seed + 100, duration)))
        late = threading.Timer(duration / 3, lambda: threading.Thread(
            target=main_writer, args=(files, n_files, seed + 99, duration / 2, ops, None)).start())

        async def drive():
            await asyncio.sleep(0.2)
            for th in threads:
                th.start()
            late.start()
            while any(th.is_alive() for th in threads) or threading.active_count() > 2 and time.monotonic() < t_start + duration * 1.5:
                await asyncio.sleep(0.1)
            await asyncio.sleep(0.3)
            # wait until everything that survived has been seen (bounded)
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                surv = await asyncio.get_running_loop().run_in_executor(None, surviving, root)
                if all(set(files.seen.get(k, ())) >= v for k, v in surv.items()):
                    break
                await asyncio.sleep(0.3)
            files.stop.set()
            t.stop()

        t_start = time.monotonic()
        task = asyncio.ensure_future(drive())
        async for item in t.run():
            if isinstance(item, Chunk):
                consume_chunk(item)
            elif isinstance(item, SourceEvent):
                events.append(item)
        await task
        for th in threads:
            th.join(5)

    try:
        asyncio.run(main())
    finally:
        files.stop.set()

    assert not files.errors, files.errors
    assert not bad_chunks, bad_chunks[:5]
    assert not [e for e in events if e.state in ("possibly-lost", "error")], [e for e in events if e.state in ("possibly-lost", "error")][:5]
    surv = surviving(root)
    total_written = sum(files.written.values())
    assert total_written > 2000
    assert len(ops) >= 5, ops
    for key, count in files.written.items():
        seen = files.seen.get(key, [])
        dups = len(seen) - len(set(seen))
        assert dups == 0, f"{key}: {dups} lines seen twice"
        out_of_order = [i for i in range(1, len(seen)) if seen[i] <= seen[i - 1]]
        assert not out_of_order, f"{key}: out of order at {[(seen[i-1], seen[i]) for i in out_of_order[:5]]}"
        assert all(0 <= s < count for s in seen), f"{key}: seen a line never written"
        missing = surv.get(key, set()) - set(seen)
        assert not missing, f"{key}: {len(missing)} surviving lines never seen, e.g. {sorted(missing)[:5]}"
        if key[0] != racer_fid:
            assert len(seen) == count, f"{key}: saw {len(seen)} of {count} (nothing was destroyed in this file)"
    states = {e.state for e in events}
    assert "rotated" in states and "truncated" in states
    print(f"soak: {total_written} lines, {len(ops)} rotations, events {sorted(states)}")
