"""Search like lnav's, error/warning navigation, the incident summary, wrap, and a screen that
fits: Pilot tests on the demo job (written finished) and the corpus."""

from __future__ import annotations

import asyncio

import pytest
from test_app_support import fixed_readings, make_app, settle, until, widget_text, write_failed_job

from denpex_tui.app.messages import ProbeUpdate
from denpex_tui.app.screens.help import HelpScreen
from denpex_tui.app.widgets.logview import LogView
from denpex_tui.app.widgets.status import StatusBar


@pytest.fixture(scope="module")
def failed_root(tmp_path_factory):
    return write_failed_job(tmp_path_factory.mktemp("keys") / "run01")


def run(coro):
    return asyncio.run(coro)


def _subtitle(app) -> str:
    return str(app.query_one("#log-box").border_subtitle)


def test_search_counts_wraps_pans_and_highlights_every_match(failed_root):
    async def main():
        app = make_app(failed_root)
        async with app.run_test(size=(120, 36)) as pilot:
            await settle(app, pilot)
            log = app.query_one(LogView)
            assert log.follow
            await pilot.press("slash", *"connection closed", "enter")  # plain, smart case: any case
            assert await until(pilot, lambda: app._matches is not None)
            # following: the newest match first; 7 collateral ranks each logged it once (per-rank files)
            assert _subtitle(app) == "connection closed: 7 of 7"
            _, ll = log.line_at_cursor()
            assert "Connection closed by peer" in ll.text
            # the match is beyond 120 columns: the view panned to it
            col = ll.text.lower().index("connection closed")
            assert log.scroll_x <= col < log.scroll_x + log.size.width
            await pilot.press("n")  # past the last: wraps to the first, and says so
            assert _subtitle(app) == "connection closed: 1 of 7"
            assert any("search hit the bottom, continuing at the top" in n.message for n in app._notifications)
            await pilot.press("N")
            assert _subtitle(app) == "connection closed: 7 of 7"
            # every match on screen is highlighted (the match style on its span)
            strip = log.render_line(log.cursor - int(log.scroll_y))
            assert any("Connection" in seg.text and seg.style and seg.style.bgcolor for seg in strip)
            # an RE2 regex, case-sensitive (ctrl+t), and a bad pattern is one clear line
            await pilot.press("slash", "ctrl+r", "ctrl+t")
            box = app.query_one("#search")
            box.value = r"rank[0-9]+\]: RuntimeError: \[enforce"
            await pilot.press("enter")
            assert await until(pilot, lambda: app._matches is not None)
            assert _subtitle(app).endswith(": 1 of 1")
            await pilot.press("slash")
            box.value = "(unclosed"
            await pilot.press("enter")
            assert any("not a valid RE2 pattern" in n.message for n in app._notifications)

    run(main())


def test_error_and_warning_lines_and_the_incident_summary(failed_root):
    async def main():
        app = make_app(failed_root)
        async with app.run_test(size=(160, 45)) as pilot:
            await settle(app, pilot)
            log = app.query_one(LogView)
            await pilot.press("g", "e")
            assert await until(pilot, lambda: "error" in app._levels)
            _, ll = log.line_at_cursor()
            assert "Traceback" in ll.text or "ERROR" in ll.text or ll.text.lstrip("[").startswith("E")
            first = log.cursor
            await pilot.press("e")
            assert log.cursor > first
            await pilot.press("ctrl+e")  # previous error line (E is the evidence bundle)
            assert log.cursor == first
            await pilot.press("g", "w")
            assert await until(pilot, lambda: "warning" in app._levels)
            _, ll = log.line_at_cursor()
            assert ll.text.startswith("W1129") or "WARN" in ll.text
            await pilot.press("y")
            text = app.clipboard
            f = app.state.incident.initiating
            assert text.startswith("denpex: rank 5 initiating: torch.save could not write")
            assert f"{f.path}:{f.text_line}" in text and "collateral" in text and "$ df -h" in text
            assert "\x1b" not in text

    run(main())


def test_two_line_diagnosis_and_panes_that_keep_their_size_at_120x36(failed_root):
    async def main():
        app = make_app(failed_root, probes=True, probe_interval=3600)
        async with app.run_test(size=(120, 36)) as pilot:
            await settle(app, pilot)
            bar = "\n".join(widget_text(app.query_one(StatusBar)))
            diag = app.query_one(StatusBar)._data[4]
            assert len(diag) > 118  # longer than a line: it gets two, nothing is cut
            flat = " ".join(bar.split())
            assert "7 collateral" in flat and "confidence high" in flat
            assert "…" not in bar
            regions = {w: app.query_one(w).region for w in ("#ranks", "#findings", "#log-box", "#gauges-box")}
            app.post_message(ProbeUpdate(*fixed_readings(failed_root)))
            await pilot.pause(0.3)
            app.post_message(ProbeUpdate(*fixed_readings(failed_root, near_limits=False)))
            await pilot.pause(0.3)
            assert {w: app.query_one(w).region for w in regions} == regions

    run(main())


def test_z_wraps_long_lines_and_help_lists_every_key(failed_root):
    async def main():
        app = make_app(failed_root)
        async with app.run_test(size=(100, 30)) as pilot:
            await settle(app, pilot)
            log = app.query_one(LogView)
            log.focus()
            await pilot.press("slash", *"GLHF", "enter")
            assert await until(pilot, lambda: app._matches is not None)
            await pilot.press("z")
            assert log.wrap
            await pilot.pause(0.1)
            lines = widget_text(log)
            at = next(i for i, t in enumerate(lines) if "RuntimeError: [/__w/pytorch" in t)
            assert "↪" in lines[at + 1]  # the rest of the long line on the next screen line
            await pilot.press("z")
            assert not log.wrap and any(t.rstrip().endswith("→") for t in widget_text(log))
            await pilot.press("question_mark")
            await pilot.pause(0.1)
            assert isinstance(app.screen, HelpScreen)
            text = "\n".join(str(w.content.plain) for w in app.screen.query("Static") if hasattr(w.content, "plain"))
            for key in ("Enter", "Tab", "Shift+Tab", "mouse click", "mouse wheel", "mouse drag",
                        "next error line", "previous warning line", "copy the incident summary",
                        "wrap long lines", "ctrl+r", "ctrl+t"):
                assert key in text, key

    run(main())
