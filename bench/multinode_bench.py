"""The multi-node merge at 128 nodes: head-node CPU and view latency.

128 simulated nodes, each a stream of real schema-1 snapshot lines (8 ranks, /dev/shm, a
checkpoint dir, a node-local nvme, the fields `denpex probe --stream --json` prints, built by
the probe's own to_json), written by one generator process into 128 named pipes; each node's
transport is a real child process relaying its pipe to the head (``cat FIFO``, standing in for
the ssh or srun client, which also only relays bytes). The head runs the real Fleet (select over
128 pipes, line cutting, parsing, per-node status and clock samples) and, once per second, what
``denpex watch`` does with it (the merged snapshot, node statuses, grouping by node).

Reported per rate (snapshots per node per second):
* head CPU: the merger's own CPU time (this process, RUSAGE_SELF) per wall second, in % of one
  core; the relays' CPU (RUSAGE_CHILDREN) separately;
* arrival latency: from the generator's write (the line's own send time, same clock) to the
  snapshot being parsed and merged on the head: p50, p99, max;
* view update: the cost of one merged snapshot + grouping (what the watch thread does per
  refresh): p50, max.

Usage: python bench/multinode_bench.py [--nodes 128] [--seconds 20] [--rates 0.5 2]
Reports, does not assert.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from denpex_tui.app.remote import RemoteProbeLoop, group_by_node  # noqa: E402
from denpex_tui.probes.fleet import Fleet  # noqa: E402
from denpex_tui.probes.readings import DeletedFile, PathReading, ProcessReading, Snapshot  # noqa: E402
from denpex_tui.probes.transports import ChannelSpec  # noqa: E402

GENERATOR = r"""
import json, os, sys, time
fifos, rate, seconds, template = sys.argv[1].split(","), float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
outs = [open(f, "w", buffering=1 << 20) for f in fifos]
base = json.loads(open(template).read())
period = 1.0 / rate
t_end = time.time() + seconds
n = 0
start = time.time()
while time.time() < t_end:
    for i, f in enumerate(outs):
        now = time.time()
        base["host"] = "node%03d" % i
        base["unix_time"] = round(now, 6)
        base["cost_ms"] = 0.0
        for p in base["processes"]:
            p["fds"] = 900 + (n + i + p["rank"]) % 120
        f.write(json.dumps(base) + "\n")
        f.flush()
    n += 1
    delay = start + n * period - time.time()
    if delay > 0:
        time.sleep(delay)
for f in outs:
    f.close()
"""


def node_snapshot(i: int) -> dict:
    """One node's snapshot as its probe would print it: 8 ranks and 3 paths."""
    procs = []
    for lr in range(8):
        procs.append(ProcessReading(
            pid=40000 + lr, rank=8 * i + lr, local_rank=lr, world_size=1024,
            cmdline=["/usr/bin/python3", "-u", "pretrain_gpt.py", "--tensor-model-parallel-size", "8",
                     "--save", "/lustre/ckpt/run17", "--deepspeed_config", "ds_config.json"],
            role="worker", create_time=1796110000.0 + lr, readable=True, status="sleeping", uid=1000,
            fds=900, fd_soft_limit=1024, fd_hard_limit=524288,
            fds_by_kind={"file": 610, "socket": 180, "pipe": 40, "anon": 50, "shm": 16, "dev": 4, "other": 0},
            deleted_open_files=2, deleted_open_bytes=3 << 30,
            deleted=[DeletedFile(fd=311, path="/local_nvme/swap/rank%d.tmp" % lr, bytes=3 << 30, size=3 << 30)],
            shm_open_files=16, shm_open_bytes=1 << 28, open_under_watched={"/lustre/ckpt/run17": 3},
            rss_bytes=38 << 30))
    paths = [
        PathReading("/dev/shm", why=["/dev/shm"], exists=True, measured_path="/dev/shm", mount="/dev/shm",
                    fstype="tmpfs", source="tmpfs", fs_class="memory", network_fs=False, readonly=False,
                    bytes_total=1 << 39, bytes_free=1 << 38, bytes_reserved=0, bytes_used=1 << 38,
                    inodes_total=1 << 25, inodes_free=1 << 24, is_shm=True),
        PathReading("/lustre/ckpt/run17", why=["log: checkpoint save path"], exists=True,
                    measured_path="/lustre/ckpt/run17", mount="/lustre", fstype="lustre",
                    source="10.0.0.1@o2ib:/scratch", fs_class="parallel", network_fs=True,
                    readonly=False, bytes_total=1 << 50, bytes_free=1 << 46, bytes_reserved=0,
                    bytes_used=1 << 49, inodes_total=1 << 32, inodes_free=1 << 31, open_fds=24),
        PathReading("/local_nvme", why=["log: nvme_path"], exists=True, measured_path="/local_nvme",
                    mount="/local_nvme", fstype="xfs", source="/dev/nvme0n1", fs_class="local",
                    network_fs=False, readonly=False, bytes_total=7 << 40, bytes_free=1 << 38,
                    bytes_reserved=0, bytes_used=6 << 40, inodes_total=1 << 30, inodes_free=1 << 29,
                    deleted_open_bytes=24 << 30),
    ]
    s = Snapshot(time=time.time(), host="node%03d" % i, processes=procs, paths=paths,
                 system_files_open=52000, system_files_max=9223372036854775807, cost_s=0.004)
    return s.to_json()


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))] if xs else float("nan")


