"""The demo tells its own story truthfully: rank 5 runs out of the demo's own (simulated,
labelled) checkpoint disk, and the ranks table's first-error times come from each rank's own
first error line."""

from __future__ import annotations

import asyncio
from datetime import datetime

from test_app_support import DEMO_START, make_app, settle, until, widget_text, write_failed_job

from denpex_tui.app.demodisk import DEMO_MOUNT
from denpex_tui.app.widgets.fixpanel import FixPanel
from denpex_tui.app.widgets.gauges import Gauges
from denpex_tui.app.widgets.ranks import RankTable


def test_demo_rank_5_fills_the_demos_own_disk_and_first_errors_are_each_ranks_own(tmp_path):
    root = write_failed_job(tmp_path / "run01")

    async def main():
        app = make_app(root, probes=True, demo_root=root, probe_interval=0.2)
        async with app.run_test(size=(200, 60)) as pilot:
            await settle(app, pilot)
            fix = app.query_one(FixPanel)
            def panel() -> str:
                return "\n".join(str(getattr(w.content, "plain", w.content)) for w in fix.children)

            assert await until(pilot, lambda: "blocks exhausted" in panel(), timeout=20)
            panel = panel()
            assert "✖ likely    blocks exhausted: only 0 B (0.00 %) free" in panel
            assert f"on {DEMO_MOUNT} (demo)" in panel  # labelled: never the real disk's reading
            assert "cannot stat" not in panel  # the simulated disk is no mount point for du to walk
            # one full filesystem is one critical gauge, however many watched paths are on it
            assert await until(pilot, lambda: "critical" in app._gauge_alert)
            assert app._gauge_alert == "✖ 1 filesystem critical (5: gauges)"
            gauges = "\n".join(widget_text(app.query_one(Gauges)))
            assert DEMO_MOUNT in gauges and "100% FULL" in gauges
            # rank 5's first error: its own ERROR line, exact; the others after their last line
            rows = app.state.ranks
            assert await until(pilot, lambda: all(rows[r].first_line is not None for r in range(8)))
            own = rows[5].first_line
            assert not own.approx and own.source.endswith("/5/stdout.log")
            assert datetime.fromtimestamp(own.time) > DEMO_START
            table = app.query_one(RankTable)
            assert table.get_cell("5", "first error").plain == datetime.fromtimestamp(own.time).strftime("%H:%M:%S")
            for r in (0, 1, 2, 3, 4, 6, 7):
                assert rows[r].first_line.approx and table.get_cell(str(r), "first error").plain.startswith("≥")

    asyncio.run(main())
