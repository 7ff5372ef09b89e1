#!/usr/bin/env python3
"""Generate the README's screenshots from the real app on the demo data. Never draw them by hand.

    python screenshots/make_screenshots.py          # writes screenshots/*.svg

The demo job is written finished (``write_demo_job``) at a fixed time; a healthy job is the
demo's lines before the failure. The live engine reads them and its events are replayed to the
app in a fixed order (``denpex_tui.app.replay``), with a frozen clock and the demo's own
readings for the gauges: its checkpoint disk is the quota the demo keeps itself (rank 5 fills
it), labelled as the demo's simulated disk; /dev/shm is given fixed numbers. The demo runs no
processes, so none are shown.

The SVGs use a font stack that renders without network access (no CDN font): the monospace
fonts a system has (DejaVu Sans Mono, Liberation Mono, Menlo, Consolas), then ``monospace``.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import sys
from datetime import datetime, timedelta
from pathlib import Path

from denpex_tui.app.factory import WatchOptions, make_app
from denpex_tui.app.messages import Measured, ProbeUpdate
from denpex_tui.app.replay import collect
from denpex_tui.app.widgets.fixpanel import FixPanel
from denpex_tui.app.widgets.logview import LogView
from denpex_tui.core.catalog import load_catalog
from denpex_tui.app.demodisk import DEMO_MOUNT
from denpex_tui.core.demo import DEMO_DISK_BYTES, SHARD_BYTES, demo_lines, write_demo_job
from denpex_tui.probes.differential import differential, differential_kind, metrics_for
from denpex_tui.probes.readings import PathReading, Snapshot

OUT = Path(__file__).resolve().parent
WORK = Path("/tmp/denpex-screenshots")
START = datetime(2026, 11, 29, 17, 40, 0)
NOW = (START + timedelta(seconds=95)).timestamp()
GIB = 1 << 30


def write_healthy(root: Path) -> None:
    files: dict[Path, list[str]] = {}
    for ln in demo_lines(START, steps=80, fail_step=10**6):
        if ln.rank is not None:
            p = root / "logs" / "run01_k2x9" / "attempt_0" / str(ln.rank) / f"{ln.stream}.log"
            files.setdefault(p, []).append(ln.text)
        files.setdefault(root / "console.log", []).append(ln.text if ln.rank is None else f"[default{ln.rank}]:{ln.text}")
    for p, lines in files.items():
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("\n".join(lines) + "\n")


def readings(root: str, near: bool = True):
    """The demo's disk as the demo keeps it: full after rank 5's failed save (``near``), or
    after the healthy job's saves; /dev/shm with fixed numbers."""
    used = DEMO_DISK_BYTES if near else 16 * SHARD_BYTES
    paths = []
    for d in (f"{root}/checkpoints", f"{root}/checkpoints/checkpoint-100"):
        paths.append(PathReading(path=d, why=["demo checkpoint disk"], exists=True, measured_path=d, mount=DEMO_MOUNT,
                                 fstype="demo", source="denpex --demo", fs_class="local", network_fs=False,
                                 bytes_total=DEMO_DISK_BYTES, bytes_free=DEMO_DISK_BYTES - used, bytes_reserved=0,
                                 bytes_used=used, inodes_total=100_000, inodes_free=99_930))
    shm = PathReading(path="/dev/shm", why=["/dev/shm"], exists=True, measured_path="/dev/shm", mount="/dev/shm",
                      fstype="tmpfs", fs_class="memory", bytes_total=256 * GIB, bytes_used=25 * GIB,
                      bytes_free=231 * GIB, bytes_reserved=0, inodes_total=60_000_000, inodes_free=59_000_000,
                      is_shm=True)
    snap = Snapshot(time=NOW, host="gpu-node-01", processes=[], paths=paths + [shm])
    return snap, {}, {}


OFFLINE_FONTS = '"DejaVu Sans Mono", "Liberation Mono", Menlo, Consolas, monospace'


def offline_fonts(svg: str) -> str:
    """No web font: drop Rich's @font-face rules (CDN URLs) and name local monospace fonts."""
    svg = re.sub(r"\s*@font-face\s*\{[^}]*\}", "", svg)
    return re.sub(r"font-family: Fira Code, monospace;", f"font-family: {OFFLINE_FONTS};", svg)


async def shoot(name, root, engine, size, *, theme=None, probes=False, near=True, steps=()):
    opts = WatchOptions(paths=[str(root)], processes=False, probes=False, root=str(root), clock=lambda: NOW,
                        theme=theme)
    app = make_app(opts, load_catalog(include_user=False), engine=engine)
    async with app.run_test(size=size) as pilot:
        for _ in range(200):
            await pilot.pause(0.05)
            if app.query_one(LogView).row_count and (app.state.incident is None or app.query_one(FixPanel).finding):
                if app.state.summary.sources:
                    break
        await pilot.pause(0.5)
        if probes:
            snap, ptr, prt = readings(str(root), near)
            app.post_message(ProbeUpdate(snap, ptr, prt))
            f = app.query_one(FixPanel).finding
            if f is not None and differential_kind(f.signature):  # what the probe thread would measure
                path = f"{root}/checkpoints/checkpoint-100"
                app.post_message(Measured(app._fix_key, metrics_for(path, snap, du=False),
                                          differential(f.signature, path, snap, None, du=False, error_node=f.node)))
                await pilot.pause(0.3)
        for step in steps:
            await pilot.press(step)
            await pilot.pause(0.1)
        for _ in range(40):
            await pilot.pause(0.05)
            if "x" not in steps or app.query_one(LogView).buf.notes:
                break
        await pilot.pause(0.3)
        (OUT / f"{name}.svg").write_text(offline_fonts(app.export_screenshot()), encoding="utf-8")
        print(f"screenshots/{name}.svg")


async def main() -> int:
    shutil.rmtree(WORK, ignore_errors=True)
    failed, healthy = WORK / "run01", WORK / "run02"
    write_demo_job(failed, start=START)
    write_healthy(healthy)
    catalog = load_catalog(include_user=False)
    fe = await collect([str(failed)], catalog)
    he = await collect([str(healthy)], catalog)
    await shoot("healthy", healthy, he, (160, 45), probes=True, near=False)
    await shoot("initiating-fix-panel", failed, fe, (200, 55), probes=True)
    await shoot("explained-traceback", failed, fe, (160, 45), steps=("i", "down", "down", "down", "x"))
    await shoot("gauges-near-limits", failed, fe, (130, 50), probes=True, steps=("5",))
    await shoot("tmux-80x24", failed, fe, (80, 24), steps=("i",))
    for theme in ("denpex-dark", "denpex-light", "denpex-high-contrast"):
        await shoot(f"theme-{theme}", failed, fe, (160, 45), theme=theme, probes=True)
    shutil.rmtree(WORK, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
