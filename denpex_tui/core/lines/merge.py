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
from typing import Callable, Iterator, Sequence

from denpex_tui.core.lines import npy as np

from .index import FileIndex

__all__ = ["Runs", "merge_runs", "merge_history", "BATCH_RECORDS"]


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
    return _runs(w[order], c[order], last_time)


def _runs(sids_o: np.ndarray, counts_o: np.ndarray, last_time: float | None) -> Runs:
    """Records in merged order as runs: consecutive records of one file are one run."""
    if len(sids_o) > 1:
        brk = np.flatnonzero(sids_o[1:] != sids_o[:-1]) + 1
        starts = np.concatenate([[0], brk])
        counts_o = np.add.reduceat(counts_o, starts)
        sids_o = sids_o[starts]
    keep = counts_o > 0
    return Runs(sids_o[keep].astype(np.int32), counts_o[keep].astype(np.int64), last_time)


BATCH_RECORDS = 1 << 17  # records sorted at once by the history's merge (1 GB job: 2.6 MB of keys a slice)


def merge_history(indexes: Sequence[FileIndex], sids: Sequence[int],
                  place: Callable[[int], float], batch: int | None = None) -> Iterator[Runs]:
    """The whole history's records merged in the order :func:`merge_runs` gives them (no
    ``upto``, no ``floor``), in slices of about ``batch`` records read in place from the
    indexes: the arrays of one sort (about 30 bytes a record) are made for a slice, not for
    the whole job (a 1 GB job of 5.7 M records: 165 MB above the records themselves).

    The merged order sorts records by (time, untimed, file), a file's own records in order; a
    slice ends at such a key (a sample of the records gives the keys), so records of one time
    are split between slices by file, and the slices put end to end are the one sort. The
    indexes' records are let go at the end, as :meth:`FileIndex.take_records` does."""
    batch = batch or BATCH_RECORDS
    files = []
    whole = False
    for sid, idx in sorted(zip(sids, indexes), key=lambda x: x[0]):
        if not len(idx.rec_line):
            continue
        first = idx.record_lines()
        t = np.frombuffer(idx.rec_time, dtype=np.float64)
        nan = np.isnan(t)
        tie = None  # every record timed (most files): no array of zeros kept for the merge
        if nan.any():  # an untimed file's lines: at its placing time, after the timed ones
            t = t.copy()
            t[nan] = place(sid)
            tie = nan.astype(np.int8)
        del nan
        if len(t) > 1 and ((t[1:] < t[:-1]).any() or (tie is not None and (
                (t[1:] == t[:-1]) & (tie[1:] < tie[:-1])).any())):
            whole = True  # a file's records out of the merge's order: one sort of everything
        files.append([sid, first, t, tie, idx.lines, 0])
    total = sum(len(f[1]) for f in files)
    try:
        if not total:
            return
        cuts: list = [None]  # None: everything left
        k = 1 if whole else -(-total // batch)
        if k > 1:
            st = np.concatenate([f[2][::64] for f in files])
            sk = np.concatenate([_ties(f[3], len(f[2]))[::64] for f in files])
            ss = np.concatenate([np.full(len(f[2][::64]), f[0], np.int64) for f in files])
            o = np.lexsort((ss, sk, st))
            picks = o[(np.arange(1, k) * len(o)) // k]
            keys = sorted({(float(st[i]), int(sk[i]), int(ss[i])) for i in picks.tolist()})
            cuts = keys + cuts
        wide = np.uint16 if max(f[0] for f in files) < 0xFFFF else np.int32
        for cut in cuts:
            ts, ties, ws, cs = [], [], [], []
            for f in files:
                sid, first, t, tie, end, at = f
                upto = len(t) if cut is None else _before(t, tie, sid, cut)
                if upto <= at:
                    continue
                c = np.empty(upto - at, np.int64)
                c[:-1] = first[at + 1:upto] - first[at:upto - 1]
                c[-1] = (int(first[upto]) if upto < len(first) else end) - int(first[upto - 1])
                ts.append(t[at:upto])
                ties.append(_ties(tie, upto - at) if tie is None else tie[at:upto])
                ws.append(np.full(upto - at, sid, dtype=wide))
                cs.append(c)
                f[5] = upto
            if not ts:
                continue
            tt, tb = np.concatenate(ts), np.concatenate(ties)
            del ts, ties
            order = np.lexsort((tb, tt)) if tb.any() else np.argsort(tt, kind="stable")
            last_time = float(tt[order[-1]])
            del tt, tb
            runs = _runs(np.concatenate(ws)[order], np.concatenate(cs)[order], last_time)
            del ws, cs, order
            yield runs
    finally:
        del files
        for idx in indexes:
            idx.drop_records()


def _ties(tie: np.ndarray | None, n: int) -> np.ndarray:
    """A file's untimed marks (1: placed, not timed); ``None``: all n records are timed."""
    return np.zeros(n, np.int8) if tie is None else tie


def _before(t: np.ndarray, tie: np.ndarray | None, sid: int, cut: tuple[float, int, int]) -> int:
    """How many of a file's records (sorted by time, then untimed) come before the key ``cut``
    (time, untimed, file) in the merged order."""
    ct, ck, cs = cut
    lo = int(np.searchsorted(t, ct, side="left"))
    hi = int(np.searchsorted(t, ct, side="right"))
    # the time's timed records, then its untimed
    z = hi if tie is None else lo + int(np.count_nonzero(tie[lo:hi] == 0))
    if ck == 0:
        return z if sid < cs else lo
    return hi if sid < cs else z
