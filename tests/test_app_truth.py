"""What the watch screen says is true (issue 20): the header is never cut and wraps whole
parts, counts filesystems (not watched paths), says how long in true words, scales to 2,000
ranks, reads a log without ranks; 3-4 digit ranks fit the log's gutter; the footer shows only
keys that fit; toasts stay off the panes' borders. Pilot tests on real files."""

from __future__ import annotations

import asyncio
import re
from datetime import datetime, timedelta

import pytest
from test_app_support import DEMO_START, fixed_readings, make_app, settle, until, widget_text, write_failed_job

from denpex_tui.app.messages import ProbeUpdate
from denpex_tui.app.widgets.footer import KeyFooter
from denpex_tui.app.widgets.logview import LogView
from denpex_tui.app.widgets.status import StatusBar, fmt_elapsed
from denpex_tui.demo import demo_lines


@pytest.fixture(scope="module")
def failed_root(tmp_path_factory):
    return write_failed_job(tmp_path_factory.mktemp("truth") / "run01")


def run(coro):
    return asyncio.run(coro)


def header(app) -> str:
    return "\n".join(widget_text(app.query_one(StatusBar)))


def test_the_header_is_never_cut_when_the_gauges_alert_wraps_it(failed_root):
    """At 120x36 the gauges' alert made the first line wrap after the height was set: the
    headline ended at '- 7' and 'collateral · confidence high' was gone."""
    async def main():
        app = make_app(failed_root)  # no probe thread: only these readings
        async with app.run_test(size=(120, 36)) as pilot:
            await settle(app, pilot)
            app.post_message(ProbeUpdate(*fixed_readings(failed_root)))
            bar = app.query_one(StatusBar)
            assert await until(pilot, lambda: "critical" in bar._data[5])
            await pilot.pause(0.3)
            text = header(app)
            flat = " ".join(text.split())
            assert flat.rstrip().endswith("7 collateral · confidence high"), text
            # one filesystem and one process at the limit, as the pane shows them, and the key
            assert "✖ 1 filesystem and 1 process critical (5: gauges)" in flat
            # parts wrap whole: never '(5:' at a line's end and 'gauges)' at the next one's start
            assert not any(line.rstrip().endswith("(5:") for line in text.splitlines())
            assert bar.region.height == len(text.splitlines())

    run(main())


def test_elapsed_is_never_0m_after_30_seconds():
    assert fmt_elapsed(30, coarse=True) == "<1m"
    assert fmt_elapsed(61, coarse=True) == "1m" and fmt_elapsed(3700, coarse=True) == "1h01m"
    assert fmt_elapsed(18) == "00:18"


def _plain_log(path, n=50):
    t = datetime(2026, 1, 5, 10, 0, 0)
    path.write_text("".join(f"{(t + timedelta(seconds=i)).isoformat(sep=' ')} INFO step {i} loss {2 - i / 100:.3f}\n"
                            for i in range(n)))
    return str(path)


def test_a_log_without_ranks_is_not_waiting_for_lines(tmp_path):
    """One log file without rank prefixes: '0 ranks · waiting for log lines' for ever, with its
    lines on screen."""
    log = _plain_log(tmp_path / "train.log")

    async def main():
        app = make_app(log)
        async with app.run_test(size=(120, 36)) as pilot:
            await settle(app, pilot, incident=False)
            assert await until(pilot, lambda: app.state.summary.lines == 50)
            await pilot.pause(0.2)
            text = " ".join(header(app).split())
            assert "waiting for log lines" not in text and "0 ranks" not in text, text
            assert "no rank in the lines" in text
            assert "healthy · no failure signature in 50 lines (no rank in them)" in text
            assert app.query_one(LogView).row_count == 50

    run(main())


