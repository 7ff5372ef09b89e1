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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

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
    times, ties, who, counts = [], [], [], []
    for k, (idx, sid) in enumerate(zip(indexes, sids)):
        first, t, end = idx.take_records(None if upto is None else upto[k])
        if not len(first):
            continue
        c = np.diff(np.append(first, end))
        nan = np.isnan(t)
        tie = np.zeros(len(t), dtype=np.int8)
        if nan.any():
            t = t.copy()
            t[nan] = place(sid)
            tie[nan] = 1
        times.append(t)
        ties.append(tie)
        who.append(np.full(len(t), sid, dtype=np.int32))
        counts.append(c)
    if not times:
        return Runs(np.empty(0, np.int32), np.empty(0, np.int64), floor)
    t = np.concatenate(times)
    tie = np.concatenate(ties)
    w = np.concatenate(who)
    c = np.concatenate(counts)
    if floor is None:
        order = np.lexsort((w, tie, t))  # stable: a file's records keep their order
    else:
        at = np.maximum(t, floor)
        behind = (w != (-1 if lead is None else lead)).astype(np.int8)  # the last row's file first
        order = np.lexsort((w, tie, t, behind, at))
        t = at
    sids_o, counts_o = w[order], c[order]
    last_time = float(t[order[-1]])
    # consecutive records of one file are one run
    if len(sids_o) > 1:
        brk = np.flatnonzero(sids_o[1:] != sids_o[:-1]) + 1
        starts = np.concatenate([[0], brk])
        counts_o = np.add.reduceat(counts_o, starts)
        sids_o = sids_o[starts]
    keep = counts_o > 0
    return Runs(sids_o[keep], counts_o[keep], last_time)
