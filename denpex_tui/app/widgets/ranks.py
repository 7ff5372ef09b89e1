"""The rank table: rank, state, last line age, first error time, node, source.

One row per rank, plus "all" (the merged timeline) on top. The first error time is the rank's
own first error line ("≥" when only an untimestamped traceback says it: after that time). Selecting a row (Enter, click)
asks the app to filter the log view. Cells are updated in place, only when their text changes,
so a table of 1024 ranks costs nothing while the job is quiet.
"""

from __future__ import annotations

from datetime import datetime

from rich.text import Text
from textual.message import Message
from textual.widgets import DataTable

from ..model import STATE_SYMBOLS, RankRow, fmt_age

__all__ = ["RankTable"]

STATE_CLASS = {
    "initiating": "ranks--initiating", "error": "ranks--error", "collateral": "ranks--collateral",
    "exited": "ranks--dim", "silent": "ranks--warning", "warn": "ranks--warning", "ok": "ranks--ok",
}
COLUMNS = ("rank", "state", "last", "first error", "node", "source")
WIDTHS = (5, 15, 7, 11, 12, 28)  # fixed: live updates never make the table jump
# What goes first when the pane is narrow: whole columns are dropped, never cut mid-word.
DROP_ORDER = ("source", "node", "last")


class RankTable(DataTable):
    COMPONENT_CLASSES = DataTable.COMPONENT_CLASSES | {
        "ranks--initiating", "ranks--error", "ranks--collateral", "ranks--warning", "ranks--ok", "ranks--dim",
    }
    DEFAULT_CSS = """
    RankTable > .ranks--initiating { color: $denpex-initiating; text-style: bold reverse; }
    RankTable > .ranks--error { color: $denpex-error; text-style: bold; }
    RankTable > .ranks--collateral { color: $denpex-collateral; }
    RankTable > .ranks--warning { color: $denpex-warning; text-style: bold; }
    RankTable > .ranks--ok { color: $denpex-ok; }
    RankTable > .ranks--dim { color: $denpex-dim; }
    """

    class RankSelected(Message):
        def __init__(self, rank: int | None) -> None:
            super().__init__()
            self.rank = rank

    def __init__(self, **kw) -> None:
        super().__init__(cursor_type="row", zebra_stripes=False, **kw)
        self._ranks: list[int] = []
        self._cells: dict[tuple[str, str], tuple[str, str]] = {}
        self._cols: tuple[str, ...] = COLUMNS
        self._last: tuple | None = None

    def on_mount(self) -> None:
        self._cols = self._fit(self.size.width or 80)
        self._add_columns()

    def _fit(self, width: int) -> tuple[str, ...]:
        cols = list(COLUMNS)
        need = lambda cs: sum(WIDTHS[COLUMNS.index(c)] + 2 for c in cs)  # noqa: E731 (cell padding)
        for c in DROP_ORDER:
            if need(cols) <= width:
                break
            cols.remove(c)
        return tuple(cols)

    def _add_columns(self) -> None:
        for c in self._cols:
            self.add_column(c, key=c, width=WIDTHS[COLUMNS.index(c)])
        self._add_all_row()

    def _add_all_row(self) -> None:
        cells = {"rank": Text("all"), "state": Text("merged timeline", style="italic")}
        self.add_row(*(cells.get(c, "") for c in self._cols), key="all")

    def on_resize(self) -> None:
        cols = self._fit(self.size.width)
        if cols != getattr(self, "_cols", None):
            self._cols = cols
            self.clear(columns=True)
            self._ranks, self._cells = [], {}
            self._add_columns()
            if getattr(self, "_last", None):
                self.show(*self._last)

    def _cell(self, cls: str, text: str) -> Text:
        return Text(text, style=self.get_component_rich_style(cls, partial=True) if cls else "", no_wrap=True)

    def show(self, rows: dict[int, RankRow], ages: dict[int, float | None], standout: set[int],
             coarse: bool = False) -> None:
        self._coarse = coarse
        self._last = (rows, ages, standout, coarse)
        ranks = sorted(rows)
        if ranks != self._ranks:
            keep = self.cursor_row
            self.clear()
            self._cells.clear()
            self._add_all_row()
            for r in ranks:
                cells = dict(zip(COLUMNS, self._plain(rows[r], ages.get(r), r in standout, coarse)))
                self.add_row(*(self._cell(*cells[c]) for c in self._cols), key=str(r))
                self._cells.update({(str(r), c): cells[c] for c in self._cols})
            self._ranks = ranks
            self.move_cursor(row=min(keep, len(ranks)), animate=False)
            return
        for r in ranks:  # 1 Hz while quiet: compare plain (class, text) pairs, build Text only on change
            for col, cell in zip(COLUMNS, self._plain(rows[r], ages.get(r), r in standout, coarse)):
                if col not in self._cols:
                    continue
                k = (str(r), col)
                if self._cells.get(k) != cell:
                    self._cells[k] = cell
                    self.update_cell(str(r), col, self._cell(*cell))

    @staticmethod
    def _plain(row: RankRow, age: float | None, standout: bool, coarse: bool = False) -> list[tuple[str, str]]:
        """(component class, text) of each cell."""
        state = row.state
        sym, word = STATE_SYMBOLS[state]
        cls = STATE_CLASS[state]
        first = row.first_error
        first_text = "-"
        own = row.first_line  # the rank's own first error line: exact, or after its last timed line
        if own is not None and (first is not None or row.roles):
            first_text = ("≥" if own.approx else "") + datetime.fromtimestamp(own.time).strftime("%H:%M:%S")
        elif first is not None and first.time is not None:
            first_text = ("≥" if first.time_approx else "") + first.time.strftime("%H:%M:%S")
        return [
            (cls if state in ("initiating", "error") else "", str(row.rank)),
            (cls, f"{sym} {word}"),
            ("ranks--warning" if standout else "", fmt_age(age, coarse) + (" !" if standout else "")),
            ("ranks--error" if first is not None else "ranks--dim", first_text),
            ("", row.node or "-"),
            ("ranks--dim", row.source or "-"),
        ]

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        key = event.row_key.value
        self.post_message(self.RankSelected(None if key == "all" else int(key)))
