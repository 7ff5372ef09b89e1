"""The rank table: rank, state, last line age, first error time, node, source; with other nodes'
probes (--hosts, --slurm-job, --pods) also pid and fds: the rank's worker process as its own
node's probe sees it ("-" when no probe sees that rank).

One row per rank, plus "all" (the merged timeline) on top. The first error time is the rank's
own first error line ("≥" when only an untimestamped traceback says it: after that time); a
narrow pane drops whole columns (source, node, last), never cuts them. Selecting a row (Enter, click)
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
WIDTHS = (5, 15, 7, 11, 12, 28)
# with other nodes' probes (--hosts, --slurm-job): each rank's remote process
REMOTE_COLUMNS = ("rank", "state", "last", "first error", "node", "pid", "fds", "source")
REMOTE_WIDTHS = (5, 15, 7, 11, 12, 7, 10, 28)  # fixed: live updates never make the table jump
# What goes first when the pane is narrow: whole columns are dropped, never cut mid-word.
DROP_ORDER = ("source", "node", "last")
REMOTE_DROP_ORDER = ("source", "last")  # with other nodes' probes, node, pid and fds are the point


def _fds(proc) -> tuple[str, str]:
    """fds/limit of the rank's process, warning from 80 % of its soft limit."""
    if proc is None or proc.fds is None:
        return ("ranks--dim", "-" if proc is None else "?")
    pct = proc.fd_used_pct
    text = f"{proc.fds}/{proc.fd_soft_limit}" if proc.fd_soft_limit else str(proc.fds)
    return ("ranks--error" if pct is not None and pct >= 95 else
            "ranks--warning" if pct is not None and pct >= 80 else "", text)


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

    def __init__(self, remote: bool = False, **kw) -> None:
        super().__init__(cursor_type="row", zebra_stripes=False, **kw)
        self.remote = remote
        self.columns_shown = REMOTE_COLUMNS if remote else COLUMNS
        self.all_columns = self.columns_shown
        self._widths = dict(zip(self.all_columns, REMOTE_WIDTHS if remote else WIDTHS))
        self._ranks: list[int] = []
        self._cells: dict[tuple[str, str], tuple[str, str]] = {}
        self._last: tuple | None = None

    def on_mount(self) -> None:
        self.columns_shown = self._fit(self.size.width or 80)
        self._add_columns()

    def _fit(self, width: int) -> tuple[str, ...]:
        cols = list(self.all_columns)
        for c in (REMOTE_DROP_ORDER if self.remote else DROP_ORDER):
            if sum(self._widths[c] + 2 for c in cols) <= width:  # + cell padding
                break
            if c in cols:
                cols.remove(c)
        return tuple(cols)

    def _add_columns(self) -> None:
        for c in self.columns_shown:
            self.add_column(c, key=c, width=self._widths[c])
        self._add_all_row()

    def _add_all_row(self) -> None:
        cells = {"rank": Text("all"), "state": Text("merged timeline", style="italic")}
        self.add_row(*(cells.get(c, "") for c in self.columns_shown), key="all")

    def on_resize(self) -> None:
        cols = self._fit(self.size.width)
        if cols != self.columns_shown:
            self.columns_shown = cols
            self.clear(columns=True)
            self._ranks, self._cells = [], {}
            self._add_columns()
            if self._last is not None:
                self.show(*self._last)

    def _cell(self, cls: str, text: str) -> Text:
        return Text(text, style=self.get_component_rich_style(cls, partial=True) if cls else "", no_wrap=True)

    def show(self, rows: dict[int, RankRow], ages: dict[int, float | None], standout: set[int],
             procs: dict | None = None, coarse: bool = False) -> None:
        """``coarse``: the job is quiet, ages in whole minutes."""
        self._last = (rows, ages, standout, procs, coarse)
        ranks = sorted(rows)
        procs = procs or {}
        if ranks != self._ranks:
            keep = self.cursor_row
            self.clear()
            self._cells.clear()
            self._add_all_row()
            for r in ranks:
                cells = dict(zip(self.all_columns, self._plain(rows[r], ages.get(r), r in standout, procs.get(r),
                                                               self.remote, coarse)))
                self.add_row(*(self._cell(*cells[c]) for c in self.columns_shown), key=str(r))
                self._cells.update({(str(r), c): cells[c] for c in self.columns_shown})
            self._ranks = ranks
            self.move_cursor(row=min(keep, len(ranks)), animate=False)
            return
        for r in ranks:  # 1 Hz while quiet: compare plain (class, text) pairs, build Text only on change
            for col, cell in zip(self.all_columns,
                                 self._plain(rows[r], ages.get(r), r in standout, procs.get(r), self.remote, coarse)):
                if col not in self.columns_shown:
                    continue
                k = (str(r), col)
                if self._cells.get(k) != cell:
                    self._cells[k] = cell
                    self.update_cell(str(r), col, self._cell(*cell))

    @staticmethod
    def _plain(row: RankRow, age: float | None, standout: bool, proc=None,
               remote: bool = False, coarse: bool = False) -> list[tuple[str, str]]:
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
        cells = [
            (cls if state in ("initiating", "error") else "", str(row.rank)),
            (cls, f"{sym} {word}"),
            ("ranks--warning" if standout else "", fmt_age(age, coarse) + (" !" if standout else "")),
            ("ranks--error" if first is not None else "ranks--dim", first_text),
            ("", row.node or (proc.node if proc is not None else None) or "-"),
            ("ranks--dim", str(proc.pid) if proc is not None else "-"),
            _fds(proc),
            ("ranks--dim", row.source or "-"),
        ]
        return cells if remote else cells[:5] + cells[7:]

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        key = event.row_key.value
        self.post_message(self.RankSelected(None if key == "all" else int(key)))
