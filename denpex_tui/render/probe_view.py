"""Human-readable view of ``denpex probe``: text gauges, ETA lines, the differential.

Colour only on a terminal and never when NO_COLOR is set (https://no-color.org); otherwise plain
text with no escape sequence at all. Every string that comes from a process or a log (command
lines, paths, log lines) is made safe first: control characters are shown escaped, so nothing a
process or a log contains can drive the terminal.
"""

from __future__ import annotations

import os
import sys
from typing import IO, Iterable

from denpex_tui.probes.mounts import FS_CLASS_TEXT
from denpex_tui.probes.readings import PathReading, ProcessReading, Snapshot, iso_time
from denpex_tui.core.text import safe_str
from denpex_tui.core.units import human_bytes, human_count

# a line is a list of (text, style) segments; style names map to rich styles when coloured
Seg = tuple[str, str]
Line = list[Seg]

STYLES = {
    "": "",
    "title": "bold",
    "dim": "dim",
    "ok": "green",
    "warn": "yellow",
    "bad": "bold red",
    "key": "cyan",
    "likely": "bold red",
    "unlikely": "green",
    "unknown": "yellow",
}


def safe(s: object, limit: int = 400) -> str:
    return safe_str(s, limit)


def use_color(file: IO | None = None) -> bool:
    f = file if file is not None else sys.stdout
    if os.environ.get("NO_COLOR"):
        return False
    try:
        return bool(f.isatty())
    except (AttributeError, ValueError):
        return False




def gauge(used_pct: float | None, width: int = 20) -> tuple[str, str]:
    """('[#####...............]', style) for a used percentage."""
    if used_pct is None:
        return "[" + "?" * width + "]", "dim"
    u = max(0.0, min(100.0, used_pct))
    n = int(round(u / 100 * width))
    style = "bad" if u >= 95 else "warn" if u >= 80 else "ok"
    return "[" + "#" * n + "." * (width - n) + "]", style


def _pct(v: float | None) -> str:
    return "?" if v is None else f"{v:.0f} %" if v >= 10 else f"{v:.1f} %"


# --- sections ---------------------------------------------------------------------------------


def _proc_lines(p: ProcessReading) -> list[Line]:
    out: list[Line] = []
    ident = []
    if p.rank is not None:
        ident.append(f"rank {p.rank}")
    if p.local_rank is not None:
        ident.append(f"local {p.local_rank}")
    if p.role == "launcher":
        ident.append("launcher")
    ident.append(f"pid {p.pid}")
    cmd = safe(" ".join(p.cmdline), 100) if p.cmdline else ""
    head: Line = [("  " + "  ".join(ident), "key")]
    if p.status:
        head.append((f"  {p.status}", "bad" if p.status in ("zombie", "exited") else ""))
    if p.rss_bytes is not None:
        head.append((f"  rss {human_bytes(p.rss_bytes)}", ""))
    if cmd:
        head.append((f"  {cmd}", "dim"))
    out.append(head)
    if not p.readable and p.fds is None:
        out.append([("    not readable: ", "warn"), (safe(p.error or "unknown"), "warn"),
                    (" (readings null, not zero)", "dim")])
        return out
    g, st = gauge(p.fd_used_pct)
    lim = f"{p.fds}/{p.fd_soft_limit}" if p.fd_soft_limit else f"{p.fds}/?"
    line: Line = [("    fds    ", ""), (g, st), (f" {_pct(p.fd_used_pct)} {lim}", st)]
    if p.fd_hard_limit is not None:
        line.append((f" (hard {p.fd_hard_limit})", "dim"))
    if p.fds_by_kind:
        kinds = "  ".join(f"{k} {v}" for k, v in p.fds_by_kind.items() if v)
        line.append((f"  {kinds}", "dim"))
    out.append(line)
    if p.deleted_open_files:
        top = sorted(p.deleted or [], key=lambda d: -d.bytes)[:3]
        out.append([("    deleted-open ", ""),
                    (f"{p.deleted_open_files} files, {human_bytes(p.deleted_open_bytes)}",
                     "bad" if (p.deleted_open_bytes or 0) > 0 else "warn")])
        for d in top:
            out.append([(f"      fd {d.fd} ", "dim"), (safe(d.path, 120), ""),
                        (f"  {human_bytes(d.bytes)}", "dim")])
    elif p.deleted_open_files == 0:
        out.append([("    deleted-open ", ""), ("none", "ok")])
    if p.shm_open_files:
        out.append([("    shm    ", ""), (f"{p.shm_open_files} segments, "
                                           f"{human_bytes(p.shm_open_bytes)}", ""),
                    ("  (memfd and /dev/shm: normal for DataLoader workers)", "dim")])
    if p.open_under_watched:
        items = [(w, n) for w, n in p.open_under_watched.items() if n]
        if items:
            out.append([("    open under watched paths: ", "dim"),
                        (", ".join(f"{safe(w, 80)} {n}" for w, n in items), "")])
    if p.error and p.readable is False:
        out.append([("    partly readable: ", "warn"), (safe(p.error), "warn")])
    return out


