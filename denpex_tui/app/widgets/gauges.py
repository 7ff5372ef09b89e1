"""Gauges: free bytes and inodes per watched path; fds against the limit, deleted-open bytes
and a steady-trend ETA per process.

Each path says what was measured: the path, and the mount and filesystem it is on (and the
existing ancestor actually measured, when the path itself is not there yet). Space is used as
df computes it (used / (used + available)); root-reserved blocks are shown apart. Bars have one
width in a column, whatever the numbers after them.

Readings come from the probe worker (latest value wins); this widget only draws them. A
gauge's colour changes as it nears its limit, and so does its symbol and word (● ok, ▲ near,
✖ full), so the level never depends on colour alone.
"""

from __future__ import annotations

import os

from rich.text import Text
from textual.widgets import Static

from denpex_tui.probes.readings import PathReading, ProcessReading, Snapshot
from denpex_tui.probes.trends import PathTrend, ProcessTrend, fmt_duration
from denpex_tui.core.text import safe_str
from denpex_tui.core.units import human_bytes, human_count
from denpex_tui.core.words import count, plural

__all__ = ["Gauges", "level"]

NEAR, FULL = 80.0, 95.0
MAX_PROCS = 16
MAX_NODES = 16  # with every node of the job: the worst 16 in full, the others counted


def level(used_pct: float | None) -> tuple[str, str, str]:
    """(component class, symbol, word) for a used percentage."""
    if used_pct is None:
        return "gauges--dim", "?", "unknown"
    if used_pct >= FULL:
        return "gauges--crit", "✖", "FULL" if used_pct >= 99.5 else "crit"
    if used_pct >= NEAR:
        return "gauges--warn", "▲", "near"
    return "gauges--ok", "●", "ok"




def _short(path: str, width: int) -> str:
    return path if len(path) <= width else "…" + path[-(width - 1):]


def _filesystems(paths: list[PathReading]) -> list[tuple[PathReading, int]]:
    """One gauge per filesystem: (its first watched path, how many more watched paths are on it)."""
    seen: dict[tuple, int] = {}
    shown: list[PathReading] = []
    for pr in paths:
        k = (pr.mount, pr.source) if pr.mount and not pr.error else (pr.path,)
        if k in seen:
            continue
        seen[k] = len(shown)
        shown.append(pr)
    more = [0] * len(shown)
    for pr in paths:
        k = (pr.mount, pr.source) if pr.mount and not pr.error else (pr.path,)
        more[seen[k]] += 1
    return [(pr, n - 1) for pr, n in zip(shown, more)]


