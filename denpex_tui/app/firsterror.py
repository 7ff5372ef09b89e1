"""Each rank's first error line, read from its own files (no Textual here).

The ranks table's "first error" is the time of the rank's own first error line: the first line
at ERROR (or CRITICAL) level with its own timestamp in the rank's per-rank files (an ``ERROR ...
Checkpoint save failed`` line is exact, even when the traceback after it has no timestamp).
A rank whose files have no such line, only an untimestamped traceback (torch's stderr), gets the
time of the last timestamped line before it in the merged timeline, marked approximate (``~``).
Files are searched in large reads for the level words first (C-speed); candidates are checked
through :func:`~denpex_tui.app.lineinfo.line_facts`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .lineinfo import line_facts
from .timeline import Timeline

__all__ = ["FirstError", "first_errors"]

_CANDIDATE = re.compile(rb"(?m)^.{0,160}?(?:\bERROR\b|\bCRITICAL\b|\bFATAL\b|^\S*?[EF]\d{4} \d\d:\d\d:\d\d|Traceback \(most)")
READ = 4 << 20


@dataclass(frozen=True)
class FirstError:
    rank: int
    time: float
    approx: bool
    source: str
    line: int  # 1-based


def _scan(tl: Timeline, sid: int, done: dict | None = None) -> FirstError | None:
    """From where the last scan of this file stopped (``done``: sid -> (offset, line))."""
    meta = tl.sources[sid]
    idx = meta.index
    rank = tl.source_rank(sid)
    if rank is None:
        return None
    pos, line0 = (done or {}).get(sid, (0, 0))
    stop = idx.end
    while pos < stop:
        data = idx._read(min(READ, stop - pos), pos)
        if not data:
            break
        cut = data.rfind(b"\n") + 1 if pos + len(data) < stop else len(data)
        if cut <= 0:
            cut = len(data)
        counted = 0
        for m in _CANDIDATE.finditer(data, 0, cut):
            s = data.rfind(b"\n", 0, m.start()) + 1
            e = data.find(b"\n", s, cut)
            text = data[s:e if e >= 0 else cut][:512].decode("utf-8", "replace")
            line0 += data.count(b"\n", counted, s)
            counted = s
            f = line_facts(text, idx.year_hint, level=True)
            if "Traceback (most" in text and f.time is None:
                t = _placed_time(tl, sid)
                if t is not None:
                    return FirstError(rank, t, True, meta.name, line0 + 1)
                continue
            if f.level in ("error", "critical") and f.time is not None:
                return FirstError(rank, f.time, False, meta.name, line0 + 1)
        line0 += data.count(b"\n", counted, cut)
        pos += cut
        if done is not None:
            done[sid] = (pos, line0)
    return None


def _placed_time(tl: Timeline, sid: int) -> float | None:
    """An untimestamped file's place in the merge: after its timed sibling's last line."""
    me = tl.sources[sid].info
    for other in tl.sources:
        o = other.info
        if other.index.sid != sid and o.kind == "rank-file" and other.index.timed and \
                (o.node_key, o.attempt, o.local_rank, o.file_rank) == (me.node_key, me.attempt, me.local_rank,
                                                                       me.file_rank):
            return other.index.last_time
    return tl.sources[sid].index.last_time


def first_errors(tl: Timeline, found: dict[int, FirstError] | None = None,
                 done: dict | None = None) -> dict[int, FirstError]:
    """Per rank, its earliest first error line over its per-rank files (exact before approximate
    at the same time). ``found``/``done``: the previous answer and how far each file was read
    (following: only new bytes are read)."""
    out: dict[int, FirstError] = dict(found or {})
    have = {fe.source for fe in out.values()}
    for sid, meta in enumerate(tl.sources):
        if meta.info.kind not in ("rank-file", "exec") or meta.name in have:
            continue
        fe = _scan(tl, sid, done)
        if fe is None:
            continue
        cur = out.get(fe.rank)
        if cur is None or (fe.time, fe.approx) < (cur.time, cur.approx):
            out[fe.rank] = fe
    return out
