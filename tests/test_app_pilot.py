"""The watch TUI driven with Textual's Pilot: keys, rank filter, copy, explain, state, messages.

The real live engine reads the demo job (written finished) from a temporary folder; assertions
are on the app's state, its messages and ``app.clipboard`` (what OSC 52 would send).
"""

from __future__ import annotations

import asyncio

import pytest
from test_app_support import (fixed_readings, make_app, settle, shown_lines, until, write_failed_job,
                              write_healthy_job)
from textual import events
from textual.geometry import Offset
from textual.selection import Selection

from denpex_tui.app.messages import EngineBatch, ExplainReady, ProbeUpdate
from denpex_tui.app.screens.help import HelpScreen
from denpex_tui.app.widgets.findings import FindingList
from denpex_tui.app.widgets.fixpanel import CommandRow, FixPanel
from denpex_tui.app.widgets.gauges import Gauges
from denpex_tui.app.widgets.logview import LogView
from denpex_tui.app.widgets.ranks import RankTable
from denpex_tui.app.widgets.status import StatusBar


def run(coro):
    return asyncio.run(coro)


@pytest.fixture(scope="module")
def failed_root(tmp_path_factory):
    return write_failed_job(tmp_path_factory.mktemp("failed") / "run01")


def unique(messages, cls) -> list:
    """Each message once (the hook sees a bubbling message at every node it passes)."""
    seen, out = set(), []
    for m in messages:
        if isinstance(m, cls) and id(m) not in seen:
            seen.add(id(m))
            out.append(m)
    return out


def _state_cell(app, rank: int) -> str:
    return app.query_one(RankTable).get_cell(str(rank), "state").plain


def _note_text(log: LogView) -> str:
    return "\n".join(t.plain for notes in log.buf.notes.values() for t in notes)


def test_diagnosis_rank_table_and_folded_findings(failed_root):
    async def main():
        messages = []
        app = make_app(failed_root)
        async with app.run_test(size=(160, 45), message_hook=messages.append) as pilot:
            await settle(app, pilot)
            inc = app.state.incident
            assert inc.initiating.rank == 5 and inc.initiating.signature == "torch.save-write-failed"
            diag = app.query_one(StatusBar)._data[4]
            assert diag.startswith("rank 5 initiating") and "7 collateral" in diag
            assert _state_cell(app, 5) == "▶ FAILED FIRST"
            assert {_state_cell(app, r) for r in (0, 1, 2, 3, 4, 6, 7)} == {"◆ collateral"}
            prompts = [str(o.prompt) for o in app.query_one(FindingList).options]
            assert prompts[0].startswith("▶ FIRST rank 5") and "torch.save-write-failed" in prompts[0]
            peer = [p for p in prompts if "dist.peer-closed" in p]
            assert len(peer) == 1 and "ranks 0-4,6-7" in peer[0]
            # the fix panel shows the initiating finding from the per-rank file (under load the
            # console's copy can come first; the job's merged view then replaces it)
            fix = app.query_one(FixPanel)
            assert await until(pilot, lambda: fix.finding.path.endswith("/5/stderr.log"), timeout=20)
            assert fix.finding.rank == 5
            # engine events arrive batched, not one message per event
            batches = unique(messages, EngineBatch)
            n_events = sum(len(b.events) for b in batches)
            assert batches and len(batches) < n_events

    run(main())


def test_the_history_s_end_comes_with_the_job_summary_as_of_it(failed_root):
    """The header counts the files found while the history is read, then the job's own count:
    a summary still owed when the reading ended made one frame say "7 sources" of 9."""
    from denpex_tui.live.events import HistoryDone

    async def main():
        messages = []
        app = make_app(failed_root)
        async with app.run_test(size=(160, 45), message_hook=messages.append) as pilot:
            await settle(app, pilot)
            batches = unique(messages, EngineBatch)
            done = [b for b in batches if any(isinstance(e, HistoryDone) for e in b.events)]
            assert len(done) == 1 and done[0].summary is not None
            assert done[0].summary.sources == app.state.summary.sources > 1

    run(main())