class Gauges(Static):
    COMPONENT_CLASSES = {"gauges--ok", "gauges--warn", "gauges--crit", "gauges--dim", "gauges--title"}
    DEFAULT_CSS = """
    Gauges { text-wrap: nowrap; text-overflow: ellipsis; }
    Gauges > .gauges--ok { color: $denpex-gauge-ok; }
    Gauges > .gauges--warn { color: $denpex-gauge-warn; text-style: bold; }
    Gauges > .gauges--crit { color: $denpex-gauge-crit; text-style: bold; }
    Gauges > .gauges--dim { color: $denpex-dim; }
    Gauges > .gauges--title { text-style: bold; }
    """

    def __init__(self, **kw) -> None:
        super().__init__("", **kw)
        self.snapshot: Snapshot | None = None
        self.path_trends: dict[str, PathTrend] = {}
        self.proc_trends: dict[int, ProcessTrend] = {}
        self.note = "probes: first reading…"
        self.ties: dict[int, str] | None = None
        self.others: list = []

    def show(self, snapshot: Snapshot | None, path_trends: dict, proc_trends: dict, *,
             ties: dict[int, str] | None = None, others: list | None = None) -> None:
        self.snapshot, self.path_trends, self.proc_trends = snapshot, path_trends, proc_trends
        if ties is not None:
            self.ties, self.others = ties, list(others or [])
        self._show(self._text())

    def _show(self, text: Text) -> None:
        """Nothing changed: nothing written; the same height: no layout (no full redraw)."""
        old = getattr(self, "_shown", None)
        if text == old:
            return
        self._shown = text
        self.update(text, layout=old is None or len(text.plain.splitlines()) != len(old.plain.splitlines()))

    def critical(self) -> tuple[int, int]:
        """(filesystems, processes) at or past FULL, counted as the pane shows them: one
        filesystem is one gauge however many watched paths are on it (bytes or inodes), one
        process is its fds."""
        snap = self.snapshot
        if snap is None:
            return 0, 0
        fs = sum(1 for pr, _more in _filesystems(snap.paths)
                 if any(free is not None and 100.0 - free >= FULL for free in (pr.bytes_free_pct, pr.inodes_free_pct)))
        procs = sum(1 for p in snap.processes if p.role != "launcher" and (p.fd_used_pct or 0.0) >= FULL)
        return fs, procs

    def set_note(self, note: str) -> None:
        self.note = note
        self._show(self._text())

    def on_resize(self) -> None:
        self._show(self._text())

    def _s(self, cls: str):
        return self.get_component_rich_style(cls, partial=True)

    def _bar(self, t: Text, label: str, used_pct: float | None, detail: str, width: int) -> None:
        cls, sym, word = level(used_pct)
        bar_w = max(4, min(24, width - 40))  # the same for every row: bars line up
        n = 0 if used_pct is None else int(round(max(0.0, min(100.0, used_pct)) / 100 * bar_w))
        t.append(f"  {sym} {label:<6} ", style=self._s(cls))
        t.append("█" * n, style=self._s(cls))
        t.append("░" * (bar_w - n), style=self._s("gauges--dim"))
        pct = "  ?%" if used_pct is None else f"{used_pct:3.0f}%"
        t.append(f" {pct} {word:<4} ", style=self._s(cls))
        t.append(detail + "\n")

    def _text(self) -> Text:
        width = max(30, self.content_region.width or 60)
        t = Text(no_wrap=True, overflow="ellipsis", end="")
        snap = self.snapshot
        if snap is None:
            t.append(self.note, style=self._s("gauges--dim"))
            return t
        if getattr(snap, "nodes", None) is not None:  # every node of the job: grouped, worst first
            from ..remote import group_by_node

            groups = group_by_node(snap)
            for node, st, paths, procs in groups[:MAX_NODES]:
                status = (st or {}).get("status", "?")
                cls = "gauges--ok" if status == "ok" else "gauges--crit" if status in (
                    "no-answer", "exited", "other-schema", "garbage") else "gauges--warn"
                t.append(f"▌node {node} · {status}", style=self._s(cls))
                detail = (st or {}).get("detail")
                t.append(f" {safe_str(detail)}\n" if detail and status != "ok" else "\n",
                         style=self._s("gauges--dim"))
                for pr in paths:
                    self._path(t, pr, width)
                for p in sorted(procs, key=lambda p: -(p.fd_used_pct or 0.0))[:MAX_PROCS]:
                    self._proc(t, p, width)
            if len(groups) > MAX_NODES:
                rest = {}
                for _n, st, _p, _q in groups[MAX_NODES:]:
                    k = (st or {}).get("status", "?")
                    rest[k] = rest.get(k, 0) + 1
                t.append(f"… {len(groups) - MAX_NODES} more nodes, further from their limits ("
                         + ", ".join(f"{v} {k}" for k, v in sorted(rest.items())) + ")\n",
                         style=self._s("gauges--dim"))
            t.rstrip()
            return t
        for pr, more in _filesystems(snap.paths):
            self._path(t, pr, width, more=more)
        # the process closest to its limit first: the one to look at is always in view
        procs = sorted((p for p in snap.processes if p.role != "launcher"),
                       key=lambda p: (-(p.fd_used_pct or 0.0), -(p.deleted_open_bytes or 0), p.rank or 0, p.pid))
        for p in procs[:MAX_PROCS]:
            self._proc(t, p, width)
        if len(procs) > MAX_PROCS:
            t.append(f"… {len(procs) - MAX_PROCS} more processes\n", style=self._s("gauges--dim"))
        if not procs:
            t.append("no training process of this job here" if snap.discovered else "no process given (--pid)",
                     style=self._s("gauges--dim"))
            t.append("\n")
        if self.others:
            n = len(self.others)
            t.append(f"other processes here: {count(n, 'training process')} not tied to this job\n",
                     style=self._s("gauges--dim"))
        t.rstrip()
        return t

    def _path(self, t: Text, pr: PathReading, width: int, more: int = 0) -> None:
        fs = f" ({pr.fstype})" if pr.fstype else ""
        fs = safe_str(fs)
        on = f" on {safe_str(pr.mount)}" if pr.mount and pr.mount != pr.path else ""
        t.append(_short(safe_str(pr.path), width - len(fs) - len(on) - 2) + on + fs + "\n", style=self._s("gauges--title"))
        if pr.measured_path and os.path.normpath(pr.measured_path) != os.path.normpath(pr.path) and pr.exists is False:
            t.append(f"  not there yet: measured {safe_str(pr.measured_path)}\n", style=self._s("gauges--dim"))
        if pr.error:
            t.append(f"  ? {safe_str(pr.error)}\n", style=self._s("gauges--warn"))
            return
        used = None if pr.bytes_free_pct is None else 100.0 - pr.bytes_free_pct
        reserved = f" · {human_bytes(pr.bytes_reserved)} reserved" if pr.bytes_reserved else ""
        self._bar(t, "space", used, f"{human_bytes(pr.bytes_free)} free{reserved}", width)
        if pr.inodes_total:
            iused = None if pr.inodes_free_pct is None else 100.0 - pr.inodes_free_pct
            self._bar(t, "inodes", iused, f"{human_count(pr.inodes_free)} free", width)
        extra = []
        tr = self.path_trends.get((pr.node, pr.path) if pr.node else pr.path)
        if tr is not None:
            if tr.eta_full_seconds is not None and pr.bytes_free != 0:  # a full disk is not "full in ~1 s"
                extra.append(f"full in ~{fmt_duration(tr.eta_full_seconds)}")
            if tr.eta_inodes_seconds is not None and pr.inodes_free != 0:
                extra.append(f"inodes out in ~{fmt_duration(tr.eta_inodes_seconds)}")
        if pr.deleted_open_bytes:
            extra.append(f"deleted-open {human_bytes(pr.deleted_open_bytes)}")
        if extra:
            t.append("    " + " · ".join(extra) + "\n", style=self._s("gauges--warn"))
        if more:
            t.append(f"    +{more} more {plural(more, 'watched path')} on it\n", style=self._s("gauges--dim"))

    def _proc(self, t: Text, p: ProcessReading, width: int) -> None:
        who = (f"rank {p.rank}" if p.rank is not None else (f"local {p.local_rank}" if p.local_rank is not None else "pid"))
        t.append(f"{who} · pid {p.pid}" + (f" · {p.status}" if p.status else "") + "\n", style=self._s("gauges--title"))
        how = (self.ties or {}).get(p.pid)
        if how:
            t.append(f"  job's: {how}\n", style=self._s("gauges--dim"))
        if p.fds is None:
            t.append(f"  ? not readable: {safe_str(p.error or 'unknown')}\n", style=self._s("gauges--dim"))
            return
        lim = p.fd_soft_limit
        self._bar(t, "fds", p.fd_used_pct, f"{p.fds}/{lim if lim else '∞'}", width)
        extra = []
        tr = self.proc_trends.get((p.node, p.pid) if p.node else p.pid)
        if tr is not None:
            if tr.eta_saves is not None:
                extra.append(f"fd limit in ~{tr.eta_saves} saves")
            elif tr.eta_seconds is not None:
                extra.append(f"fd limit in ~{fmt_duration(tr.eta_seconds)}")
        if p.deleted_open_bytes:
            extra.append(f"deleted-open {human_bytes(p.deleted_open_bytes)}")
        if extra:
            t.append("    " + " · ".join(extra) + "\n", style=self._s("gauges--warn"))
