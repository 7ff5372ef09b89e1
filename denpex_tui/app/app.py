"""``denpex watch``: the Textual app, a thin view over the live engine and the probes.

Wiring only. Workers (the engine feed, the probe thread, explain and fix-panel jobs) post
messages; the handlers here own every state change; widgets draw. No parsing, no triage.
"""

from __future__ import annotations

from textual.css.query import NoMatches

import functools
import time
from typing import Any

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Container, Horizontal, Vertical, VerticalScroll
from textual.widgets import Input, Static

from denpex_tui.core.catalog import Catalog
from denpex_tui.core.model import Finding
from denpex_tui.core.text import safe_str
from denpex_tui.core.words import count
from denpex_tui.live.engine import Engine
from denpex_tui.live.events import FindingEvent, HistoryDone, HistoryProgress, IncidentEvent, LinesEvent
from denpex_tui.live.proctable import ProcessEvent
from denpex_tui.live.sources import SourceEvent
from denpex_tui.live.stall import StallCleared, StallEvent

from .actions import PANES, WatchActions
from .levels import LevelActions
from .feed import feed
from .fixfeed import FixFeed
from .messages import EngineBatch, EngineDone, ProbeUpdate, TimelineChanged, ViewReady
from .model import WatchState
from .options import WatchOptions, watch_engine
from .probing import ProbeLoop
from .timeline import Timeline
from .timelinework import TimelineWorker
from .remote import RemoteProbeLoop, rank_processes, skew_note
from .theming import DEFAULT_THEME, VARIABLE_DEFAULTS, load_themes
from .widgets.findings import FindingList
from .widgets.fixpanel import FixPanel
from .widgets.footer import KeyFooter
from .widgets.gauges import Gauges
from .widgets.logview import LogView, Mark
from .widgets.ranks import RankTable
from .widgets.status import StatusBar, fmt_elapsed

__all__ = ["DenpexApp", "WatchOptions"]



