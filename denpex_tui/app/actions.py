"""The app's actions: log navigation, search, rank filter, copy, explain in place, panes,
help and themes. A mixin of :class:`~denpex_tui.app.app.DenpexApp` (kept apart so each module
stays small); everything long-running goes to a worker that posts a message.
"""

from __future__ import annotations

from textual import work
from textual.widgets import Input

from . import explaining
from .messages import ExplainReady
from .screens.help import HelpScreen
from .widgets.explain import explanation_lines
from .widgets.findings import FindingList
from .widgets.fixpanel import CommandRow, FixPanel
from .widgets.logview import LogView
from .widgets.ranks import RankTable

__all__ = ["WatchActions", "PANES", "PANE_WIDGET"]

PANES = ("log", "ranks", "findings", "fix", "gauges")
PANE_WIDGET = {"log": "#log", "ranks": "#ranks", "findings": "#findings", "fix": "#fix", "gauges": "#gauges-box"}


class WatchActions:
    """Handlers here use Textual's naming convention (``on_<widget>_<message>``): ``@on``
    decorators are only collected from the App class itself, not from a mixin."""
    # -- copy --------------------------------------------------------------------------------

    def on_command_row_copy(self, msg: CommandRow.Copy) -> None:
        self.copy_command(msg.command)

    def copy_command(self, cmd) -> None:
        self.copy_to_clipboard(cmd.text)
        todo = tuple(dict.fromkeys(cmd.missing + cmd.refused))
        note = f" · fill in {', '.join(f'<{m}>' for m in todo)} before running it" if todo else ""
        pack = "" if cmd.builtin else f" [user pack: {cmd.pack}]"
        self.notify(f"Copied ({len(cmd.text)} chars): {cmd.title}{pack}{note}. Denpex never runs it.",
                    severity="warning" if todo else "information", timeout=6)

    def action_copy(self) -> None:
        cmd = self.query_one(FixPanel).current_command()
        if cmd is None:
            self.notify("no command to copy: the fix panel is empty", severity="warning")
            return
        self.copy_command(cmd)

    # -- findings, ranks, log navigation -----------------------------------------------------

    def on_finding_list_chosen(self, msg: FindingList.Chosen) -> None:
        f = msg.group.first
        if f is None:
            return
        self._fix_pinned = True
        self.show_fix(f, "finding")
        if msg.jump:
            self.jump_to(f.path, f.traceback_start or f.line, rank=f.rank)

    def on_rank_table_rank_selected(self, msg: RankTable.RankSelected) -> None:
        self.query_one(LogView).set_filter(rank=msg.rank)
        if self.screen.has_class("-compact"):
            self.action_pane("log")
        self._refresh()

    def on_log_view_follow_changed(self, msg: LogView.FollowChanged) -> None:
        self._refresh()

    def jump_to(self, path: str, line: int, rank: int | None = None) -> bool:
        log = self.query_one(LogView)
        seq = log.buf.seq_of(path, line)
        if seq is None:
            self.notify(f"{path}:{line} is not in the view's buffer any more", severity="warning")
            return False
        if not log.goto_seq(seq, center=True):
            log.set_filter(rank=rank if rank is not None else log.buf.rank_of(log.buf.line(seq)), hide_copies=False)
            log.goto_seq(seq, center=True)
        if self.screen.has_class("-compact"):
            self.action_pane("log")
        else:
            log.focus()
        self._refresh()
        return True

    def action_initiating(self) -> None:
        inc = self.state.incident
        if inc is None or inc.initiating is None:
            self.notify("no initiating finding yet", severity="warning")
            return
        f = inc.initiating
        if self.jump_to(f.path, f.traceback_start or f.line, rank=f.rank):
            self._fix_pinned = False
            self.show_fix(f, "incident")

    def action_finding(self, step: int) -> None:
        log = self.query_one(LogView)
        starts = {(f.path, f.traceback_start or f.line) for f in self.state.findings.values()}
        row = log.buf.find_row(log.cursor, step, lambda ll: (ll.source, ll.line) in starts)
        if row is None:
            self.notify("no more findings " + ("below" if step > 0 else "above"))
            return
        log._set_follow(False)
        log.move_cursor(row)

    def action_toggle_follow(self) -> None:
        log = self.query_one(LogView)
        if log.follow:
            log._set_follow(False)
        else:
            log.follow_end()
        self._refresh()

    def action_all_ranks(self) -> None:
        self.query_one(LogView).set_filter(rank=None, hide_copies=True)
        self._refresh()

    def action_toggle_copies(self) -> None:
        log = self.query_one(LogView)
        log.set_filter(rank=log.rank_filter, hide_copies=not log.hide_copies)
        self.notify("console copies " + ("hidden" if log.hide_copies else "shown"))

    def action_search(self) -> None:
        if self.screen.has_class("-compact"):
            self.action_pane("log")
        box = self.query_one("#search", Input)
        box.display = True
        box.focus()

    def on_input_submitted(self, msg: Input.Submitted) -> None:
        if msg.input.id != "search":
            return
        log = self.query_one(LogView)
        log.set_search(msg.value)
        msg.input.display = False
        log.focus()
        if msg.value:
            self.action_search_next(1)

    def action_search_next(self, step: int) -> None:
        log = self.query_one(LogView)
        q = log.search_text.lower()
        if not q:
            self.action_search()
            return
        row = log.buf.find_row(log.cursor, step, lambda ll: q in ll.text.lower())
        if row is None:
            self.notify(f"{log.search_text!r}: no more matches " + ("below" if step > 0 else "above"))
            return
        log._set_follow(False)
        log.move_cursor(row)

    def action_escape(self) -> None:
        box = self.query_one("#search", Input)
        log = self.query_one(LogView)
        if box.display:
            box.display = False
            log.focus()
        elif log.clear_notes():
            pass
        elif log.rank_filter is not None:
            self.action_all_ranks()

    def action_pane(self, pane: str) -> None:
        self.pane = pane
        self._layout()
        self.query_one(PANE_WIDGET[pane]).focus()

    def action_help(self) -> None:
        self.push_screen(HelpScreen([("Keys", list(self.BINDINGS)), ("Log view", list(LogView.BINDINGS)),
                                     ("Fix panel", list(CommandRow.BINDINGS))]))

    def action_next_theme(self) -> None:
        names = self._theme_names or [self.theme]
        nxt = names[(names.index(self.theme) + 1) % len(names)] if self.theme in names else names[0]
        self.theme = nxt
        self.notify(f"theme: {nxt}", timeout=2)

    # -- explain in place --------------------------------------------------------------------

    def action_explain(self) -> None:
        log = self.query_one(LogView)
        at = log.line_at_cursor()
        if at is None:
            self.notify("no log line here to explain", severity="warning")
            return
        seq, ll = at
        rank = log.buf.rank_of(ll)
        block = explaining.block_of(self.state.findings.values(), ll.source, ll.line)
        if block is not None:
            first, last, f = block
        else:
            first, last = ll.line - explaining.WINDOW, ll.line + explaining.WINDOW // 4
        lines = [x for x in log.buf.lines_of(ll.source, first, last) if log.buf.rank_of(x) in (rank, None)]
        self._explain(lines, ll.source, rank)

    def on_text_selected(self, event) -> None:
        """A mouse selection of two lines or more in the log view is explained in place."""
        log = self.query_one(LogView)
        lines = log.selected_lines()
        if len(lines) >= 2:
            src = lines[-1].source
            self._explain([x for x in lines if x.source == src], src, log.buf.rank_of(lines[-1]))

    @work(group="explain", exclusive=True, exit_on_error=False)
    async def _explain(self, lines: list, source: str, rank: int | None) -> None:
        if not lines:
            return
        log = self.query_one(LogView)
        anchor = log.buf.seq_of(source, lines[-1].line)
        exp = await self.engine.call(explaining.explain_excerpt, [x.text for x in lines], lines[0].line, source, rank,
                                     self.engine.matcher, self.engine.job)
        if anchor is not None:
            self.post_message(ExplainReady(anchor, exp, source, lines[0].line, lines[-1].line))

    async def on_explain_ready(self, msg: ExplainReady) -> None:
        log = self.query_one(LogView)
        exp = msg.explanation
        width = max(40, log.scrollable_content_region.width - 8)
        log.add_note(msg.anchor, explanation_lines(exp, width))
        if exp.finding is not None:
            self._fix_pinned = True
            key = ("explain", msg.source, msg.first_line)
            self._fix_key, self._fix_finding = key, exp.finding
            if exp.panel is not None:
                await self.query_one(FixPanel).show(exp.finding, exp.panel, None, "explain")
