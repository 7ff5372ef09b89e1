"""The history pass can begin before the engine runs (the app starts it as it is built, so the
reading overlaps the UI's start-up): what was read before anyone attached is handed over in
order, the end of the pass once, and the engine's diagnosis is the same as a pass begun by
``run()`` (issue 18, watch)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from denpex_tui.core.catalog import load_catalog
from denpex_tui.core.matcher import Matcher
from denpex_tui.live.backlog import Backlog
from denpex_tui.live.engine import Engine
from denpex_tui.live.events import HistoryDone, IncidentEvent

CASE = Path(__file__).parent / "fixtures" / "corpus" / "enospc_checkpoint_fastfail"


def _wait(cond, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "the history pass did not end"
        time.sleep(0.01)


def test_read_before_attach_is_handed_over_in_order():
    matcher = Matcher(load_catalog(include_user=False))
    early = Backlog([str(CASE)], matcher, index=True, polite=False)
    early.start()
    early.start()  # a second start is nothing
    _wait(lambda: early._end is not None)
    got, ends = [], []
    early.attach(lambda h: got.append(h.info.path), ends.append)
    assert ends == [None]

    late = Backlog([str(CASE)], matcher, index=True, polite=False)
    want, late_ends = [], []
    late.attach(lambda h: want.append(h.info.path), late_ends.append)
    _wait(lambda: bool(late_ends))
    assert late_ends == [None]
    assert got == want and len(got) >= 4


async def _diagnosis(start_early: bool) -> tuple[str, int]:
    eng = Engine([str(CASE)], load_catalog(include_user=False), processes=False, index=True)
    if start_early:
        eng.start_history()
        _wait(lambda: eng.backlog._end is not None)
    last, rows = None, 0
    async for ev in eng.run():
        if isinstance(ev, IncidentEvent):
            last = ev.incident
        if isinstance(ev, HistoryDone):
            rows = sum(idx.lines for idx in ev.indexes.values())
            eng.stop()
    assert last is not None
    return f"{last.initiating.rank} {last.initiating.signature}", rows


def test_engine_started_early_says_what_it_says_when_started_by_run():
    assert asyncio.run(_diagnosis(True)) == asyncio.run(_diagnosis(False))


def test_the_read_progress_never_goes_back():
    """A worker takes its bytes off the shared counter when its task ends; the parent adds the
    task a moment later. In between the header said 46 % after 48 % (seen in tmux)."""
    import multiprocessing

    from denpex_tui.core.history import ReadProgress

    pr = ReadProgress()
    pr.total = 100
    pr._shared = multiprocessing.get_context("fork").Value("q", 0)
    pr._shared.value = 48
    assert pr.read() == 48
    pr._shared.value = 0  # the worker's task ended: its bytes leave the shared counter ...
    assert pr.read() == 48
    pr._done += 50  # ... and the parent adds the whole task
    assert pr.read() == 50
