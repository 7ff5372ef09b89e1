"""The k-way merge of the sources' histories by time (no Textual here).

Each source yields records (a timestamped line and the untimestamped lines after it, see
:mod:`~denpex_tui.app.lineindex`); a heap keyed by (time, source) takes the earliest record
next. A source with no timestamp at all goes right after its timed sibling's last line (a rank's
stderr traceback after its stdout), or at its last write (mtime) when it has none. A job of one
big file is indexed without reading its lines' times (nothing to merge with).
"""

from __future__ import annotations

import heapq
from typing import Callable

from .lineindex import READ, Record
from .timeline import FAST_BYTES, Timeline

__all__ = ["merge_history"]

MERGE_READ_BYTES = 16 << 20  # read buffers of all the merged sources together (each holds its last read)


def merge_history(tl: Timeline, progress: Callable[[], None] | None) -> None:
    """Index and merge every source's history into ``tl`` (the builder thread)."""
    stops = {sid: m.index.size() for sid, m in enumerate(tl.sources)}
    if len(tl.sources) == 1 and stops[0] >= FAST_BYTES:
        idx = tl.sources[0].index
        while idx.end < stops[0]:
            before = idx.lines
            stop = min(stops[0], idx.end + (32 << 20))
            idx.count_to(stop, final=stop == stops[0])
            if idx.lines == before:
                break
            tl._append(0, idx.lines - before, None)
            if progress:
                progress()
        return
    heap: list = []
    read = max(4 << 10, min(READ, MERGE_READ_BYTES // max(1, len(tl.sources))))
    gens = {sid: m.index.records(stops[sid], read=read) for sid, m in enumerate(tl.sources)}
    firsts = {sid: next(g, None) for sid, g in gens.items()}
    waiting: dict[int, list] = {}  # untimed sources placed after a timed sibling's last line
    for sid, rec in firsts.items():
        if rec is None:
            continue
        if rec.time is None:
            sib = _sibling(tl, sid, firsts)
            if sib is not None:
                waiting.setdefault(sib, []).append((sid, rec))
                continue
        heapq.heappush(heap, (_key(tl, sid, rec), sid, rec))
    n = 0
    while heap:
        _t, sid, rec = heapq.heappop(heap)
        tl._append(sid, rec.lines, rec.tags)
        nxt = next(gens[sid], None)
        if nxt is not None:
            heapq.heappush(heap, (_key(tl, sid, nxt), sid, nxt))
        else:
            for wsid, wrec in waiting.pop(sid, ()):
                heapq.heappush(heap, (tl.sources[sid].index.last_time or _key(tl, wsid, wrec), wsid, wrec))
        n += rec.lines
        if n >= 50_000:
            n = 0
            if progress:
                progress()


def _key(tl: Timeline, sid: int, rec: Record) -> float:
    return rec.time if rec.time is not None else tl.sources[sid].index.mtime()


def _sibling(tl: Timeline, sid: int, firsts: dict) -> int | None:
    """A timed source of the same rank (a stderr.log's stdout.log)."""
    me = tl.sources[sid].info
    for other, rec in firsts.items():
        if other == sid or rec is None or rec.time is None:
            continue
        o = tl.sources[other].info
        if o.kind == "error-json" or o.kind == "console":
            continue
        if (o.node_key, o.attempt, o.local_rank, o.file_rank) == (me.node_key, me.attempt, me.local_rank,
                                                                  me.file_rank):
            return other
    return None