def test_copy_key_and_click_copy_the_command_exactly(failed_root):
    async def main():
        app = make_app(failed_root)
        async with app.run_test(size=(160, 45)) as pilot:
            await settle(app, pilot)
            rows = app.query_one(FixPanel).commands
            assert len(rows) >= 2
            await pilot.press("c")
            assert app.clipboard == rows[0].command.text
            # the demo's HF Trainer save line gives the checkpoint dir of the failed save
            assert rows[0].command.complete and "/checkpoints/checkpoint-100" in app.clipboard
            toasts = [n.message for n in app._notifications]
            assert any("Copied" in t and "never runs" in t for t in toasts)
            # a click on another command copies that one, byte for byte
            app.clear_notifications()  # the toast sits over the fix panel's corner
            rows[-1].scroll_visible(animate=False)
            await pilot.pause(0.1)
            await pilot.click(rows[-1])
            await pilot.pause(0.1)
            assert app.clipboard == rows[-1].command.text
            # Enter on a focused command row copies it too
            rows[1].focus()
            await pilot.press("enter")
            assert app.clipboard == rows[1].command.text

    run(main())


def test_selecting_a_rank_filters_the_log_view(failed_root):
    async def main():
        messages = []
        app = make_app(failed_root)
        async with app.run_test(size=(160, 45), message_hook=messages.append) as pilot:
            await settle(app, pilot)
            table = app.query_one(RankTable)
            table.focus()
            table.move_cursor(row=table.get_row_index("3"))
            await pilot.press("enter")
            log = app.query_one(LogView)
            assert await until(pilot, lambda: log.rank_filter == 3)
            assert [m.rank for m in unique(messages, RankTable.RankSelected)] == [3]
            shown = shown_lines(log)
            assert shown and all(log.buf.rank_of(ll) == 3 for ll in shown)
            assert "rank 3" in str(app.query_one("#log-box").border_title)
            await pilot.press("a")
            assert await until(pilot, lambda: log.rank_filter is None)
            assert log.row_count > len(shown)

    run(main())


def test_jump_to_initiating_then_explain_with_the_keyboard(failed_root):
    async def main():
        messages = []
        app = make_app(failed_root)
        async with app.run_test(size=(160, 45), message_hook=messages.append) as pilot:
            await settle(app, pilot)
            log = app.query_one(LogView)
            await pilot.press("i")
            seq, ll = log.line_at_cursor()
            f = app.state.incident.initiating
            assert (ll.source, ll.line) == (f.path, f.traceback_start or f.line)
            assert not log.follow
            # move down into the chained traceback and explain it
            for _ in range(12):
                await pilot.press("down")
            await pilot.press("x")
            for _ in range(200):
                await pilot.pause(0.05)
                if log.buf.notes:
                    break
            [ready] = unique(messages, ExplainReady)
            assert ready.explanation.known and ready.explanation.finding.signature == "torch.save-write-failed"
            # the explanation opens right under the traceback's last line (the chained exception)
            anchor = log.buf.line(ready.anchor)
            assert anchor.source == f.path and anchor.line == f.extra["tb_end_line"]
            text = _note_text(log)
            assert "torch.save-write-failed" in text and "raised at" in text and "serialization.py" in text
            assert "$ df -h" in text
            # the fix panel now holds the explained finding, pointing into the real file
            assert app.query_one(FixPanel).finding.path == f.path
            await pilot.press("escape")
            assert not log.buf.notes

    run(main())


def test_unknown_traceback_is_explained_honestly(tmp_path):
    log_file = tmp_path / "rank0.log"
    log_file.write_text(
        "2026-11-29 18:43:01,000 INFO [rank0/1] train: step 1\n"
        "Traceback (most recent call last):\n"
        '  File "/work/train.py", line 12, in <module>\n'
        "    main()\n"
        '  File "/work/frob.py", line 7, in main\n'
        "    raise FrobnicatorError('misaligned')\n"
        "frob.FrobnicatorError: misaligned\n"
        "2026-11-29 18:43:02,000 INFO [rank0/1] train: done\n"
    )

    async def main():
        messages = []
        app = make_app(str(tmp_path))
        async with app.run_test(size=(140, 40), message_hook=messages.append) as pilot:
            await settle(app, pilot, incident=False)
            log = app.query_one(LogView)
            seq = log.buf.seq_of(str(log_file), 4)
            assert log.goto_seq(seq)
            await pilot.press("x")
            for _ in range(200):
                await pilot.pause(0.05)
                if log.buf.notes:
                    break
            [ready] = unique(messages, ExplainReady)
            exp = ready.explanation
            assert not exp.known and exp.finding.exc_type == "frob.FrobnicatorError"
            text = _note_text(log)
            assert "no known signature" in text and "frob.FrobnicatorError" in text
            assert 'File "/work/frob.py", line 7, in main' in text

    run(main())


