"""The merged timeline's order: a k-way merge of the files' records by time, in numpy.

Each file's index holds its records (:mod:`.index`): sorted by time within the file, since a
file's time never goes backwards. The merge sorts all records of all files by (time, placement,
file, position), stably, in compiled code, and gives the merged order as runs: which file, how
many of its next lines. A file with no timestamp at all keeps its line order and goes right
after its timed sibling's last line (a rank's stderr traceback after its stdout), or at its
last write (mtime) when it has no sibling.

Merging more lines after rows already shown (following), ``floor`` is the time of the last row
shown: a record with an earlier time came late and goes at the floor, never above what is on
screen; among records at the floor, the file of the last row shown goes first, so a traceback
whose lines came in two reads stays in one piece.

Memory: the records are taken one file at a time into arrays made once for all of them (time,
placement, file, line count: 15 bytes a record, not the 60-odd of per-file pieces joined), and
laid out by file, so a stable sort on (time, placement) alone gives the file order of ties.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from denpex_tui.core.lines import npy as np

from .index import FileIndex

__all__ = ["Runs", "merge_runs"]


@dataclass(slots=True)
class Runs:
    sids: np.ndarray  # file of each run, in merged order
    counts: np.ndarray  # lines of each run
    last_time: float | None = None  # the time the merge ends at (of its last record)

    def __len__(self) -> int:
        return len(self.sids)


def merge_runs(indexes: Sequence[FileIndex], sids: Sequence[int],
               place: Callable[[int], float], *, upto: Sequence[int | None] | None = None,
               floor: float | None = None, lead: int | None = None) -> Runs:
    """Take the pending records of these indexes (with ``upto``, each one's lines before that
    line only) and merge them. ``place(sid)`` gives the time an untimed file is put at (its
    sibling's last line, else its mtime); ``floor`` and ``lead``: the time and file of the last
    row already merged (see the module's docstring)."""
    ups = list(upto) if upto is not None else [None] * len(sids)
    pairs = sorted(zip(sids, range(len(sids)), indexes, ups), key=lambda x: (x[0], x[1]))  # by file
    total = sum(len(idx.rec_line) for _s, _i, idx, _u in pairs)
    if not total:
        for _s, _i, idx, up in pairs:
            idx.take_records(up)
        return Runs(np.empty(0, np.int32), np.empty(0, np.int64), floor)
    t = np.empty(total, np.float64)
    tie = np.zeros(total, np.int8)
    w = np.empty(total, np.uint16 if max(s for s, _i, _x, _u in pairs) < 0xFFFF else np.int32)
    c = np.empty(total, np.int32 if max(idx.lines for _s, _i, idx, _u in pairs) < 2**31 - 1 else np.int64)
    at = 0
    for sid, _i, idx, up in pairs:
        first, tt, end = idx.take_records(up)  # one file's records at a time
        n = len(first)
        if not n:
            continue
        seg = slice(at, at + n)
        c[seg][:-1] = np.diff(first)
        c[at + n - 1] = end - first[-1]
        nan = np.isnan(tt)
        if nan.any():
            tt[nan] = place(sid)
            tie[seg][nan] = 1
        t[seg] = tt
        w[seg] = sid
        at += n
    t, tie, w, c = t[:at], tie[:at], w[:at], c[:at]
    if not at:
        return Runs(np.empty(0, np.int32), np.empty(0, np.int64), floor)
    if floor is None:
        order = np.lexsort((tie, t)) if tie.any() else np.argsort(t, kind="stable")
    else:  # after rows already shown: late records at the floor, the last row's file first
        clamped = np.maximum(t, floor)
        behind = (w != (-1 if lead is None else lead)).astype(np.int8)
        order = np.lexsort((tie, t, behind, clamped))
        t = clamped
    last_time = float(t[order[-1]])
    del t, tie
    sids_o, counts_o = w[order], c[order]
    del order
    # consecutive records of one file are one run
    if len(sids_o) > 1:
        brk = np.flatnonzero(sids_o[1:] != sids_o[:-1]) + 1
        starts = np.concatenate([[0], brk])
        counts_o = np.add.reduceat(counts_o, starts)
        sids_o = sids_o[starts]
    keep = counts_o > 0
    return Runs(sids_o[keep].astype(np.int32), counts_o[keep].astype(np.int64), last_time)
