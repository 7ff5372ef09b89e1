"""The log view's bounded buffer and its rows (no Textual here).

Lines are kept in arrival order with a sequence number each; at most ``cap`` (+25 % slack,
trimmed in one go). Rows are the visible lines under the current filter (one rank, or the
merged timeline without the console's copies of lines that also have a per-rank file), with
the lines of an open explanation after the line they belong to.
"""

from __future__ import annotations

import bisect
from typing import Callable

from rich.cells import cell_len
from rich.text import Text

from denpex_tui.live.engine import LogLine

__all__ = ["LogBuffer", "Row"]

Row = "int | tuple[int, int]"  # a line's sequence number, or (sequence number, note line)


def row_seq(entry: int | tuple[int, int]) -> int:
    return entry if isinstance(entry, int) else entry[0]


class LogBuffer:
    def __init__(self, cap: int = 20_000) -> None:
        self.cap = cap
        self.lines: list[LogLine] = []
        self.base = 0  # sequence number of lines[0]
        self.rows: list[int | tuple[int, int]] = []
        self.notes: dict[int, list[Text]] = {}
        self.width = 0
        self.gutter = 4
        self.rank_filter: int | None = None
        self.hide_copies = True
        self.kinds: dict[str, str] = {}
        self.rank_map: dict[tuple, int] = {}
        self.ranks_with_files: set[int] = set()

    def rank_of(self, ll: LogLine) -> int | None:
        return ll.rank if ll.rank is not None else self.rank_map.get((ll.node_key, ll.local))

    def visible(self, ll: LogLine) -> bool:
        r = self.rank_of(ll)
        if self.rank_filter is not None and r != self.rank_filter:
            return False
        if self.hide_copies:
            kind = self.kinds.get(ll.source)
            if kind == "error-json":
                return False
            if kind == "console" and r is not None and r in self.ranks_with_files:
                return False
        return True

    def line(self, seq: int) -> LogLine | None:
        i = seq - self.base
        return self.lines[i] if 0 <= i < len(self.lines) else None

    def add(self, lines: list[LogLine]) -> tuple[int, bool]:
        """Append lines; returns (rows dropped from the front, whether the gutter widened)."""
        wider = False
        for ll in lines:
            seq = self.base + len(self.lines)
            self.lines.append(ll)
            w = cell_len(ll.text) if "\t" not in ll.text else len(ll.text.expandtabs(8))
            if w > self.width:
                self.width = w
            if self.visible(ll):
                self.rows.append(seq)
                r = self.rank_of(ll)
                if r is not None and len(str(r)) + 3 > self.gutter:
                    self.gutter = len(str(r)) + 3
                    wider = True
        cut = 0
        if len(self.lines) > self.cap + self.cap // 4:
            drop = len(self.lines) - self.cap
            del self.lines[:drop]
            self.base += drop
            while cut < len(self.rows) and row_seq(self.rows[cut]) < self.base:
                cut += 1
            del self.rows[:cut]
            self.notes = {s: n for s, n in self.notes.items() if s >= self.base}
        return cut, wider

    def rebuild(self) -> None:
        rows: list[int | tuple[int, int]] = []
        for i, ll in enumerate(self.lines):
            if self.visible(ll):
                seq = self.base + i
                rows.append(seq)
                rows.extend((seq, j) for j in range(len(self.notes.get(seq, ()))))
        self.rows = rows

    def set_context(self, kinds: dict[str, str], rank_map: dict[tuple, int], ranks_with_files: set[int]) -> bool:
        changed = kinds != self.kinds or rank_map != self.rank_map or ranks_with_files != self.ranks_with_files
        self.kinds, self.rank_map, self.ranks_with_files = dict(kinds), dict(rank_map), set(ranks_with_files)
        return changed

    def index_of(self, seq: int) -> int | None:
        i = bisect.bisect_left(self.rows, seq, key=row_seq)
        return i if i < len(self.rows) and row_seq(self.rows[i]) == seq else None

    def seq_of(self, source: str, line: int) -> int | None:
        for i in range(len(self.lines) - 1, -1, -1):
            ll = self.lines[i]
            if ll.line == line and ll.source == source:
                return self.base + i
        return None

    def lines_of(self, source: str, first: int, last: int) -> list[LogLine]:
        return [ll for ll in self.lines if ll.source == source and first <= ll.line <= last]

    def row_text(self, i: int) -> str:
        entry = self.rows[i]
        if isinstance(entry, tuple):
            return self.notes[entry[0]][entry[1]].plain
        ll = self.line(entry)
        return "" if ll is None else ll.text.expandtabs(8)

    def find_row(self, start: int, step: int, pred: Callable[[LogLine], bool]) -> int | None:
        i = start + step
        while 0 <= i < len(self.rows):
            entry = self.rows[i]
            if isinstance(entry, int):
                ll = self.line(entry)
                if ll is not None and pred(ll):
                    return i
            i += step
        return None