def _fs_key(r: PathReading):
    if r.error or r.mount is None:
        return ("path", r.path)
    return ("fs", r.mount, r.source, r.fstype)


def _path_group_lines(group: list[PathReading]) -> list[Line]:
    """One filesystem: its gauges once, then every watched path on it."""
    out: list[Line] = []
    r = group[0]
    if r.error or r.mount is None:
        head: Line = [("  " + safe(r.path, 160), "key")]
        if r.why:
            head.append(("  (" + safe("; ".join(r.why), 160) + ")", "dim"))
        out.append(head)
        if r.mount:
            out.append([(f"    on {safe(r.mount, 120)}  {safe(r.fstype or '?')}", "")])
        out.append([("    not measured: ", "warn"), (safe(r.error or "no mount"), "bad")])
        return out
    fs: Line = [(f"  {safe(r.mount, 120)}", "key"), (f"  {safe(r.fstype or '?')}", ""),
                (f"  {safe(r.source or '', 80)}", "dim")]
    if r.fs_class in ("network", "parallel", "fuse"):
        fs.append((f"  {FS_CLASS_TEXT[r.fs_class]}", "warn"))
    if r.readonly:
        fs.append(("  read-only", "warn"))
    out.append(fs)
    used = None if r.bytes_free_pct is None else 100 - r.bytes_free_pct
    g, st = gauge(used)
    out.append([("    bytes  ", ""), (g, st), (f" {_pct(used)} used", st),
                (f"  free {human_bytes(r.bytes_free)} of {human_bytes(r.bytes_total)}", ""),
                (f"  reserved {human_bytes(r.bytes_reserved)}"
                 + (f" ({_pct(r.bytes_reserved_pct)})" if r.bytes_reserved else ""), "dim")])
    if r.inodes_total is None:
        out.append([("    inodes ", ""), ("not reported by this filesystem", "dim")])
    else:
        iu = None if r.inodes_free_pct is None else 100 - r.inodes_free_pct
        g, st = gauge(iu)
        out.append([("    inodes ", ""), (g, st), (f" {_pct(iu)} used", st),
                    (f"  free {human_count(r.inodes_free)} of {human_count(r.inodes_total)}",
                     "")])
    if r.deleted_open_bytes:
        out.append([(f"    {human_bytes(r.deleted_open_bytes)} held here by deleted-but-open "
                     "files of the watched processes", "bad")])
    for p in group:
        line: Line = [("    - " + safe(p.path, 160), "")]
        if p.why:
            line.append(("  " + safe("; ".join(p.why), 160), "dim"))
        if p.exists is False:
            line.append(("  (does not exist here)", "warn"))
        if p.open_fds:
            line.append((f"  {p.open_fds} fds open", "dim"))
        out.append(line)
    return out


