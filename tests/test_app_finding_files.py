"""While a big job's files are still being found, nothing is read yet: the header said
'reading history 100 % · 0.0 MB of 0.0 MB' (seen in tmux on a 2,000-rank job, the first
seconds), with 'no failure signature so far (the history is still being read)' beneath it."""

from __future__ import annotations

import asyncio

from test_app_support import catalog, make_app, until, widget_text

from denpex_tui.app.replay import ReplayEngine
from denpex_tui.app.widgets.status import StatusBar
from denpex_tui.live.engine import Engine
from denpex_tui.live.events import HistoryProgress


def test_finding_the_files_is_not_100_percent_read(tmp_path):
    root = str(tmp_path)
    engine = ReplayEngine(Engine([root], catalog(), processes=False), [HistoryProgress(0, 0, 0, 0)])

    async def go():
        app = make_app(root, engine=engine)
        async with app.run_test(size=(120, 36)) as pilot:
            bar = app.query_one(StatusBar)

            def header():
                return " ".join(widget_text(bar))

            assert await until(pilot, lambda: "finding the log files" in header() or "%" in header(), timeout=10)
            text = header()
            assert "100 %" not in text and "0.0 MB of 0.0 MB" not in text, text
            assert "finding the log files" in text, text

    asyncio.run(go())


def test_reading_shows_its_percent_once_files_are_found(tmp_path):
    root = str(tmp_path)
    engine = ReplayEngine(Engine([root], catalog(), processes=False),
                          [HistoryProgress(5_000_000, 17_000_000, 100, 2000)])

    async def go():
        app = make_app(root, engine=engine)
        async with app.run_test(size=(120, 36)) as pilot:
            bar = app.query_one(StatusBar)
            assert await until(pilot, lambda: "reading history 29 %" in " ".join(widget_text(bar)), timeout=10)

    asyncio.run(go())