def _rank_files(root, ranks, steps=3):
    """torchrun's per-rank layout with the demo's real training line format, one file per rank."""
    for r in ranks:
        d = root / "logs" / "job_x1" / "attempt_0" / str(r)
        d.mkdir(parents=True)
        lines = [ln.text.replace("[rank0/8]", f"[rank{r}/2000]") for ln in demo_lines(DEMO_START, steps=steps)
                 if ln.rank == 0 and ln.stream == "stdout"]
        (d / "stdout.log").write_text("\n".join(lines[:6]) + "\n")
    return str(root)


def test_four_digit_ranks_fit_the_gutter_and_2000_ranks_fit_the_header(tmp_path):
    """With 2,000 rank files the header was six lines of '1325 ranks (2-3,5-6,8-9,...' and
    ranks of 3-4 digits ran into the log pane's border ('││988')."""
    root = _rank_files(tmp_path / "job", list(range(0, 2000, 9)) + [1999])

    async def main():
        app = make_app(root)
        async with app.run_test(size=(120, 36)) as pilot:
            await settle(app, pilot, incident=False, timeout=60)
            # every file parsed; then a live line (the job goes on): the header's counts follow
            # (a history read to its end posts no event of its own: the lead's job-state counts)
            assert await until(pilot, lambda: len(app.engine.job.sources()) == 224, timeout=30)
            with open(f"{root}/logs/job_x1/attempt_0/1999/stdout.log", "a") as fh:
                fh.write("2026-11-29 18:43:09,001 INFO [rank1999/2000] train: step 4/120\n")
            assert await until(pilot, lambda: len(app.state.summary.ranks) == 224, timeout=30), \
                len(app.state.summary.ranks)
            await pilot.pause(0.3)
            text = header(app)
            assert len(text.splitlines()) <= 3, text
            assert "224 ranks (within 0-1999)" in " ".join(text.split())
            log = app.query_one(LogView)
            assert log.buf.gutter == 7
            # the rank is right-aligned in its gutter with room before it: never on the border
            rows = widget_text(log)
            assert rows and all(row.startswith(" ") for row in rows if row.strip()), rows
            app.set_log_filter(1999)
            assert await until(pilot, lambda: log.rank_filter == 1999 and log.row_count > 0)
            await pilot.pause(0.2)
            rows = [row for row in widget_text(log) if row.strip()]
            assert rows and all(row.startswith(" 1999  ") for row in rows), rows

    run(main())


def _footer_fits(app) -> None:
    footer = app.query_one(KeyFooter)
    keys = list(footer.children)
    assert keys and [k.key for k in keys[:2]] == ["q", "question_mark"]
    for k in keys:  # every key shown is whole: none runs past the footer's right edge
        assert k.region.right <= footer.region.right, (k.key, k.region, footer.region)
    text = "".join(widget_text(footer))
    assert not re.search(r"searc\b|▏", text), text


@pytest.mark.parametrize("size", [(80, 24), (120, 36), (200, 60)])
def test_the_footer_shows_only_keys_that_fit(failed_root, size):
    """The footer was cut at '/ searc▏'."""
    async def main():
        app = make_app(failed_root)
        async with app.run_test(size=size) as pilot:
            await settle(app, pilot, incident=False)
            await pilot.pause(0.3)
            _footer_fits(app)

    run(main())


def test_toasts_stay_off_the_fix_panels_border(failed_root):
    async def main():
        app = make_app(failed_root)
        async with app.run_test(size=(120, 36), notifications=True) as pilot:
            await settle(app, pilot)
            app.notify("Copied: df -h -- /scratch (Denpex never runs it)")
            assert await until(pilot, lambda: len(app.screen.query("Toast")) >= 1)
            await pilot.pause(0.3)
            fix = app.query_one("#fix").region
            inner = fix.shrink((1, 1, 1, 1))  # the border is the outermost row and column
            for toast in app.screen.query("Toast"):
                r = toast.region
                assert r.overlaps(fix)
                assert inner.contains_region(r), (r, fix)

    run(main())
