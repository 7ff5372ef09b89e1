#!/usr/bin/env python3
"""Many failing ranks (report only, no assertion).

* ``scan``: one console log where N ranks (1 000, 10 000, 100 000) each print the same real
  NCCL watchdog timeout; wall time and peak RSS of ``denpex scan --json`` (a subprocess,
  ``ru_maxrss``), with a time limit per size.
* ``--follow`` under a storm: R rank files (2 000) written at L lines/s in total (20 000)
  by another process for D seconds (30), real training step lines; every rank also writes
  one real ENOSPC line at a random time. Latency = from that write to the engine's
  ``FindingEvent`` for the rank (p50, p99, max; CLOCK_MONOTONIC is shared by processes).

    python bench/rank_scale_bench.py                       # both
    python bench/rank_scale_bench.py --only scan --ranks 1000 10000 --limit 60
    python bench/rank_scale_bench.py --only follow --files 2000 --rate 20000 --seconds 30

The figures depend on triage being n·log n in the number of same-cause ranks (the core's
work); this bench only measures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

D1 = ("[rank{r}]:[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629] [Rank {r}] Watchdog caught collective operation "
      "timeout: WorkNCCL(SeqNum=78, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600081 "
      "milliseconds before timing out.\n")
STEP = ("2026-11-29 17:40:16,343 INFO [rank{r}/{n}] train: step {s}/200000 | epoch 0 | loss 2.0421 | acc 0.383 | "
        "grad_norm 2.5044 | lr 3.000e-04 | samples/s 5220.3 | step_time 34.3ms\n")
ENOSPC = "OSError: [Errno 28] No space left on device: '/ckpt/rank{r}/global_step{s}/mp_rank_00_model_states.pt'\n"


def _pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def scan_case(n: int, limit: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="denpex-ranks-") as d:
        path = os.path.join(d, "console.log")
        with open(path, "w") as fh:
            for r in range(n):
                fh.write(D1.format(r=r))
        t0 = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-m", "denpex_tui", "scan", "--json", path],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = t0 + limit
        while True:
            pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                proc.kill()
                _, status, ru = os.wait4(proc.pid, 0)
                return {"ranks": n, "seconds": f"> {limit:g} (stopped)", "peak_rss_mb": round(ru.ru_maxrss / 1024)}
            time.sleep(0.05)
        # the scan forks its worker: the parent's rusage covers its waited-for children too
        return {"ranks": n, "seconds": round(time.monotonic() - t0, 2),
                "peak_rss_mb": round(max(ru.ru_maxrss, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024),
                "exit": os.waitstatus_to_exitcode(status)}


WRITER = r"""
import json, os, random, sys, time
root, n, rate, seconds, out = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
STEP = %r
ENOSPC = %r
fds = [os.open(os.path.join(root, f"rank{r}.log"), os.O_WRONLY | os.O_APPEND) for r in range(n)]
fail_at = sorted((random.uniform(0.5, seconds - 0.5), r) for r in range(n))
sent = {}
t0 = time.monotonic()
step, k, i = 0, 0, 0
slot = 0.01
while True:
    now = time.monotonic() - t0
    if now >= seconds:
        break
    for _ in range(int(rate * slot)):
        os.write(fds[k], STEP.format(r=k, n=n, s=step).encode())
        k += 1
        if k == n:
            k, step = 0, step + 1
    while i < len(fail_at) and fail_at[i][0] <= now:
        r = fail_at[i][1]
        sent[r] = time.monotonic()
        os.write(fds[r], ENOSPC.format(r=r, s=step).encode())
        i += 1
    time.sleep(max(0.0, slot - (time.monotonic() - t0 - now)))
json.dump(sent, open(out, "w"))
""" % (STEP, ENOSPC)


async def storm(n: int, rate: float, seconds: float) -> dict:
    from denpex_tui.core.catalog import load_catalog
    from denpex_tui.live.engine import Engine
    from denpex_tui.live.events import FindingEvent

    root = Path(tempfile.mkdtemp(prefix="denpex-storm-"))
    for r in range(n):
        (root / f"rank{r}.log").write_text(STEP.format(r=r, n=n, s=0))
    eng = Engine([str(root)], load_catalog(include_user=False), processes=False)
    got: dict[int, float] = {}
    settle = 3.0 + 2.5 * n / 500
    sent_file = root / "sent.json"

    async def drive() -> None:
        await asyncio.sleep(settle)
        w = await asyncio.create_subprocess_exec(sys.executable, "-c", WRITER, str(root), str(n), str(rate),
                                                 str(seconds), str(sent_file))
        await w.wait()
        t = time.monotonic()
        while len(got) < n and time.monotonic() - t < 30:
            await asyncio.sleep(0.2)
        eng.stop()

    task = asyncio.create_task(drive())
    async for ev in eng.run():
        if isinstance(ev, FindingEvent) and ev.finding.signature == "os.enospc" and ev.finding.rank is not None:
            got.setdefault(ev.finding.rank, time.monotonic())
    await task
    sent = {int(k): v for k, v in json.loads(sent_file.read_text()).items()}
    lat = [got[r] - sent[r] for r in sent if r in got]
    return {"files": n, "lines_per_s": rate, "seconds": seconds, "failures_written": len(sent), "seen": len(lat),
            "p50_ms": round(_pct(lat, 50) * 1000) if lat else None,
            "p99_ms": round(_pct(lat, 99) * 1000) if lat else None,
            "max_ms": round(max(lat) * 1000) if lat else None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=["scan", "follow"])
    ap.add_argument("--ranks", type=int, nargs="+", default=[1000, 10000, 100000])
    ap.add_argument("--limit", type=float, default=120.0, help="seconds allowed per scan size")
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--rate", type=float, default=20000.0)
    ap.add_argument("--seconds", type=float, default=30.0)
    a = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, a.files + 512)), hard))
    if a.only in (None, "scan"):
        for n in a.ranks:
            print(json.dumps({"scan": scan_case(n, a.limit)}), flush=True)
    if a.only in (None, "follow"):
        print(json.dumps({"follow": asyncio.run(storm(a.files, a.rate, a.seconds))}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
