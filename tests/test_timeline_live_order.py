"""The merged timeline while following: lines that arrive close together are shown in time order,
and a traceback read in several pieces stays in one piece (issue 20, "keys and time order").

The demo job is played in real time (its ranks write the same moment a few ms apart, in an
order that is not the time order: rank 0's "Saved" line at +129 ms before rank 1's "Saving" at
+124 ms), while ``watch`` follows it from the start.
"""

from __future__ import annotations

import asyncio
import re
import threading
from datetime import datetime

from denpex_tui.core.demo import DEMO_FAILING_RANK, play_demo_job

from test_app_support import make_app, until

TS = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}")


def _rows(app) -> list[tuple[str, str]]:
    """(source path, text) of every row of the default view, top to bottom."""
    tl = app.timeline
    with tl.lock:
        n = tl.default.count(tl.rows)
        seqs = [tl.default.seq(i) for i in range(n)]
    out = []
    for seq in seqs:
        sid, _l = tl.locate(seq)
        out.append((tl.sources[sid].name, tl.text(seq)[0].text))
    return out


def test_lines_written_while_following_are_merged_in_time_order(tmp_path):
    rows = asyncio.run(_follow_demo(tmp_path))
    times = [(i, datetime.strptime(m.group(0), "%Y-%m-%d %H:%M:%S,%f"), text)
             for i, (_s, text) in enumerate(rows) if (m := TS.search(text))]
    assert len(times) > 100
    back = [(a[2], b[2]) for a, b in zip(times, times[1:]) if b[1] < a[1]]
    assert not back, f"{len(back)} rows above an earlier one, e.g. {back[0]}"
    # the failing rank's traceback (its stderr file) is one run of rows
    tb = [i for i, (src, _t) in enumerate(rows) if src.endswith(f"/{DEMO_FAILING_RANK}/stderr.log")]
    assert tb and tb == list(range(tb[0], tb[0] + len(tb))), "the failing rank's traceback is split"


def _lines_written(app) -> int:
    n = 0
    for m in list(app.timeline.sources):
        try:
            with open(m.index.path, "rb") as fh:
                n += fh.read().count(b"\n")
        except OSError:
            pass
    return n


async def _follow_demo(tmp_path) -> list[tuple[str, str]]:
    root = tmp_path / "job"
    stop = threading.Event()
    ready = threading.Event()
    app = make_app(str(root))
    root.mkdir()

    def play():
        ready.wait(30)
        play_demo_job(str(root), realtime=True, speed=1.0, stop=stop)

    writer = threading.Thread(target=play, daemon=True)
    writer.start()
    try:
        async with app.run_test(size=(120, 36)) as pilot:
            assert await until(pilot, lambda: app.timeline.built, 60), "the (empty) history was never merged"
            ready.set()
            assert await until(pilot, lambda: not writer.is_alive(), 120), "the demo did not finish"

            def done():
                return app.timeline_worker.idle and app.timeline.rows >= _lines_written(app) > 0

            assert await until(pilot, done, 60), "the timeline did not take every line written"
            return _rows(app)
    finally:
        stop.set()
        writer.join(10)


def test_a_partial_line_is_not_held_for_ever(tmp_path):
    # a read that ends inside a line indexes nothing: nothing may wait for the settle window
    # (the worker would never be idle again, and a recreated file's lines never settled)
    from denpex_tui.app.timeline import SETTLE_S, Timeline

    log = tmp_path / "rank0.log"
    log.write_text("2026-11-29 18:43:02,007 INFO [rank0/8] train: Starting on host gpu-node-01\n")
    tl = Timeline()
    tl.add_paths([str(log)])
    tl.build()
    assert tl.rows == 1
    with open(log, "a") as fh:
        fh.write("2026-11-29 18:43:02,027 INFO [rank0/8] train: Initialized process gr")
    tl.refresh([str(log)], now=100.0)
    assert not tl.holding and tl.due() is None
    with open(log, "a") as fh:
        fh.write("oup: backend=nccl world_size=8 timeout=600.0s\n")
    assert tl.refresh([str(log)], now=101.0) == 0 and tl.holding  # a whole line: held ...
    assert tl.due() == 101.0 + SETTLE_S
    assert tl.settle(101.0 + SETTLE_S) == 1 and not tl.holding  # ... for its window, then merged
