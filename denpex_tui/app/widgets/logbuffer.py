"""The log view's rows over the merged timeline (no Textual here).

Rows are the lines one filter shows (the merged timeline without the console's copies of lines
that also have a per-rank file, everything, or one rank), in time order, with the lines of an
open explanation after the line they belong to. Texts are read back from the files for the rows
on screen (:class:`~denpex_tui.app.timeline.Timeline`); the buffer keeps no log text beyond a
small cache bounded in bytes.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from rich.text import Text

from denpex_tui.core.lines.facts import parse_line

from ..timeline import Timeline, View

__all__ = ["LogBuffer", "ViewLine", "row_seq"]


@dataclass(slots=True)
class ViewLine:
    source: str
    line: int  # 1-based, the engine's numbering
    text: str
    spans: tuple
    rank: int | None
    local: int | None
    node_key: str | None
    cut: bool = False  # only the start of a longer line is shown


def row_seq(entry: int | tuple[int, int]) -> int:
    return entry if isinstance(entry, int) else entry[0]


class LogBuffer:
    def __init__(self, timeline: Timeline | None = None) -> None:
        self.tl = timeline or Timeline()
        self.view: View = self.tl.default
        self.shown = 0  # rows of the view on screen (the builder may have more: see sync)
        self.notes: dict[int, list[Text]] = {}
        self.width = 0
        self.gutter = 4
        self.rank_filter: int | None = None
        self.hide_copies = True
        self._lines: OrderedDict[int, ViewLine] = OrderedDict()
        self._made_with: dict | None = None  # the rank map the cached lines were made with

    # -- rows ------------------------------------------------------------------------------

    def sync(self) -> int:
        """Take the rows the builder committed since the last call; returns how many."""
        n = self.view.count(self.tl.rows)
        grew = n - self.shown
        self.shown = n
        return grew

    def set_view(self, view: View, rank: int | None, hide_copies: bool) -> None:
        self.view, self.rank_filter, self.hide_copies = view, rank, hide_copies
        self.shown = view.count(self.tl.rows)

    def _note(self) -> tuple[int, int] | None:
        """(view index of the line the open note is under, note length)."""
        for seq, lines in self.notes.items():
            i = self.view.index_of(seq, self.tl.rows)
            if i is not None and i < self.shown:
                return i, len(lines)
        return None

    @property
    def count(self) -> int:
        note = self._note()
        return self.shown + (note[1] if note else 0)

    def entry(self, i: int) -> int | tuple[int, int]:
        note = self._note()
        if note is not None:
            at, n = note
            if at < i <= at + n:
                return (self.view.seq(at), i - at - 1)
            if i > at + n:
                i -= n
        return self.view.seq(i)

    def index_of(self, seq: int) -> int | None:
        i = self.view.index_of(seq, self.tl.rows)
        if i is None or i >= self.shown:
            return None
        note = self._note()
        return i + note[1] if note is not None and i > note[0] else i

    def index_near(self, seq: int) -> int:
        """The row of ``seq``, or of the first shown line after it."""
        i = min(self.view.index_at_or_after(seq, self.tl.rows), max(0, self.shown - 1))
        note = self._note()
        return i + note[1] if note is not None and i > note[0] else i

    # -- lines -----------------------------------------------------------------------------

    def prefetch(self, first: int, last: int) -> None:
        seqs = []
        for i in range(max(0, first), min(self.count, last)):
            e = self.entry(i)
            if isinstance(e, int) and e not in self._lines:
                seqs.append(e)
        self.tl.prefetch(seqs)

    def line(self, seq: int) -> ViewLine | None:
        if not 0 <= seq < self.tl.rows:
            return None
        if self.tl.rank_map is not self._made_with:  # set_rank_map replaces the dict
            self._lines.clear()  # a line carries the rank it was made with
            self._made_with = self.tl.rank_map
        ll = self._lines.get(seq)
        if ll is not None:
            return ll
        sid, line0 = self.tl.locate(seq)
        ll = self._make(sid, line0)
        self._lines[seq] = ll
        if len(self._lines) > 4096:
            self._lines.popitem(last=False)
        return ll

    def _make(self, sid: int, line0: int) -> ViewLine:
        st, cut = self.tl.text_of(sid, line0)
        meta = self.tl.sources[sid]
        info = meta.info
        rank, local = parse_line(st.text[:512]).ranks(info)  # the door: what the pipeline says
        if rank is None and local is not None:
            rank = self.tl.rank_map.get((info.node_key, local))
        return ViewLine(meta.name, line0 + 1, st.text, st.spans, rank, local, info.node_key, cut)

    def rank_of(self, ll: ViewLine | None) -> int | None:
        return None if ll is None else ll.rank

    def seq_of(self, source: str, line: int) -> int | None:
        return self.tl.seq_of(source, line)

    def lines_of(self, source: str, first: int, last: int) -> list[ViewLine]:
        sid = self.tl.sid_of(source)
        if sid is None:
            return []
        first = max(1, first)
        last = min(last, self.tl.counts[sid])
        self.tl.prefetch_lines(sid, first - 1, max(0, last - first + 1))
        return [self._make(sid, l0) for l0 in range(first - 1, last)]

    def row_text(self, i: int) -> str:
        e = self.entry(i)
        if isinstance(e, tuple):
            return self.notes[e[0]][e[1]].plain
        ll = self.line(e)
        return "" if ll is None else ll.text.expandtabs(8)