class DenpexApp(FixFeed, LevelActions, WatchActions, App):
    TITLE = "denpex watch"
    CSS_PATH = "app.tcss"
    BINDINGS = [
        Binding("q", "quit", "quit"),
        # Textual binds ctrl+c to the screen's copy (and, with nothing selected, to a hint whose
        # markup our toasts do not parse): in a terminal tool it quits, after copying a selection
        Binding("ctrl+c", "interrupt", "quit (copies a mouse selection first)", show=False, priority=True),
        Binding("question_mark,f1", "help", "help"),
        # the footer shows, in this order, the keys that fit its width (widgets/footer.py)
        Binding("slash", "search", "search"),
        Binding("x", "explain", "explain"),
        Binding("c", "copy", "copy cmd"),
        Binding("i", "initiating", "initiating line"),
        Binding("right_square_bracket", "finding(1)", "next finding"),
        Binding("left_square_bracket", "finding(-1)", "prev finding"),
        Binding("f", "toggle_follow", "follow"),
        Binding("e", "level('error', 1)", "next error line (any rank)", show=False),
        Binding("ctrl+e", "level('error', -1)", "previous error line (E writes an evidence bundle)", show=False),
        Binding("w", "level('warning', 1)", "next warning line", show=False),
        Binding("W", "level('warning', -1)", "previous warning line", show=False),
        Binding("y", "copy_summary", "copy the incident summary (plain text, for a ticket)", show=False),
        Binding("n", "search_next(1)", "next match", show=False),
        Binding("N", "search_next(-1)", "previous match", show=False),
        Binding("ctrl+r", "search_regex", "search: regex on/off", show=False),
        Binding("ctrl+t", "search_case", "search: case-sensitive on/off", show=False),
        Binding("a", "all_ranks", "all ranks", show=False),
        Binding("d", "toggle_copies", "show/hide the console's copies of per-rank lines", show=False),
        Binding("t", "next_theme", "theme", show=False),
        Binding("escape", "escape", "close explanation / search / rank filter", show=False),
        *(Binding(str(i + 1), f"pane('{p}')", f"pane: {p}", show=False) for i, p in enumerate(PANES)),
        Binding("E", "evidence", "write an evidence bundle of the watched logs", show=False),
        Binding("s", "stacks", "stacks of the job's processes, grouped (py-spy, else /proc)", show=False),
    ]

    def __init__(self, options: WatchOptions, catalog: Catalog, *, engine: Engine | None = None) -> None:
        super().__init__()
        self.options = options
        self.catalog = catalog
        self.engine = engine or watch_engine(options, catalog)
        if hasattr(self.engine, "start_history"):  # the history is read while the UI starts up
            self.engine.start_history()
        self.state = WatchState()
        self.state.root = options.root
        self.probe = ProbeLoop(pids=options.pids, paths=options.probe_paths, discover=options.discover,
                               interval=options.probe_interval, job_paths=options.paths,
                               all_users=options.all_users, prober_factory=self._demo_prober(options)) \
            if options.probes else None
        if options.probe_specs:
            self.probe = RemoteProbeLoop(options.probe_specs, answer_timeout=options.probe_wait)
        self._rank_procs: dict = {}
        self._fix_cwd: tuple[int, str] | None = None  # the rank's cwd the fix panel was made with
        self._skew_note: str | None = None
        self.started = options.clock() if options.started is None else options.started
        self.timeline = Timeline()
        self.timeline_worker = TimelineWorker(self.timeline, options.paths, self.post_message)
        self._want_view: tuple[int | None, bool] = (None, True)
        self._pending_jump: int | None = None
        self._rank_map: dict = {}
        self._last_lines = time.monotonic()
        self._search_q = None
        self._search_rx = None
        self._search_regex = False
        self._search_case = False
        self._search_gen = 0
        self._search_follow = False
        self._matches = None
        self._visible_matches = None
        self._levels: dict = {}
        self._level_pending = None
        self.pane = "log"
        self.engine_done = False
        self._fix_key: Any = None
        self._fix_finding: Finding | None = None
        self._fix_origin = "incident"
        self._fix_pinned = False
        self._metrics: dict[Any, tuple] = {}
        self._incident_key: Any = None
        self._theme_names: list[str] = []
        self._gauge_alert = ""
        themes, self.theme_problems = load_themes()
        for th in themes:
            self.register_theme(th)
            self._theme_names.append(th.name)

    @staticmethod
    def _demo_prober(options: WatchOptions):
        if options.demo_root is None:
            return None
        from .demodisk import DemoProber

        return lambda: DemoProber(options.demo_root, pids=None, paths=options.probe_paths, discover=False)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # a key while the app tears down (or a terminal's reply parsed as ESC once the app
        # exits on a signal) must not reach actions whose widgets are gone (NoMatches)
        if self._exit or not self.is_running:
            return False
        return super().check_action(action, parameters)

    def get_theme_variable_defaults(self) -> dict[str, str]:
        return dict(VARIABLE_DEFAULTS)

    # -- layout ------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield StatusBar(id="status")
        yield Static(id="panebar")
        with Horizontal(id="body"):
            with Vertical(id="side"):
                yield RankTable(id="ranks", remote=bool(self.options.probe_specs))
                yield FindingList(id="findings")
                with VerticalScroll(id="gauges-box"):
                    yield Gauges(id="gauges")
            with Container(id="center"):
                with Vertical(id="log-box"):
                    yield LogView(id="log", timeline=self.timeline)
                    yield Input(placeholder="search: Enter finds, Esc closes", id="search")
                yield FixPanel(id="fix")
        yield KeyFooter()

    def on_mount(self) -> None:
        want = self.options.theme or DEFAULT_THEME
        if want in self.available_themes:
            self.theme = want
        else:
            self.theme = DEFAULT_THEME if DEFAULT_THEME in self.available_themes else "textual-dark"
            self.notify(f"no theme named {want!r}; using {self.theme}", severity="warning")
        for p in self.theme_problems:
            self.notify(p, title="theme", severity="warning")
        try:
            for wid, title in (("#ranks", "Ranks"), ("#findings", "Findings"), ("#gauges-box", "Gauges"),
                               ("#log-box", "Log"), ("#fix", "Fix")):
                self.query_one(wid).border_title = title
            self.query_one("#search").display = False
        except NoMatches:  # a signal ended the app while it was still mounting
            return
        self._layout()
        self.query_one(LogView).focus()
        if self.options.notice:
            self.notify(self.options.notice, timeout=8)
        if self.probe is None:
            self.query_one(Gauges).set_note("probes off")
        else:
            self.run_worker(functools.partial(self.probe.run, self.post_message), thread=True, group="probe",
                            exit_on_error=False, name="probes")
        self.timeline_worker.start()
        self.run_worker(feed(self.engine, self.post_message), group="engine", exit_on_error=False, name="engine")
        self.set_interval(1.0, self._tick)
        self.theme_changed_signal.subscribe(self, lambda _t: self._refresh(force=True))
        self._refresh()

    def notify(self, message: str, *, title: str = "", severity: str = "information",  # type: ignore[override]
               timeout: float | None = None, markup: bool = False) -> None:
        """Every toast goes through core/text.py and is never parsed as markup: its text names
        files, folders and pack commands ('[x=a:b]' in a title crashed the app)."""
        super().notify(safe_str(message), title=safe_str(title), severity=severity,  # type: ignore[arg-type]
                       timeout=timeout, markup=False)

    def on_unmount(self) -> None:
        self.engine.stop()
        self.timeline_worker.stop()
        if self.probe is not None:
            self.probe.stop()

    def on_resize(self) -> None:
        self._layout()
        self.call_after_refresh(self._layout)  # again once the new size is in place

    def _layout(self) -> None:
        w, h = self.size
        mode = "compact" if (w < 100 or h < 28) else ("wide" if w >= 160 and h >= 36 else "medium")
        scr = self.screen
        for m in ("compact", "medium", "wide"):
            scr.set_class(m == mode, f"-{m}")
        for p in PANES:
            scr.set_class(p == self.pane, f"-pane-{p}")
        bar = " ".join(f"[{i + 1}] {p}" if p != self.pane else f"[{i + 1} {p.upper()}]" for i, p in enumerate(PANES))
        self.query_one("#panebar", Static).update(bar)

    # -- engine events -----------------------------------------------------------------------

    def on_engine_batch(self, msg: EngineBatch) -> None:
        if self._exit or not self.is_running:  # a worker message arriving while the app tears down
            return
        st = self.state
        findings: list[Finding] = []
        incidents = None
        lines = []
        spoke: dict[int, float] = {}
        arrived: float | None = None
        for ev in msg.events:
            if isinstance(ev, LinesEvent):
                lines.extend(ev.lines)
                if not ev.history:  # a line's age counts from its arrival, not from its log's clock
                    now = arrived = self.options.clock()
                    for ln in ev.lines:
                        r = ln.rank if ln.rank is not None else self._rank(("local", ln.node_key, ln.local))
                        if r is not None:
                            spoke[r] = now
            elif isinstance(ev, FindingEvent):
                findings.append(ev.finding)
            elif isinstance(ev, IncidentEvent):
                incidents = ev.incidents
            elif isinstance(ev, HistoryProgress):
                st.reading(ev.read, ev.total, ev.sources)
            elif isinstance(ev, HistoryDone):
                st.read_all(ev.read, ev.total)
                self.timeline_worker.history(ev.indexes, ev.infos)
                for w in ev.warnings:
                    self.notify(w, title="source", severity="warning")
            elif isinstance(ev, ProcessEvent):
                st.process(ev.rank, ev.state)
            elif isinstance(ev, StallEvent):
                st.stall(self._rank(ev.rank), ev.silent_s)
            elif isinstance(ev, StallCleared):
                st.stall(self._rank(ev.rank), None)
            elif isinstance(ev, SourceEvent):
                if ev.kind == "file":  # is the name still the file indexed? (its old lines, a new one's)
                    self.timeline_worker.recheck([ev.path])
                if ev.state in ("error", "possibly-lost", "deleted"):
                    self.notify(f"{ev.path}: {ev.state} {ev.detail}".strip(), title="source", severity="warning")
        st.add_findings(findings)
        if spoke or arrived is not None:
            st.saw_lines(spoke, arrived)
        if incidents is not None:
            st.set_incidents(incidents)
        if msg.summary is not None:  # newer than the events of the batch: applied last
            s = msg.summary
            st.set_summary(s, self.options.clock())
            if s.rank_map != self._rank_map:
                self._rank_map = dict(s.rank_map)
                self.timeline_worker.rank_map(s.rank_map)
            if self.probe is not None:
                self.probe.lines(s.markers)
        if findings or incidents is not None or msg.summary is not None:
            self._marks()
            if self.probe is not None:
                self.probe.lines([(f.raw_text or f.text, f.path, f.text_line, f.rank, None) for f in findings])
        self.timeline_worker.lines(lines)
        if lines:
            self._last_lines = time.monotonic()
        inc = st.incident
        key = (inc.attempt, inc.initiating.signature, inc.initiating.rank, inc.initiating.path,
               inc.initiating.line) if inc and inc.initiating else None
        if key is not None and key != self._incident_key:
            self._incident_key = key
            st_ = st.story
            if st_ is not None:
                self.notify_change(st_.headline)
            if not self._fix_pinned:
                self.show_fix(inc.initiating, "incident")
        self._refresh()

    def on_timeline_changed(self, msg: TimelineChanged) -> None:
        if self._exit or not self.is_running:
            return
        if msg.error:
            self.notify(f"the log view's index stopped: {msg.error}", severity="error", timeout=30)
        log = self.query_one(LogView)
        log.grow()
        if msg.retag:  # the rows drawn show ranks the job has mapped since
            log.rebuild()

    def set_log_filter(self, rank: int | None, hide_copies: bool = True, jump: int | None = None) -> None:
        """Ask the timeline thread for the rows of a filter; shown when ready (ViewReady)."""
        self._want_view = (rank, hide_copies)
        self._pending_jump = jump
        self.timeline_worker.view(rank, hide_copies)

    def on_view_ready(self, msg: ViewReady) -> None:
        if self._exit or not self.is_running:
            return
        log = self.query_one(LogView)
        if (msg.rank, msg.hide_copies) == self._want_view:
            log.set_view(msg.view, msg.rank, msg.hide_copies)
            if self._pending_jump is not None:
                log.goto_seq(self._pending_jump, center=True)
                self._pending_jump = None
            self._refresh()

    def _rank(self, key: Any) -> int | None:
        if isinstance(key, tuple) and len(key) == 3:
            return self.state.summary.rank_map.get((key[1], key[2]))
        return key if isinstance(key, int) else None

    def on_engine_done(self, msg: EngineDone) -> None:
        if self._exit or not self.is_running:  # a worker message arriving while the app tears down
            return
        self.engine_done = True
        if msg.error:
            self.notify(f"the live engine stopped: {msg.error}", severity="error", timeout=30)
        self._refresh()

    def _marks(self) -> None:
        marks: dict[tuple[str, int], Mark] = {}
        blocks: dict[str, list] = {}
        for f in self.state.findings.values():
            marks[(f.path, f.text_line)] = Mark(f.role, f.severity, f.text, f.signature)
            first = f.traceback_start or f.line
            last = max(f.text_line, int(f.extra.get("tb_end_line") or 0))
            if last > first:
                blocks.setdefault(f.path, []).append((first, last, f.role, f.severity, f.rank))
        self.query_one(LogView).set_marks(marks, blocks)

    def _tick(self) -> None:
        self._refresh()

    def _refresh(self, force: bool = False) -> None:
        # the 1 s tick and the theme signal can fire while the app tears down, after the
        # widgets are gone (NoMatches: StatusBar)
        if self._exit or not self.is_running or not self.query(StatusBar):
            return
        st, now = self.state, self.options.clock()
        log = self.query_one(LogView)
        if st.ranks:
            log.fit_rank(max(st.ranks))
        level, text = st.diagnosis(now)
        extra = " · ".join(x for x in (st.history_text(), self._gauge_alert,
                                       "engine stopped" if self.engine_done else "") if x)
        if log.rank_filter is not None:
            extra = f"log: rank {log.rank_filter} only (a: all)" + (f" · {extra}" if extra else "")
        quiet = time.monotonic() - self._last_lines >= self.options.quiet_s  # nothing new: a screen that changes once a minute
        self.query_one(StatusBar).show(st.shape_text(), fmt_elapsed(now - self.started, quiet), log.follow, level, text,
                                       extra, st.story_lines())
        ranks = self.query_one(RankTable)
        if force:
            ranks._ranks = []
        ranks.show(st.ranks, st.ages(now), st.stands_out(now), self._rank_procs, quiet)
        inc = st.incident
        fl = self.query_one(FindingList)
        if force:
            fl._sig = []
        fl.show(st.ordered_groups(),
                (inc.attempt, inc.initiating.signature, inc.initiating.role) if inc and inc.initiating else None)
        if force:
            g = self.query_one(Gauges)
            g.show(g.snapshot, g.path_trends, g.proc_trends)
        who = f"rank {log.rank_filter}" if log.rank_filter is not None else "merged timeline"
        box = self.query_one("#log-box")
        if box.border_title != f"Log · {who}":  # setting it, even to the same text, redraws the pane
            box.border_title = f"Log · {who}"

    # -- probes ------------------------------------------------------------------------------

    def on_probe_update(self, msg: ProbeUpdate) -> None:
        if self._exit or not self.is_running:  # a worker message arriving while the app tears down
            return
        g = self.query_one(Gauges)
        g.show(msg.snapshot, msg.path_trends, msg.proc_trends, ties=getattr(msg, "ties", None),
               others=getattr(msg, "others", None))
        self._rank_procs = rank_processes(msg.snapshot)
        f = self._fix_finding
        if f is not None and self._fix_cwd != self._process_cwd(f):  # its rank's cwd came (or changed)
            self.show_fix(f, self._fix_origin)
        note = skew_note(self.state.incident, getattr(msg.snapshot, "offsets", None))
        if note and note != self._skew_note:
            self._skew_note = note
            self.notify(note, title="clocks", severity="warning", timeout=15)
        fs, procs = g.critical()  # one filesystem is one gauge, however many watched paths are on it
        what = " and ".join(x for x in (count(fs, "filesystem") if fs else "",
                                         count(procs, "process") if procs else "") if x)
        self._gauge_alert = f"✖ {what} critical (5: gauges)" if what else ""
        self._refresh()

    def action_stacks(self) -> None:  # s: the stacks of the job's processes (app/stacks_key.py)
        from denpex_tui.app.stacks_key import start as start_stacks

        start_stacks(self)

    def action_interrupt(self) -> None:
        """ctrl+c: copy the mouse selection if there is one (and say that ctrl+c again quits),
        else quit as q does."""
        text = self.screen.get_selected_text() if self.is_running else None
        if text:
            self.copy_to_clipboard(text)
            self.screen.clear_selection()
            self.notify("Copied the selection; ctrl+c again (or q) quits", timeout=4)
            return
        self.exit()

    def action_evidence(self) -> None:  # E: an evidence bundle (app/evidence_key.py)
        from denpex_tui.app.evidence_key import start

        start(self)
