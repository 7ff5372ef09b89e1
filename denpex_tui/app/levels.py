"""Error and warning lines, as lnav users expect: ``e``/``E`` the next/previous error line of
any rank, ``w``/``W`` warnings, over the whole merged timeline (a mixin of the app).

Which lines are errors or warnings is read from the lines' level words and glog letters with one
RE2 pattern per kind, searched in the files by the timeline thread (like search); the rows are
cached until the timeline grows.
"""

from __future__ import annotations

import bisect

from denpex_tui.core.text import safe_str

from .messages import LevelsDone
from .summary import incident_summary
from .widgets.fixpanel import FixPanel
from .search import SearchQuery
from .widgets.logview import LogView

__all__ = ["LevelActions", "LEVEL_QUERIES"]

LEVEL_QUERIES = {
    "error": SearchQuery(r"(?m)\b(?:ERROR|CRITICAL|FATAL)\b|^(?:\[\w+\]: ?)*\[?[EF]\d{4} \d\d:\d\d:\d\d"
                         r"|Traceback \(most recent call last\)", regex=True, case=True),
    "warning": SearchQuery(r"(?m)\bWARN(?:ING)?\b|^(?:\[\w+\]: ?)*\[?W\d{4} \d\d:\d\d:\d\d", regex=True, case=True),
}


class LevelActions:
    """Handlers use Textual's naming convention (a mixin of DenpexApp)."""

    def action_level(self, kind: str, step: int) -> None:
        tl = self.timeline
        got = self._levels.get(kind)
        if got is not None and got[0] == tl.rows:
            self._level_step(kind, step)
            return
        self._level_pending = (kind, step)
        self.timeline_worker.levels(kind, LEVEL_QUERIES[kind])

    def on_levels_done(self, msg: LevelsDone) -> None:
        if self._exit or not self.is_running:
            return
        self._levels[msg.kind] = (msg.rows, list(msg.matches.seqs))
        if self._level_pending and self._level_pending[0] == msg.kind:
            kind, step = self._level_pending
            self._level_pending = None
            self._level_step(kind, step)

    def _level_step(self, kind: str, step: int) -> None:
        log = self.query_one(LogView)
        seqs = [s for s in self._levels[kind][1] if log.buf.view.index_of(s, log.buf.tl.rows) is not None]
        at = log.line_at_cursor()
        cur = at[0] if at else -1
        k = bisect.bisect_right(seqs, cur) if step > 0 else bisect.bisect_left(seqs, cur) - 1
        if not seqs or not 0 <= k < len(seqs):
            self.notify(f"no {kind} line " + ("below" if step > 0 else "above"), timeout=2)
            return
        log.clear_notes()
        log.goto_seq(seqs[k], center=True)
        self._refresh()

    def action_copy_summary(self) -> None:
        """``y``: the incident as plain text, over OSC 52 (like the commands)."""
        data = self.query_one(FixPanel).data
        text = incident_summary(self.state.story, data.commands if data is not None else None)
        self.copy_to_clipboard(text)
        self.notify(f"Copied the incident summary ({len(text.splitlines())} lines, plain text) for a ticket.",
                    timeout=4)

    def notify_change(self, headline: str) -> None:
        """Opt-in (--notify): a bell and an OSC 9 desktop notification when the diagnosis changes.
        The text is made safe (no control characters) and short; it cannot drive the terminal."""
        if not self.options.notify:
            return
        self.bell()
        driver = self._driver
        if driver is not None:
            text = safe_str(headline).replace(";", ",")[:200]
            driver.write(f"\x1b]9;denpex: {text}\x07")
