#!/usr/bin/env python
"""What `denpex probe` costs, next to a training job and on a busy head node.

Reports (median of --runs runs, wall time of this process):

* read_process() per sampled process, with F open fds of which D are deleted-but-open
  (real child processes that look like ranks: RANK set, files open under a watched dir);
* PathMeter.read() per path (statvfs + mount lookup), local path;
* Prober.snapshot() for K processes and P paths, and the derived cost per process and per path;
* find_training_processes() with ~N background processes (plain `sleep`, plus M whose argv[0]
  says python so their environment is read too), all spawned here, bounded and killed at exit;
* scan_logs() throughput on a generated log.

Benchmarks report; they do not assert.

    /work/venv/bin/python bench/probe_cost.py [--procs 3000] [--python-procs 300] [--runs 7]
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from denpex_tui.probes.facade import read_process  # noqa: E402
from denpex_tui.probes.logpaths import scan_logs  # noqa: E402
from denpex_tui.probes.processes import find_training_processes  # noqa: E402
from denpex_tui.probes.sampler import PathMeter, Prober  # noqa: E402

MAX_BG = 5000

_spawned: list[subprocess.Popen] = []


def _cleanup() -> None:
    groups = {p.pid for p in _spawned[:1]}
    for pg in groups:
        try:
            os.killpg(pg, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    for p in _spawned:
        try:
            p.kill()
        except ProcessLookupError:
            pass
    for p in _spawned:
        try:
            p.wait(timeout=10)
        except Exception:
            pass
    _spawned.clear()


atexit.register(_cleanup)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))


_MINS: dict[str, float] = {}


def median_time(fn, runs: int, key: str | None = None) -> float:
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    if key:
        _MINS[key] = min(ts)
    return statistics.median(ts)


RANK_CHILD = r"""
import os, sys
d, n, ndel = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
fds = []
for i in range(n):
    p = os.path.join(d, "shard%05d.bin" % i)
    fd = os.open(p, os.O_CREAT | os.O_RDWR, 0o600)
    os.write(fd, b"x" * 4096)
    fds.append(fd)
    if i < ndel:
        os.unlink(p)