def test_mouse_selection_of_a_traceback_opens_its_explanation(failed_root):
    async def main():
        messages = []
        app = make_app(failed_root)
        async with app.run_test(size=(160, 45), message_hook=messages.append) as pilot:
            await settle(app, pilot)
            log = app.query_one(LogView)
            f = app.state.incident.initiating
            # the traceback is in the merged timeline (the whole history is); under load the
            # incident may still name the console's copy, hidden by default: show the copies
            if f.path.endswith("console.log"):
                await pilot.press("d")

            def rows():
                s1, s2 = log.buf.seq_of(f.path, f.traceback_start), log.buf.seq_of(f.path, f.extra["tb_end_line"])
                return (None if s1 is None else log.buf.index_of(s1), None if s2 is None else log.buf.index_of(s2))
            assert await until(pilot, lambda: None not in rows())
            first, last = rows()
            # what a mouse drag over those rows leaves behind, then the screen's TextSelected
            app.screen.selections = {log: Selection(Offset(3, first), Offset(10, last))}
            app.screen.post_message(events.TextSelected())
            for _ in range(200):
                await pilot.pause(0.05)
                if log.buf.notes:
                    break
            [ready] = unique(messages, ExplainReady)
            assert ready.explanation.finding.signature == "torch.save-write-failed"
            assert log.buf.line(ready.anchor).line == f.extra["tb_end_line"]
            # ctrl+c copies the selected text itself, and says that ctrl+c again quits
            selected = app.screen.get_selected_text()
            assert selected and "Traceback" in selected
            await pilot.press("ctrl+c")
            assert app.clipboard == selected and app.is_running
            assert any("ctrl+c again" in n.message for n in app._notifications)

    run(main())


def test_ctrl_c_quits_as_q_does(failed_root):
    """Ctrl-C did nothing in watch (Textual binds it to copying a selection) and said nothing."""
    async def main():
        app = make_app(failed_root)
        async with app.run_test(size=(120, 36)) as pilot:
            await settle(app, pilot, incident=False)
            await pilot.press("ctrl+c")
            assert await until(pilot, lambda: not app.is_running, timeout=5)
        # from the search box too (its own ctrl+c copies)
        app = make_app(failed_root)
        async with app.run_test(size=(120, 36)) as pilot:
            await settle(app, pilot, incident=False)
            await pilot.press("slash", "x")
            await pilot.press("ctrl+c")
            assert await until(pilot, lambda: not app.is_running, timeout=5)

    run(main())


def test_findings_navigation_search_and_follow(failed_root):
    async def main():
        app = make_app(failed_root)
        async with app.run_test(size=(160, 45)) as pilot:
            await settle(app, pilot)
            log = app.query_one(LogView)
            assert log.follow
            await pilot.press("f")
            assert not log.follow and not app.query_one(StatusBar)._data[2]
            await pilot.press("g")
            assert log.cursor == 0
            starts = {(f.path, f.traceback_start or f.line) for f in app.state.findings.values()}
            await pilot.press("right_square_bracket")
            _, ll = log.line_at_cursor()
            assert (ll.source, ll.line) in starts
            await pilot.press("slash")
            await pilot.press(*"Connection closed")
            await pilot.press("enter")
            assert await until(pilot, lambda: app._matches is not None)
            _, ll = log.line_at_cursor()
            assert "Connection closed" in ll.text
            await pilot.press("n")
            _, ll2 = log.line_at_cursor()
            assert "Connection closed" in ll2.text and (ll2.source, ll2.line) != (ll.source, ll.line)
            await pilot.press("end")
            assert log.follow and log.cursor == log.row_count - 1

    run(main())


def test_compact_layout_at_80x24_switches_panes(failed_root):
    async def main():
        app = make_app(failed_root)
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(app, pilot)
            assert app.screen.has_class("-compact")
            assert app.query_one("#panebar").display and not app.query_one("#side").display
            assert app.query_one("#log-box").display
            await pilot.press("2")
            assert app.query_one("#side").display and app.query_one("#ranks").display
            assert not app.query_one("#center").display
            await pilot.press("4")
            assert app.query_one("#fix").display and not app.query_one("#log-box").display
            await pilot.resize_terminal(200, 60)
            await pilot.pause(0.1)
            assert app.screen.has_class("-wide") and app.query_one("#side").display

    run(main())


