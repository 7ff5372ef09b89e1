"""The live engine end to end: tailer + the core pipeline + triage.

* Detection latency: N rank files followed; one real ENOSPC line is appended to each of K
  files (one per file, at random times); latency = from the write() to the FindingEvent
  (p50, p99, max). Local filesystem with inotify (default) and polling only (inotify off,
  as on NFS/Lustre written from other nodes).
* Throughput: all N files written at once (real training lines); lines/s the engine parses
  while following, as a ratio to ``scan`` over the same finished files in the same run.

Usage: python bench/engine_bench.py [--files 64 1024] [--samples 100] [--lines 2000000]
Reports, does not assert.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from denpex_tui.core.catalog import load_catalog  # noqa: E402
from denpex_tui.core.scan import scan_paths  # noqa: E402
from denpex_tui.live.engine import Engine  # noqa: E402
from denpex_tui.live.events import FindingEvent  # noqa: E402
from denpex_tui.live.tailer import TailOptions  # noqa: E402

STEP = ("2026-11-29 17:40:16,343 INFO [rank{r}/{n}] train: step {s}/200000 | epoch 0 | loss 2.0421 | acc 0.383 | "
        "grad_norm 2.5044 | lr 3.000e-04 | samples/s 5220.3 | step_time 34.3ms | rss 318MB\n")
ENOSPC = "OSError: [Errno 28] No space left on device: '/ckpt/rank{r}/global_step{s}/mp_rank_00_model_states.pt'\n"


def _pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


async def latency(n: int, samples: int, inotify: bool, cap: float = 500.0) -> dict:
    root = Path(tempfile.mkdtemp(prefix="denpex-eng-"))
    files = [root / f"rank{r}.log" for r in range(n)]
    for r, f in enumerate(files):
        f.write_text(STEP.format(r=r, n=n, s=0))
    eng = Engine([str(root)], load_catalog(include_user=False), processes=False,
                 tailer_options=TailOptions(inotify=inotify, max_meta_per_s=cap))
    # Start-up: history, then every file's first polls and inotify watches, all paid from the
    # metadata cap; measure the steady state after it (start-up latency is reported apart).
    settle = 3.0 + 2.5 * n / cap
    sent: dict[int, float] = {}
    got: dict[int, float] = {}
    picks = random.sample(range(n), min(samples, n))

    async def writer() -> None:
        await asyncio.sleep(settle)
        for r in picks:
            await asyncio.sleep(random.uniform(0.01, 0.05))
            with open(files[r], "a") as fh:
                sent[r] = time.monotonic()
                fh.write(ENOSPC.format(r=r, s=1))
        await asyncio.sleep(8.0)
        eng.stop()

    task = asyncio.create_task(writer())
    async for ev in eng.run():
        if isinstance(ev, FindingEvent) and ev.finding.signature == "os.enospc":
            got.setdefault(ev.finding.rank, time.monotonic())
    await task
    lat = [got[r] - sent[r] for r in picks if r in got and r in sent]
    return {"files": n, "inotify": inotify, "cap": cap, "settle_s": round(settle, 1), "samples": len(picks),
            "seen": len(lat),
            "p50_ms": round(_pct(lat, 50) * 1000, 1) if lat else None,
            "p99_ms": round(_pct(lat, 99) * 1000, 1) if lat else None,
            "max_ms": round(max(lat) * 1000, 1) if lat else None}


async def throughput(n: int, total_lines: int) -> dict:
    root = Path(tempfile.mkdtemp(prefix="denpex-thr-"))
    files = [root / f"rank{r}.log" for r in range(n)]
    for f in files:
        f.touch()
    eng = Engine([str(root)], load_catalog(include_user=False), processes=False)
    per = total_lines // n
    done = threading.Event()

    def write_all() -> None:
        handles = [open(f, "a", buffering=1 << 20) for f in files]
        block = 200
        for s in range(0, per, block):
            for r, fh in enumerate(handles):
                fh.write("".join(STEP.format(r=r, n=n, s=s + i) for i in range(block)))
        for fh in handles:
            fh.close()
        done.set()

    t0 = None
    last_change = time.monotonic()
    parsed = 0

    async def watch() -> None:
        nonlocal t0, parsed, last_change
        await asyncio.sleep(1.0)
        t0 = time.monotonic()
        threading.Thread(target=write_all, daemon=True).start()
        while True:
            await asyncio.sleep(0.2)
            now_parsed = sum(p.line_no for p in list(eng.processors.values()))
            if now_parsed != parsed:
                parsed, last_change = now_parsed, time.monotonic()
            if done.is_set() and parsed >= per * n:
                break
            if time.monotonic() - last_change > 10:
                break
        eng.stop()

    task = asyncio.create_task(watch())
    async for _ in eng.run():
        pass
    await task
    follow_s = last_change - t0
    size = sum(f.stat().st_size for f in files)
    t1 = time.perf_counter()
    scan_paths([str(root)], include_user=False, jobs=1)
    scan_s = time.perf_counter() - t1
    return {"files": n, "lines": parsed, "bytes": size, "follow_lines_per_s": round(parsed / follow_s),
            "scan_lines_per_s_one_core": round(per * n / scan_s),
            "ratio_to_scan": round((parsed / follow_s) / (per * n / scan_s), 2)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, nargs="+", default=[64, 1024])
    ap.add_argument("--samples", type=int, default=100)
    ap.add_argument("--lines", type=int, default=2_000_000)
    a = ap.parse_args()
    out = []
    for n in a.files:
        for ino, cap in ((True, 500.0), (False, 500.0), (False, 2000.0)):
            out.append(asyncio.run(latency(n, a.samples, ino, cap)))
            print(json.dumps(out[-1]), flush=True)
    for n in a.files:
        out.append(asyncio.run(throughput(n, a.lines)))
        print(json.dumps(out[-1]), flush=True)


if __name__ == "__main__":
    main()
