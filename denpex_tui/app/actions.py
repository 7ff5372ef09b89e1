"""The app's actions: log navigation, search, rank filter, copy, explain in place, panes,
help and themes. A mixin of :class:`~denpex_tui.app.app.DenpexApp` (kept apart so each module
stays small); everything long-running goes to a worker that posts a message.
"""

from __future__ import annotations

from textual.css.query import NoMatches

from textual import work
from textual.widgets import Input

import bisect

from . import explaining
from .messages import ExplainReady, SearchDone
from .search import SearchQuery, compile_query
from .screens.help import NAVIGATION, HelpScreen
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
        self.set_log_filter(msg.rank, True)
        if self.screen.has_class("-compact"):
            self.action_pane("log")
        self._refresh()

    def on_log_view_follow_changed(self, msg: LogView.FollowChanged) -> None:
        self._refresh()

    def jump_to(self, path: str, line: int, rank: int | None = None) -> bool:
        log = self.query_one(LogView)
        seq = log.buf.seq_of(path, line)
        if seq is None:
            self.notify(f"{path}:{line} is not in the timeline yet (still indexing)", severity="warning")
            return False
        if not log.goto_seq(seq, center=True):  # hidden by the filter: show it with its rank
            self.set_log_filter(rank if rank is not None else log.buf.rank_of(log.buf.line(seq)), False, jump=seq)
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
        rows = sorted(i for f in self.state.findings.values()
                      if (seq := log.buf.seq_of(f.path, f.traceback_start or f.line)) is not None
                      and (i := log.buf.index_of(seq)) is not None)
        after = [i for i in rows if (i > log.cursor if step > 0 else i < log.cursor)]
        row = (after[0] if step > 0 else after[-1]) if after else None
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
        self.set_log_filter(None, True)
        self._refresh()

    def action_toggle_copies(self) -> None:
        rank, hide = self._want_view
        self.set_log_filter(rank, not hide)
        self.notify("console copies " + ("shown" if hide else "hidden"))

    def action_search(self) -> None:
        if self.screen.has_class("-compact"):
            self.action_pane("log")
        box = self.query_one("#search", Input)
        self._search_placeholder()
        box.display = True
        box.focus()

    def _search_placeholder(self) -> None:
        case = "on" if self._search_case else "smart"
        try:
            box = self.query_one("#search", Input)
        except NoMatches:
            return
        box.placeholder = (
            f"search {'RE2 regex' if self._search_regex else 'plain text'} (ctrl+r), case {case} (ctrl+t)"
            " · Enter finds, Esc closes")

    def action_search_regex(self) -> None:
        self._search_regex = not self._search_regex
        self._search_placeholder()

    def action_search_case(self) -> None:
        self._search_case = not self._search_case
        self._search_placeholder()

    def on_input_submitted(self, msg: Input.Submitted) -> None:
        if msg.input.id != "search":
            return
        log = self.query_one(LogView)
        msg.input.display = False
        log.focus()
        text = msg.value
        if not text:
            log.set_search("", None)
            self._search_q, self._matches = None, None
            self._search_status("")
            return
        case = self._search_case or (text != text.lower())  # smart case, as lnav and vim
        q = SearchQuery(text, regex=self._search_regex, case=case)
        try:
            rx = compile_query(q, text=True)
        except ValueError as exc:
            self.notify(str(exc), severity="error")
            return
        log.set_search(text, rx)
        self._search_q, self._matches, self._search_rx = q, None, rx
        self._search_follow = log.follow  # following: the newest match first
        self._search_gen = self.timeline_worker.search(q)
        self._search_status(f"searching {q.describe()} …")

    def _search_status(self, text: str) -> None:
        box = self.query_one("#log-box")
        if box.border_subtitle != text:
            box.border_subtitle = text

    def on_search_done(self, msg: SearchDone) -> None:
        if self._exit or not self.is_running or msg.gen != self._search_gen:
            return
        if msg.matches.error:
            self.notify(msg.matches.error, severity="error")
            self._search_status("")
            return
        self._matches = msg.matches
        self._visible_matches = None
        if self._search_follow:
            self._search_step(-1, from_end=True)
        else:
            self._search_step(1, inclusive=True)

    def _visible(self) -> list[int]:
        """The matching rows the current filter shows (their merged seqs, ascending)."""
        log = self.query_one(LogView)
        key = (id(log.buf.view), log.buf.shown)
        if self._visible_matches is None or self._visible_matches[0] != key:
            seqs = [s for s in self._matches.seqs if log.buf.view.index_of(s, log.buf.tl.rows) is not None]
            self._visible_matches = (key, seqs)
        return self._visible_matches[1]

    def action_search_next(self, step: int) -> None:
        if self._search_q is None:
            self.action_search()
            return
        if self._matches is None:
            self.notify("still searching the whole history…", timeout=2)
            return
        self._search_step(step)

    def _search_step(self, step: int, *, from_end: bool = False, inclusive: bool = False) -> None:
        log = self.query_one(LogView)
        seqs = self._visible()
        q = self._search_q
        more = "" if self._matches.complete else "+"
        if not seqs:
            self._search_status(f"{q.describe()}: no match")
            self.notify(f"{q.text!r}: no match in the whole timeline", severity="warning")
            return
        at = log.line_at_cursor()
        cur = at[0] if at else 0
        wrapped = ""
        if from_end:
            k = len(seqs) - 1
        elif step > 0:
            k = bisect.bisect_left(seqs, cur) if inclusive else bisect.bisect_right(seqs, cur)
            if k >= len(seqs):
                k, wrapped = 0, "search hit the bottom, continuing at the top"
        else:
            k = bisect.bisect_left(seqs, cur) - 1
            if k < 0:
                k, wrapped = len(seqs) - 1, "search hit the top, continuing at the bottom"
        log.clear_notes()
        log.goto_seq(seqs[k], center=True)
        ll = log.buf.line(seqs[k])
        if ll is not None and self._search_rx is not None:
            m = self._search_rx.search(ll.text.expandtabs(8))
            if m is not None:
                log.pan_to(m.start(), max(1, m.end() - m.start()))
            else:
                log.pan_to(0)
        self._search_status(f"{q.describe()}: {k + 1} of {len(seqs)}{more}")
        if wrapped:
            self.notify(wrapped, timeout=3)
        self._refresh()

    def action_escape(self) -> None:
        try:
            box = self.query_one("#search", Input)
            log = self.query_one(LogView)
        except NoMatches:  # a terminal's reply read as ESC while the app tears down
            return
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
                                     ("Fix panel", list(CommandRow.BINDINGS)), ("Moving around", NAVIGATION)]))

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
        if exp.finding is not None and exp.panel is not None:
            self._fix_pinned = True
            shown = self._fix_finding
            if shown is not None and (shown.path, shown.signature) == (exp.finding.path, exp.finding.signature) and \
                    explaining.block_of([shown], exp.finding.path, exp.finding.text_line) is not None:
                return  # the finding on show already, with its measurements: keep them
            self.show_fix(exp.finding, "explain")  # measured like any finding, never a bare panel