def test_healthy_job_and_probe_gauges(tmp_path):
    root = write_healthy_job(tmp_path / "run")

    async def main():
        app = make_app(root)
        async with app.run_test(size=(120, 40)) as pilot:
            await settle(app, pilot, incident=False)
            level, diag = app.query_one(StatusBar)._data[3:5]
            assert level == "ok" and diag.startswith("healthy · 8 ranks")
            assert {_state_cell(app, r) for r in range(8)} == {"● ok"}
            app.post_message(ProbeUpdate(*fixed_readings(root, near_limits=True)))
            await pilot.pause(0.1)
            text = str(app.query_one(Gauges).render())
            assert "✖ space" in text and "crit" in text  # 98.8 % used: symbol and word, not colour only
            assert "full in ~14 min" in text and "fd limit in ~3 saves" in text
            assert "1015/1024" in text and "deleted-open 37.0 GiB" in text

    run(main())


def test_300_identical_collateral_findings_are_one_row(tmp_path):
    for r in range(300):
        lines = [f"2026-11-29 18:43:0{r % 10},000 INFO [rank{r}/300] train: step 10"]
        if r == 17:
            lines.append("2026-11-29 18:43:10,000 ERROR [rank17/300] train: OSError: [Errno 28] No space left on device: '/ckpt/s.pt'")
        else:
            lines.append(f"2026-11-29 18:53:10,000 ERROR [rank{r}/300] train: [Rank {r}] Watchdog caught collective "
                         "operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
                         "Timeout(ms)=600000) ran for 600046 milliseconds before timing out.")
        (tmp_path / f"rank{r}.log").write_text("\n".join(lines) + "\n")

    async def main():
        app = make_app(str(tmp_path))
        async with app.run_test(size=(160, 45)) as pilot:
            await settle(app, pilot, timeout=40)
            for _ in range(100):  # until every rank's finding is in
                await pilot.pause(0.1)
                coll = [g for g in app.state.groups.values() if g.role == "collateral" and g.severity == "error"]
                if coll and len(coll[0].ranks) == 299:
                    break
            assert len(coll) == 1 and len(coll[0].ranks) == 299
            prompts = [str(o.prompt) for o in app.query_one(FindingList).options]
            rows = [p for p in prompts if coll[0].signature in p]
            assert len(rows) == 1 and "ranks 0-16,18-299" in rows[0]
            assert app.state.incident.initiating.rank == 17

    run(main())


def test_theme_switch_and_unknown_theme(failed_root):
    async def main():
        app = make_app(failed_root, theme="denpex-high-contrast")
        async with app.run_test(size=(120, 36)) as pilot:
            assert app.theme == "denpex-high-contrast"
            seen = set()
            for _ in range(3):
                await pilot.press("t")
                seen.add(app.theme)
            assert seen == {"denpex-dark", "denpex-light", "denpex-high-contrast"}
            assert app.theme == "denpex-high-contrast"
        app = make_app(failed_root, theme="no-such-theme")
        async with app.run_test(size=(120, 36)) as pilot:
            await pilot.pause(0.05)
            assert app.theme == "denpex-dark"
            assert any("no theme named 'no-such-theme'" in n.message for n in app._notifications)

    run(main())


def test_help_lists_every_key_and_the_tmux_clipboard_setting(failed_root):
    async def main():
        app = make_app(failed_root)
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.press("question_mark")
            await pilot.pause(0.1)
            text = "\n".join(str(w.render()) for w in app.screen.query("Static"))
            for b in app.BINDINGS + LogView.BINDINGS + CommandRow.BINDINGS:
                assert b.description in text, b.description
            assert "set -g set-clipboard on" in text and "OSC 52" in text
            assert isinstance(app.screen, HelpScreen)
            assert "?" in text and "right_square_bracket" not in text  # keys as people type them
            await pilot.press("escape")
            await pilot.pause(0.1)
            assert not isinstance(app.screen, HelpScreen)

    run(main())


def test_no_color_is_respected(failed_root, monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")

    async def main():
        app = make_app(failed_root)
        async with app.run_test(size=(120, 36)) as pilot:
            await settle(app, pilot)
            assert app.no_color
            svg = app.export_screenshot()
            # monochrome: every colour in the SVG is a grey (r == g == b)
            import re

            cols = set(re.findall(r"#([0-9a-f]{6})", svg))
            greys = {c for c in cols if c[0:2] == c[2:4] == c[4:6]}
            chrome = {"ff5f57", "febc2e", "28c840", "c5c8c6"}  # the SVG window's dots and title
            assert cols - greys <= chrome

    run(main())