print("ready", flush=True)
sys.stdin.read()
"""


def spawn_ranks(k: int, nfds: int, ndel: int, d: str) -> list[subprocess.Popen]:
    out = []
    for r in range(k):
        sub = os.path.join(d, f"rank{r}")
        os.makedirs(sub, exist_ok=True)
        p = subprocess.Popen([sys.executable, "-c", RANK_CHILD, sub, str(nfds), str(ndel)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                             env=dict(os.environ, RANK=str(r), LOCAL_RANK=str(r),
                                      WORLD_SIZE=str(k)))
        _spawned.append(p)
        out.append(p)
    for p in out:
        p.stdout.readline()
    return out


def spawn_background(n: int, n_python: int) -> list[subprocess.Popen]:
    n = min(n, MAX_BG)
    procs = []
    pgid = 0
    for i in range(n):
        argv0 = "python3" if i < n_python else "sleep"
        p = subprocess.Popen([argv0, "600"], executable="/bin/sleep", process_group=pgid,
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        if pgid == 0:
            pgid = p.pid
        procs.append(p)
        _spawned.append(p)
    return procs


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--procs", type=int, default=3000, help="background processes (max 5000)")
    ap.add_argument("--python-procs", type=int, default=300,
                    help="of those, how many look like python (environ is read)")
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--fds", type=int, default=256, help="open files per rank")
    ap.add_argument("--deleted", type=int, default=32, help="of those, deleted while open")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    res: dict = {"runs": a.runs, "cpus": os.cpu_count()}

    with tempfile.TemporaryDirectory(prefix="denpex-bench-") as d:
        ranks = spawn_ranks(a.ranks, a.fds, a.deleted, d)
        pids = [p.pid for p in ranks]
        cts = {pid: read_process(pid).create_time for pid in pids}
        one = median_time(lambda: [read_process(p, expect_create_time=cts[p], watched=[d])
                                   for p in pids], a.runs) / len(pids)
        res["read_process_per_process_ms"] = one * 1e3
        res["fds_per_process"] = read_process(pids[0]).fds

        meter = PathMeter()
        meter.read(d)
        res["path_read_ms"] = median_time(lambda: meter.read(d), a.runs * 10) * 1e3

        # snapshot with 1 and with K processes, 1 and 5 paths -> marginal costs
        paths5 = [os.path.join(d, f"rank{r}") for r in range(min(5, a.ranks))]
        for name, pp, pa in [("snap_1proc_1path", pids[:1], [d]),
                             ("snap_kproc_1path", pids, [d]),
                             ("snap_1proc_5path", pids[:1], paths5)]:
            pr = Prober(pids=pp, paths=pa, watch_shm=False, watch_open_files=False)
            pr.snapshot()
            res[name + "_ms"] = median_time(pr.snapshot, a.runs) * 1e3
        k = len(pids)
        res["snapshot_cost_per_process_ms"] = (
            (res["snap_kproc_1path_ms"] - res["snap_1proc_1path_ms"]) / max(1, k - 1))
        res["snapshot_cost_per_path_ms"] = (
            (res["snap_1proc_5path_ms"] - res["snap_1proc_1path_ms"]) / max(1, len(paths5) - 1))
        full = Prober(pids=pids, paths=[d])
        full.snapshot()
        res["snapshot_full_ms"] = median_time(full.snapshot, a.runs) * 1e3
        res["snapshot_full_paths"] = len(full.snapshot().paths)

        # discovery
        base_n = len([x for x in os.listdir("/proc") if x.isdigit()])
        res["discovery_baseline_procs"] = base_n
        res["discovery_baseline_ms"] = median_time(find_training_processes, a.runs) * 1e3
        t0 = time.perf_counter()
        spawn_background(a.procs, a.python_procs)
        res["spawn_background_s"] = time.perf_counter() - t0
        n_now = len([x for x in os.listdir("/proc") if x.isdigit()])
        res["discovery_procs"] = n_now
        found = find_training_processes()
        res["discovery_found"] = len(found)
        res["discovery_ms"] = median_time(find_training_processes, a.runs, "disc") * 1e3
        res["discovery_min_ms"] = _MINS["disc"] * 1e3
        res["discovery_per_1000_procs_ms"] = res["discovery_ms"] / n_now * 1000
        _cleanup()

        # log scan throughput: 64 MiB of step lines with a save line every 1000 lines
        log = os.path.join(d, "console.log")
        step = (b"[default0]:2026-11-29 17:40:15,097 INFO [rank0/4] train: step 10/200 | "
                b"epoch 0 | loss 2.8038 | acc 0.039 | grad_norm 2.2015 | lr 1.650e-04\n")
        save = b"[default0]:[2026-11-29 17:51:13,206] [INFO] [logging.py:123:log_dist] " \
               b"[Rank 0] Saving model checkpoint: checkpoints/global_step60/mp_rank_00.pt\n"
        with open(log, "wb") as f:
            written = 0
            block = step * 999 + save
            while written < 64 << 20:
                f.write(block)
                written += len(block)
        t0 = time.perf_counter()
        s = scan_logs([log])
        dt = time.perf_counter() - t0
        res["logscan_mib_per_s"] = (written / (1 << 20)) / dt
        res["logscan_saves"] = len(s.saves)

    if a.json:
        print(json.dumps(res, indent=1))
        return 0
    print(f"denpex probe cost (median of {a.runs} runs, {res['cpus']} CPUs)")
    print(f"  read_process, per process ({res['fds_per_process']} fds, {a.deleted} deleted)"
          f": {res['read_process_per_process_ms']:.3f} ms")
    print(f"  path reading (statvfs + mount lookup), per path: {res['path_read_ms']:.3f} ms")
    print(f"  snapshot: 1 proc + 1 path {res['snap_1proc_1path_ms']:.3f} ms; "
          f"{len(pids)} procs {res['snap_kproc_1path_ms']:.3f} ms; "
          f"5 paths {res['snap_1proc_5path_ms']:.3f} ms")
    print(f"  -> marginal cost per sampled process {res['snapshot_cost_per_process_ms']:.3f} ms,"
          f" per path {res['snapshot_cost_per_path_ms']:.3f} ms")
    print(f"  full snapshot ({len(pids)} ranks, {res['snapshot_full_paths']} paths incl. "
          f"/dev/shm and the ranks' filesystems): {res['snapshot_full_ms']:.3f} ms")
    print(f"  find_training_processes: {res['discovery_baseline_procs']} procs "
          f"{res['discovery_baseline_ms']:.2f} ms; {res['discovery_procs']} procs "
          f"({a.python_procs} named python) {res['discovery_ms']:.2f} ms "
          f"(min {res['discovery_min_ms']:.2f} ms) "
          f"= {res['discovery_per_1000_procs_ms']:.2f} ms per 1000 processes "
          f"(spawned in {res['spawn_background_s']:.1f} s)")
    print(f"  scan_logs: {res['logscan_mib_per_s']:.0f} MiB/s "
          f"({res['logscan_saves']} save lines found)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
