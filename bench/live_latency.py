"""Benchmark of the live source layer (reports, not asserts).

    /work/venv/bin/python bench/live_latency.py            # everything (~3 min)
    /work/venv/bin/python bench/live_latency.py --quick    # shorter runs
    /work/venv/bin/python bench/live_latency.py --only latency,idle,throughput,proctable,memory

Measures
* latency: append of a line -> its Chunk delivered by ``Tailer.run()`` (p50/p99/max),
  with 64 and 1024 files, each file getting about one line per second at random times
  (a rank's step log).  Two modes: ``inotify`` (local filesystem, the default) and
  ``poll`` (inotify off: what NFS/Lustre/GPFS get, where writes come from other nodes),
  the latter at the default metadata cap (500/s) and at 2000/s.
* idle CPU: 1024 quiet files followed for ``--idle-s`` seconds, process table
  included (the real ``find_training_processes`` every 5 s), both modes.
* throughput: lines/s with all files written at once (live), and the start-up history
  scan (MB/s).
* proctable: cost of a full discovery, of the cheap sample (no new pid) and of the exit
  check with a few thousand sleeping processes (spawned here, bounded, cleaned up).
* memory: RSS before and after a long burst run (bounded buffers -> flat).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from denpex_tui.live.proctable import ProcessTable  # noqa: E402
from denpex_tui.live.sources import Chunk, SourceEvent  # noqa: E402
from denpex_tui.live.tailer import TailOptions, Tailer  # noqa: E402


def cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for ln in fh:
            if ln.startswith("VmRSS:"):
                return int(ln.split()[1]) / 1024
    return 0.0


def make_files(root: str, n: int, content: bytes = b"") -> list[str]:
    paths = []
    for i in range(n):
        d = os.path.join(root, f"attempt_0/{i}")
        os.makedirs(d, exist_ok=True)
        p = os.path.join(d, "stdout.log")
        with open(p, "wb") as fh:
            fh.write(content)
        paths.append(p)
    return paths


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


async def _until_added(t: Tailer, it, n: int, timeout: float = 120.0) -> None:
    added = 0
    t0 = time.monotonic()
    while added < n:
        item = await asyncio.wait_for(it.__anext__(), timeout)
        if isinstance(item, SourceEvent) and item.state == "added":
            added += 1
        if time.monotonic() - t0 > timeout:
            raise TimeoutError("files not added in time")


def sim_mounts(root: str, fstype: str):
    """A mount table in which ``root`` is a network filesystem (``lustre``): polling
    and the metadata cap then behave as they would on Lustre (inotify is turned off
    too, since it would not see writes from other nodes there)."""
    from denpex_tui.probes.mounts import MountTable

    return MountTable(text=f"22 1 8:1 / / rw - ext4 /dev/root rw\n"
                           f"40 22 0:50 / {root} rw - {fstype} mds@tcp:/fs rw\n")


def bench_latency(n_files: int, seconds: float, inotify: bool, cap: float | None) -> dict:
    root = tempfile.mkdtemp(prefix="dpx-lat-")
    try:
        paths = make_files(root, n_files)
        lat: list[float] = []
        stop = threading.Event()
        written = [0]
        box: dict = {}

        def writer():
            # each file gets ~1 line/s at random times: a Poisson process per file
            fds = [os.open(p, os.O_WRONLY | os.O_APPEND) for p in paths]
            rnd = random.Random(1)
            rate = float(n_files)  # lines per second in total
            nxt = time.monotonic()
            try:
                while not stop.is_set():
                    nxt += rnd.expovariate(rate)
                    d = nxt - time.monotonic()
                    if d > 0:
                        time.sleep(d)
                    fd = fds[rnd.randrange(n_files)]
                    os.write(fd, b"step %d t=%d loss 1.234\n" % (written[0], time.monotonic_ns()))
                    written[0] += 1
            finally:
                for fd in fds:
                    os.close(fd)

        async def main():
            t = Tailer([root + "/"], options=TailOptions(inotify=inotify, max_meta_per_s=cap),
                       mounts=None if inotify else sim_mounts(root, "lustre"))
            it = t.run().__aiter__()
            await _until_added(t, it, n_files)
            await asyncio.sleep(3.0)  # let every file back off to its quiet interval
            th = threading.Thread(target=writer, daemon=True)
            th.start()
            t_end = time.monotonic() + seconds
            meta0, c0, cpu0 = t.metadata_calls(), time.monotonic(), cpu_s()
            while time.monotonic() < t_end:
                try:
                    item = await asyncio.wait_for(it.__anext__(), 1.0)
                except asyncio.TimeoutError:
                    continue
                if isinstance(item, Chunk):
                    now = time.monotonic_ns()
                    for ln in item.data.split(b"\n")[:-1]:
                        k = ln.find(b"t=")
                        if k >= 0:
                            lat.append((now - int(ln[k + 2 : ln.index(b" ", k)])) / 1e6)
            meta = (t.metadata_calls() - meta0) / (time.monotonic() - c0)
            box["cpu"] = (cpu_s() - cpu0) / (time.monotonic() - c0)
            box["polls"] = t.stats["polls"]
            stop.set()
            th.join()
            t.stop()
            try:
                await it.__anext__()
            except StopAsyncIteration:
                pass
            return meta

        meta = asyncio.run(main())
        return {
            "files": n_files, "mode": "local+inotify" if inotify else "lustre-sim poll", "cap_per_s": cap,
            "lines": len(lat), "p50_ms": round(pct(lat, 0.5), 1), "p99_ms": round(pct(lat, 0.99), 1),
            "max_ms": round(max(lat) if lat else float("nan"), 1), "metadata_calls_per_s": round(meta, 1),
            "cpu_pct": round(100 * box["cpu"], 1),
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)


def bench_idle(n_files: int, seconds: float, inotify: bool, proctable: bool) -> dict:
    root = tempfile.mkdtemp(prefix="dpx-idle-")
    try:
        make_files(root, n_files, b"hello\n")
        pt = ProcessTable() if proctable else None

        async def main():
            t = Tailer([root + "/"], options=TailOptions(inotify=inotify), proctable=pt,
                       mounts=None if inotify else sim_mounts(root, "lustre"))
            it = t.run().__aiter__()
            await _until_added(t, it, n_files)
            # settle: every file reaches its quiet interval
            t_settle = time.monotonic() + 5.0
            while time.monotonic() < t_settle:
                try:
                    await asyncio.wait_for(it.__anext__(), 0.5)
                except asyncio.TimeoutError:
                    pass
            c0, w0, m0 = cpu_s(), time.monotonic(), t.metadata_calls()
            p0 = pt.samples if pt else 0
            t_end = w0 + seconds
            while time.monotonic() < t_end:
                try:
                    await asyncio.wait_for(it.__anext__(), 0.5)
                except asyncio.TimeoutError:
                    pass
            c1, w1, m1 = cpu_s(), time.monotonic(), t.metadata_calls()
            t.stop()
            try:
                await it.__anext__()
            except StopAsyncIteration:
                pass
            return (c1 - c0) / (w1 - w0), (m1 - m0) / (w1 - w0), (pt.samples - p0) if pt else 0

        cpu, meta, samples = asyncio.run(main())
        return {"files": n_files, "mode": "local+inotify" if inotify else "lustre-sim poll", "proctable": proctable,
                "cpu_pct_of_one_core": round(100 * cpu, 2), "metadata_calls_per_s": round(meta, 1),
                "proctable_samples": samples, "seconds": seconds}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def bench_throughput(n_files: int, mb_per_file: float, live: bool) -> dict:
    root = tempfile.mkdtemp(prefix="dpx-thr-")
    line = b"[rank 12] step 123456 | loss 2.345678 | lr 3.0e-4 | tokens/s 123456.7 | mem 45.6 GiB\n"
    block = line * (65536 // len(line))
    per_file = int(mb_per_file * 1e6) // len(block) * len(block)
    total_lines = n_files * per_file // len(line)
    try:
        paths = make_files(root, n_files, b"" if live else block * (per_file // len(block)))

        def writer(ps):
            for p in ps:
                pass
            fds = [os.open(p, os.O_WRONLY | os.O_APPEND) for p in ps]
            for _ in range(per_file // len(block)):
                for fd in fds:
                    os.write(fd, block)
            for fd in fds:
                os.close(fd)

        async def main():
            t = Tailer([root + "/"], options=TailOptions(max_meta_per_s=None if not live else 500.0))
            it = t.run().__aiter__()
            lines = 0
            t0 = None
            if live:
                await _until_added(t, it, n_files)
                ths = [threading.Thread(target=writer, args=(paths[i::4],)) for i in range(4)]
                t0 = time.monotonic()
                for th in ths:
                    th.start()
            else:
                t0 = time.monotonic()
            c0 = cpu_s()
            while lines < total_lines:
                item = await asyncio.wait_for(it.__anext__(), 60)
                if isinstance(item, Chunk):
                    lines += item.data.count(b"\n")
            dt = time.monotonic() - t0
            cpu = cpu_s() - c0
            t.stop()
            try:
                await it.__anext__()
            except StopAsyncIteration:
                pass
            if live:
                for th in ths:
                    th.join()
            return dt, cpu

        dt, cpu = asyncio.run(main())
        mb = total_lines * len(line) / 1e6
        return {"files": n_files, "mode": "live appends" if live else "history scan", "lines": total_lines,
                "MB": round(mb, 1), "seconds": round(dt, 2), "lines_per_s": int(total_lines / dt),
                "MB_per_s": round(mb / dt, 1), "cpu_s": round(cpu, 2)}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def bench_proctable(n_procs: int) -> dict:
    procs: list[subprocess.Popen] = []
    try:
        for _ in range(n_procs):
            procs.append(subprocess.Popen(["sleep", "120"], stdin=subprocess.DEVNULL,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        # a few fake "workers" so that the table tracks something
        env = dict(os.environ, RANK="0", LOCAL_RANK="0", WORLD_SIZE="4")
        workers = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", f"--local_rank={i}"],
                                    env=dict(env, RANK=str(i), LOCAL_RANK=str(i))) for i in range(4)]
        procs.extend(workers)
        time.sleep(0.5)
        n_total = len([n for n in os.listdir("/proc") if n.isdigit()])
        pt = ProcessTable()

        def timeit(fn, reps):
            ts = []
            for _ in range(reps):
                c0 = time.perf_counter()
                fn()
                ts.append(time.perf_counter() - c0)
            return statistics.median(ts) * 1000

        full = timeit(lambda: pt.sample(force=True), 5)
        cheap = timeit(lambda: pt.sample(), 20)
        exits = timeit(pt.check_exits, 50)
        tracked = len(pt.known)
        # steady-state cost: a cheap sample every 5 s + an exit check every 1 s (+ a full
        # discovery every 60 s, or whenever new pids appeared)
        steady_quiet = (cheap / 5 + exits / 1 + full / 60) / 1000
        steady_busy = (full / 5 + exits / 1) / 1000
        return {"processes_on_node": n_total, "tracked_workers": tracked,
                "full_discovery_ms": round(full, 2), "cheap_sample_ms": round(cheap, 2),
                "exit_check_ms": round(exits, 3),
                "cpu_pct_no_new_pids": round(100 * steady_quiet, 3),
                "cpu_pct_new_pids_every_sample": round(100 * steady_busy, 3)}
    finally:
        for p in procs:
            try:
                p.send_signal(signal.SIGKILL)
            except ProcessLookupError:
                pass
        for p in procs:
            try:
                p.wait(5)
            except Exception:
                pass


def bench_memory(seconds: float) -> dict:
    root = tempfile.mkdtemp(prefix="dpx-mem-")
    try:
        paths = make_files(root, 64)
        line = b"x" * 100 + b"\n"
        stop = threading.Event()

        def writer():
            fds = [os.open(p, os.O_WRONLY | os.O_APPEND) for p in paths]
            rnd = random.Random(3)
            while not stop.is_set():
                for fd in fds:
                    os.write(fd, line * rnd.randint(1, 200))
                time.sleep(0.005)
            for fd in fds:
                os.close(fd)

        samples = []

        async def main():
            t = Tailer([root + "/"])
            it = t.run().__aiter__()
            await _until_added(t, it, 64)
            th = threading.Thread(target=writer, daemon=True)
            th.start()
            t0 = time.monotonic()
            nxt = t0
            lines = 0
            while time.monotonic() - t0 < seconds:
                item = await asyncio.wait_for(it.__anext__(), 10)
                if isinstance(item, Chunk):
                    lines += item.data.count(b"\n")
                if time.monotonic() >= nxt:
                    samples.append(rss_mb())
                    nxt += seconds / 10
            stop.set()
            th.join()
            t.stop()
            try:
                await it.__anext__()
            except StopAsyncIteration:
                pass
            return lines

        lines = asyncio.run(main())
        return {"seconds": seconds, "lines": lines, "rss_mb_samples": [round(x, 1) for x in samples]}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default="latency,idle,throughput,proctable,memory")
    ap.add_argument("--idle-s", type=float, default=None)
    ap.add_argument("--procs", type=int, default=3000)
    ap.add_argument("--json", default=None, help="write the results here too")
    a = ap.parse_args()
    only = set(a.only.split(","))
    lat_s = 8.0 if a.quick else 20.0
    idle_s = a.idle_s or (10.0 if a.quick else 30.0)
    res: dict = {"cpu_count": os.cpu_count(), "python": sys.version.split()[0]}

    def show(key, d):
        res.setdefault(key, []).append(d)
        print(f"{key:10s} " + "  ".join(f"{k}={v}" for k, v in d.items()), flush=True)

    if "latency" in only:
        for n in (64, 1024):
            show("latency", bench_latency(n, lat_s, inotify=True, cap=500.0))
            show("latency", bench_latency(n, lat_s, inotify=False, cap=500.0))
            show("latency", bench_latency(n, lat_s, inotify=False, cap=2000.0))
    if "idle" in only:
        show("idle", bench_idle(1024, idle_s, inotify=False, proctable=True))
        show("idle", bench_idle(1024, idle_s, inotify=False, proctable=False))
        show("idle", bench_idle(1024, idle_s, inotify=True, proctable=True))
    if "throughput" in only:
        show("throughput", bench_throughput(64, 4 if a.quick else 8, live=True))
        show("throughput", bench_throughput(1024, 0.25 if a.quick else 0.5, live=True))
        show("throughput", bench_throughput(64, 8 if a.quick else 16, live=False))
    if "proctable" in only:
        show("proctable", bench_proctable(min(a.procs, 1000) if a.quick else a.procs))
    if "memory" in only:
        show("memory", bench_memory(10.0 if a.quick else 30.0))
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(res, fh, indent=1)


if __name__ == "__main__":
    main()