def run(nodes: int, rate: float, seconds: float) -> dict:
    tmp = tempfile.mkdtemp(prefix="denpex-mnbench-")
    tpl = os.path.join(tmp, "snap.json")
    line = json.dumps(node_snapshot(0))
    with open(tpl, "w") as f:
        f.write(line)
    fifos = []
    for i in range(nodes):
        p = os.path.join(tmp, "node%03d" % i)
        os.mkfifo(p)
        fifos.append(p)
    specs = [ChannelSpec("cat node%03d" % i, ["cat", fifos[i]], ["node%03d" % i]) for i in range(nodes)]
    fleet = Fleet(specs, interval=1.0 / rate, answer_timeout=30)
    fleet.start()
    gen = subprocess.Popen([sys.executable, "-c", GENERATOR, ",".join(fifos), str(rate), str(seconds), tpl])
    lat: list[float] = []
    views: list[float] = []
    seen = {n: 0 for n in fleet.nodes}
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.monotonic()
    next_view = t0 + 1.0
    warm = t0 + 2.0  # start-up (cat processes, first lines) not counted
    cpu_warm = None
    while gen.poll() is None or fleet.channels:
        fleet.step(0.05)
        now = time.monotonic()
        if cpu_warm is None and now >= warm:
            cpu_warm = (resource.getrusage(resource.RUSAGE_SELF), now)
        wall = time.time()
        for n, st in fleet.nodes.items():
            if st.source.snapshots != seen[n]:
                seen[n] = st.source.snapshots
                if now >= warm:
                    lat.append(wall - st.source.snapshot().time)
        if now >= next_view:
            next_view = now + 1.0
            v0 = time.perf_counter()
            upd = RemoteProbeLoop.update(fleet, {})
            group_by_node(upd.snapshot)
            views.append(time.perf_counter() - v0)
        if now - t0 > seconds + 20:
            break
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    t1 = time.monotonic()
    fleet.stop()
    gen.wait()
    rc = resource.getrusage(resource.RUSAGE_CHILDREN)
    ru, tw = cpu_warm if cpu_warm else (r0, t0)
    cpu = (r1.ru_utime + r1.ru_stime) - (ru.ru_utime + ru.ru_stime)
    statuses = {}
    for n in fleet.node_json():
        statuses[n["status"]] = statuses.get(n["status"], 0) + 1
    for p in fifos:
        os.unlink(p)
    os.unlink(tpl)
    os.rmdir(tmp)
    total = sum(st.source.snapshots for st in fleet.nodes.values())
    return {
        "nodes": nodes, "rate_per_node": rate, "line_bytes": len(line) + 1,
        "snapshots": total, "lines_per_s": round(total / (t1 - t0), 1),
        "MB_per_s": round(total * (len(line) + 1) / (t1 - t0) / 1e6, 2),
        "head_cpu_pct_of_core": round(100 * cpu / max(1e-9, t1 - tw), 1),
        "relays_cpu_s": round(rc.ru_utime + rc.ru_stime, 2),
        "arrival_ms_p50": round(1000 * pct(lat, 50), 1), "arrival_ms_p99": round(1000 * pct(lat, 99), 1),
        "arrival_ms_max": round(1000 * max(lat), 1) if lat else None,
        "view_update_ms_p50": round(1000 * pct(views, 50), 2),
        "view_update_ms_max": round(1000 * max(views), 2) if views else None,
        "statuses_at_end": statuses,
    }


def gauges_cost(nodes: int, rounds: int = 10) -> dict:
    """The watch's Gauges widget drawing a merged snapshot of ``nodes`` nodes (headless app)."""
    import asyncio

    from textual.app import App

    from denpex_tui.app.theming import VARIABLE_DEFAULTS
    from denpex_tui.app.widgets.gauges import Gauges
    from denpex_tui.probes.wire import snapshot_from_json

    procs, paths, status = [], [], []
    for i in range(nodes):
        s = snapshot_from_json(node_snapshot(i))
        for p in s.processes + s.paths:
            p.node = "node%03d" % i
        procs += s.processes
        paths += s.paths
        status.append({"node": "node%03d" % i, "status": "ok", "detail": ""})
    merged = Snapshot(time=time.time(), host="head", processes=procs, paths=paths)
    merged.nodes = status

    class A(App):
        def get_theme_variable_defaults(self):
            return dict(VARIABLE_DEFAULTS)

        def compose(self):
            yield Gauges(id="g")

    out = []

    async def go():
        app = A()
        async with app.run_test(size=(120, 50)) as pilot:
            g = app.query_one(Gauges)
            for _ in range(rounds):
                t0 = time.perf_counter()
                g.show(merged, {}, {})
                await pilot.pause()
                out.append(time.perf_counter() - t0)

    asyncio.run(go())
    return {"nodes": nodes, "gauges_draw_ms_p50": round(1000 * pct(out, 50), 1),
            "gauges_draw_ms_max": round(1000 * max(out), 1)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=128)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--rates", type=float, nargs="+", default=[0.5, 2.0])
    a = ap.parse_args()
    print(f"# {socket.gethostname()}: {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}", flush=True)
    print(json.dumps(gauges_cost(a.nodes)), flush=True)
    for r in a.rates:
        print(json.dumps(run(a.nodes, r, a.seconds)), flush=True)


if __name__ == "__main__":
    main()