def _diff_lines(d) -> list[Line]:
    out: list[Line] = []
    where = f" on {safe(d.path, 160)}" if d.path else ""
    out.append([(f"Differential: {safe(d.signature_id)}{where}", "title")])
    for c in getattr(d, "caveats", ()):
        out.append([("  caveat: ", "warn"), (safe(c, 300), "warn")])
    order = {"likely": 0, "unknown": 1, "unlikely": 2}
    for c in sorted(d.candidates, key=lambda c: order.get(c.verdict, 3)):
        out.append([(f"  {c.verdict:<9}", c.verdict), (f"{safe(c.title)}: ", ""),
                    (safe(c.evidence, 300), "")])
        if c.check and c.verdict != "unlikely":
            out.append([("             check: ", "dim"), (safe(c.check, 4000), "")])
    items = [c for c in d.checklist]
    if items:
        out.append([("  checklist:", "")])
        for it in items:
            mark = {True: "[x]", False: "[ ]", None: "[?]"}[it.result]
            style = {True: "bad", False: "dim", None: "dim"}[it.result]
            cond = f"  ({safe(it.condition)})" if it.condition else ""
            out.append([(f"    {mark} ", style), (safe(it.text, 200), ""), (cond, "dim")])
    out.append([(f"  {d.note} ({d.measured_at})", "dim")])
    return out


def build_lines(snapshot: Snapshot, *, trends=None, differentials: Iterable = (),
                log_errors: Iterable = ()) -> list[Line]:
    lines: list[Line] = []
    lines.append([(f"denpex probe  host {safe(snapshot.host)}  {iso_time(snapshot.time)}", "title"),
                  ("  (measured now)", "dim")])
    lines.append([])
    workers = [p for p in snapshot.processes if p.role != "launcher"]
    lines.append([("Processes", "title")])
    if not workers and snapshot.discovered:
        lines.append([("  no local training processes", "warn"),
                      ("  (nothing with RANK/LOCAL_RANK or under torchrun/deepspeed here: a "
                       "login or head node? shared paths below)", "dim")])
    for p in snapshot.processes:
        lines.extend(_proc_lines(p))
    lines.append([])
    lines.append([("Paths", "title")])
    if not snapshot.paths:
        lines.append([("  no paths watched (use --path or --logs)", "dim")])
    groups: dict = {}
    for r in snapshot.paths:
        groups.setdefault(_fs_key(r), []).append(r)
    for g in groups.values():
        lines.extend(_path_group_lines(g))
    if trends is not None:
        etas = trends.eta_lines()
        lines.append([])
        lines.append([("Trends", "title")])
        if etas:
            for e in etas:
                lines.append([("  " + safe(e, 300), "warn")])
        else:
            lines.append([("  no steady trend toward a limit", "dim")])
    for d in differentials:
        lines.append([])
        lines.extend(_diff_lines(d))
    return lines


def plain_text(lines: list[Line]) -> str:
    return "\n".join("".join(t for t, _s in line) for line in lines) + "\n"


def render(snapshot: Snapshot, *, trends=None, differentials: Iterable = (),
           file: IO | None = None, color: bool | None = None) -> None:
    write_lines(build_lines(snapshot, trends=trends, differentials=differentials), file, color)


def write_lines(lines, file: IO | None = None, color: bool | None = None) -> None:
    """Styled lines to ``file``: plain text, or colour through the safe console."""
    f = file if file is not None else sys.stdout
    if color is None:
        color = use_color(f)
    if not color:
        f.write(plain_text(lines))
        f.flush()
        return
    from rich.text import Text

    from denpex_tui.render.safe import safe_console

    console = safe_console(f, force_terminal=True)
    for line in lines:
        t = Text()
        for text, style in line:
            t.append(text, style=STYLES.get(style, ""))
        console.print(t)


__all__ = ["render", "write_lines", "build_lines", "plain_text", "use_color", "safe", "gauge", "human_bytes"]
