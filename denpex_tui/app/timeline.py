"""The merged timeline: every line of every source of the job, in time order (no Textual here).

Its order is the merge of the sources' records (:mod:`denpex_tui.core.lines.merge`): a
timestamped line and the untimestamped lines after it in its file (a traceback stays under its
message), a source without any timestamp after its timed sibling's last line or at its mtime.
The history's indexes come from the engine's history pass (the files are read once); lines that
arrive while following are read through the same reader and line facts and held for a settle
window (:data:`SETTLE_S`, by their arrival): ranks write the same moment a little apart, and the
lines of one window are merged by time among themselves before they are appended after what is
already there (the screen never reorders under the user). A line that comes later than that goes
at the end; a traceback read in two pieces stays in one (:func:`merge_runs`'s ``floor``).

Memory, per merged line: one byte (which source; two beyond 255 sources), plus four bytes in the
default view once it hides something (the console's copies of per-rank lines) and four per
console line (its rank tags); plus the sources' checkpoints (about 0.75 MB per GB) and a 4 MB
text cache. Texts are read back from the files for the rows on screen.

Row ``seq`` (a line's position in the whole merge) is stable: filtered views are lists of seqs.
Written by one builder thread, read by the screen: everything is appended, and readers only
look below ``rows`` (the committed count).
"""

from __future__ import annotations

import bisect
import os
import threading
import time
from array import array
from collections import OrderedDict
from dataclasses import dataclass
from typing import Iterable

from denpex_tui.core.lines import npy as np

from denpex_tui.core.lines.chunk import chunk_lines, untag
from denpex_tui.core.lines.index import FileIndex
from denpex_tui.core.lines.merge import Runs, merge_history, merge_runs
from denpex_tui.core.lines.reader import SourceError, read_chunks
from denpex_tui.core.model import SourceInfo
from denpex_tui.core.sources import classify, discover
from denpex_tui.core.text import SafeText, safe_line

from .spool import Spool

__all__ = ["Timeline", "View", "SourceMeta"]

BLOCK = 4096
TEXT_CACHE_BYTES = 4 << 20
SETTLE_S = 1.0  # lines that arrive while following wait this long, so their neighbours can come


@dataclass
class SourceMeta:
    name: str  # the source as the engine names it (findings' paths)
    info: SourceInfo
    index: FileIndex
    spool: str | None = None  # an --exec command's lines: the private file they are written to

    @property
    def tags(self) -> array | None:
        return self.index.tags


@dataclass
class View:
    """The rows one filter shows: ``seqs`` (ascending), or every row when None."""

    seqs: array | None = None
    name: str = "all"
    ready: bool = True

    def count(self, rows: int) -> int:
        return rows if self.seqs is None else len(self.seqs)

    def seq(self, i: int) -> int:
        return i if self.seqs is None else self.seqs[i]

    def index_of(self, seq: int, rows: int) -> int | None:
        if self.seqs is None:
            return seq if 0 <= seq < rows else None
        i = bisect.bisect_left(self.seqs, seq)
        return i if i < len(self.seqs) and self.seqs[i] == seq else None

    def index_at_or_after(self, seq: int, rows: int) -> int:
        if self.seqs is None:
            return max(0, min(seq, rows))
        return bisect.bisect_left(self.seqs, seq)


class _Rows:
    """Which source each merged row is from: a growable numpy array, one byte per row until
    the 255th source, two after."""

    def __init__(self) -> None:
        self.a = np.zeros(1 << 16, dtype=np.uint8)
        self.n = 0

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        return self.a[:self.n][i]

    def widen(self) -> None:
        if self.a.dtype == np.uint8:
            self.a = self.a.astype(np.uint16)

    def reserve(self, more: int) -> None:
        """Room for ``more`` rows, made once (a history's merge knows its line count: no doubling,
        no old and new array alive together half-way)."""
        need = self.n + more
        if need > len(self.a):
            grown = np.zeros(need, dtype=self.a.dtype)
            grown[:self.n] = self.a[:self.n]
            self.a = grown

    def extend(self, values: np.ndarray) -> None:
        need = self.n + len(values)
        if need > len(self.a):
            grown = np.zeros(max(need, 2 * len(self.a)), dtype=self.a.dtype)
            grown[:self.n] = self.a[:self.n]
            self.a = grown
        self.a[self.n:need] = values
        self.n = need

    def view(self, a: int = 0, b: int | None = None) -> np.ndarray:
        return self.a[a:self.n if b is None else min(b, self.n)]


class Timeline:
    def __init__(self) -> None:
        self.sources: list[SourceMeta] = []
        self.by_name: dict[str, int] = {}
        self.src = _Rows()
        self.ck: list[np.ndarray] = []  # per BLOCK rows: each source's line count before the block
        self.counts: list[int] = []
        self.rows = 0
        self.default = View(None, "default")  # every row, until a line is hidden
        self.file_locals: set[tuple] = set()
        self.file_ranks: set[int] = set()
        self.rank_map: dict[tuple, int] = {}
        self.building = False
        self.built = False
        self.lock = threading.RLock()  # one writer at a time (build, refresh, spool)
        self.last_time: float | None = None  # the time of the last row merged, and its file
        self.last_sid: int | None = None
        self._held: dict[int, list[tuple[int, float]]] = {}  # per source: (lines, arrived) not merged
        self._text: OrderedDict[tuple[int, int], tuple[SafeText, bool]] = OrderedDict()
        self._text_bytes = 0
        self._spool = Spool()  # --exec lines, capped on disk (app/spool.py)

    # -- sources ---------------------------------------------------------------------------

    def _add(self, name: str, info: SourceInfo, index: FileIndex | None = None, read_path: str | None = None) -> int:
        sid = len(self.sources)
        if sid == 255:
            self.src.widen()
        idx = index or FileIndex(read_path or name, sid, console=info.kind == "console")
        idx.sid = sid
        self.sources.append(SourceMeta(name, info, idx))
        self.by_name.setdefault(name, sid)
        self.by_name.setdefault(os.path.realpath(name), sid)
        self.counts.append(0)
        if info.kind in ("rank-file", "exec"):
            if info.local_rank is not None:
                self.file_locals.add((info.node_key, info.local_rank))
            r = info.file_rank if info.file_rank is not None else info.exec_rank
            if r is not None:
                self.file_ranks.add(r)
        return sid

    def sid_of(self, name: str) -> int | None:
        sid = self.by_name.get(name)
        if sid is None:
            sid = self.by_name.get(os.path.realpath(name))
        return sid

    def ensure_file(self, name: str) -> int | None:
        """A file the engine reads that the timeline does not know yet (a new attempt's log)."""
        sid = self.sid_of(name)
        if sid is not None:
            meta = self.sources[sid]
            if meta.spool is None:
                meta.index.size()  # is the name still this file?
            if meta.spool is None and meta.index.stale:  # truncated or replaced: a new generation
                sid = self._add(name, meta.info)
                self.by_name[name] = sid
                self.by_name[os.path.realpath(name)] = sid
            return sid
        if not os.path.isfile(name):
            return None
        return self._add(name, classify(name, len(self.sources)))

    # -- building --------------------------------------------------------------------------

    def adopt(self, indexes: dict[str, FileIndex], infos: dict[str, SourceInfo]) -> None:
        """The history, as the engine's history pass indexed it: merged by time."""
        with self.lock:
            self.building = True
            try:
                order = sorted(indexes, key=lambda p: infos[p].order if p in infos else 0)
                sids = [self._add(p, infos.get(p) or classify(p), indexes[p]) for p in order]
                for sid in sids:
                    self.sources[sid].index.size()  # its identity, for the stale check
                self.src.reserve(sum(self.sources[sid].index.lines for sid in sids))
                for runs in merge_history([self.sources[s].index for s in sids], sids, self._place):
                    self._append(runs)
            finally:
                self.building = False
                self.built = True

    def add_paths(self, paths: list[str]) -> None:
        """Sources to index here (without an engine): read by :meth:`build`."""
        try:
            found = discover(paths).sources
        except Exception:  # a bad path: the engine reports it; the timeline just has less
            found = []
        for info in found:
            self._add(info.path, info)

    def build(self, progress=None) -> None:
        """Index and merge the history of the sources added (no engine: the tests, a tool)."""
        with self.lock:
            self.building = True
            try:
                sids = list(range(len(self.sources)))
                for sid in sids:
                    self._read_new(sid, final=True)
                self._merge(sids)
            finally:
                self.building = False
                self.built = True

    def _read_new(self, sid: int, final: bool = False) -> bool:
        """Index what the file has beyond what is indexed, through the one reader."""
        meta = self.sources[sid]
        idx = meta.index
        size = idx.size()
        if idx.stale or size <= idx.end:
            return False
        box: dict = {}
        try:
            for off, data in read_chunks(idx.path, start=idx.end, partial_tail=final, progress=box):
                idx.add(chunk_lines(off, data, console=idx.console, year_hint=idx.year_hint, src=meta.info))
        except SourceError:
            return False
        idx.end = box.get("stop", idx.end)
        return True

    def _place(self, sid: int) -> float:
        """Where a file without any timestamp goes: right after its timed sibling's last line
        (a rank's stderr traceback after its stdout), else at its last write."""
        me = self.sources[sid].info
        for other in self.sources:
            o = other.info
            if other.index.sid == sid or o.kind in ("error-json", "console") or not other.index.timed:
                continue
            if (o.node_key, o.attempt, o.local_rank, o.file_rank) == (me.node_key, me.attempt, me.local_rank,
                                                                      me.file_rank):
                return other.index.last_time
        return self.sources[sid].index.mtime()

    def _merge(self, sids: list[int], upto: list[int | None] | None = None, *, follow: bool = False) -> int:
        """Merge these sources' pending lines; ``follow``: after rows already shown (the floor)."""
        return self._append(merge_runs([self.sources[s].index for s in sids], sids, self._place, upto=upto,
                                       floor=self.last_time if follow and self.rows else None, lead=self.last_sid))

    def _append(self, runs: Runs) -> int:
        n = self.append_runs(runs)
        if n:
            if runs.last_time is not None and runs.last_time == runs.last_time:  # not NaN
                self.last_time = runs.last_time
            self.last_sid = int(runs.sids[-1])
        return n

    # -- following: the settle window --------------------------------------------------------

    def _arrived(self, sid: int, now: float) -> None:
        if len(self.sources[sid].index.rec_line):  # new whole lines, not only a partial one
            self._held.setdefault(sid, []).append((self.sources[sid].index.lines, now))

    @property
    def holding(self) -> bool:
        """Some lines were read but wait for their settle window."""
        return bool(self._held)

    def due(self) -> float | None:
        """When (``time.monotonic()``) the oldest held lines are to be merged."""
        with self.lock:
            first = min((marks[0][1] for marks in self._held.values()), default=None)
            return None if first is None else first + SETTLE_S

    def settle(self, now: float | None = None, *, all_: bool = False) -> int:
        """Merge the held lines whose window has passed (every one with ``all_``), and with them
        every held line of no later time (its neighbours, whatever their arrival): by time among
        themselves, after the rows there are. Returns the number of new rows."""
        with self.lock:
            now = time.monotonic() if now is None else now
            pending = {sid: self._pending_times(sid) for sid in self._held}
            for sid in [s for s, (first, _t) in pending.items() if not len(first)]:
                del self._held[sid], pending[sid]  # nothing left to merge (merged with a neighbour's)
            mark = None  # the latest time among the ripe lines
            for sid, marks in self._held.items():
                ripe = [m for m in marks if all_ or now - m[1] >= SETTLE_S]
                if ripe:
                    first, t = pending[sid]
                    t = t[first < ripe[-1][0]]
                    if len(t):
                        mark = float(t.max()) if mark is None else max(mark, float(t.max()))
            if mark is None:
                return 0
            sids, upto = [], []
            for sid in sorted(self._held):
                first, t = pending[sid]
                k = int(np.searchsorted(t, mark, side="right"))  # a file's times never go back
                if not k:
                    continue
                end = None if k == len(first) else int(first[k])
                sids.append(sid)
                upto.append(end)
                rest = [] if end is None else [m for m in self._held[sid] if m[0] > end]
                if rest:
                    self._held[sid] = rest
                else:
                    del self._held[sid]
            return self._merge(sids, upto, follow=True) if sids else 0

    def _pending_times(self, sid: int) -> tuple[np.ndarray, np.ndarray]:
        """A source's records not merged yet, untimed ones at the time they are placed at."""
        first, t = self.sources[sid].index.pending()
        nan = np.isnan(t)
        if nan.any():
            at = self._place(sid)
            t[nan] = np.inf if at is None else at
        return first, t

    def append_runs(self, runs: Runs) -> int:
        """The next lines of these sources, in this order, at the end of the merge."""
        if not len(runs):
            return 0
        n_new = int(runs.counts.sum())
        start = self.rows
        sids_rows = np.repeat(runs.sids.astype(self.src.a.dtype), runs.counts)
        # checkpoints: each source's count before every block that starts in the new rows
        n_src = len(self.sources)
        counts = np.array(self.counts, dtype=np.int64)
        first_block = -(-start // BLOCK)
        blocks = range(first_block * BLOCK, start + n_new, BLOCK)
        if len(blocks):
            rel = np.array(blocks, dtype=np.int64) - start
            per = np.zeros((len(rel) + 1, n_src), dtype=np.int64)
            bounds = np.concatenate([[0], rel, [n_new]])
            for k in range(len(rel)):
                seg = sids_rows[bounds[k]:bounds[k + 1]]
                per[k + 1] = per[k] + np.bincount(seg, minlength=n_src)[:n_src]
            for k in range(len(rel)):
                self.ck.append(counts + per[k + 1])
        # the default view: a console's copies of per-rank lines are hidden
        self._extend_default(sids_rows, start, counts)
        self.src.extend(sids_rows)
        self.counts = (counts + np.bincount(sids_rows, minlength=n_src)[:n_src]).tolist()
        self.rows = start + n_new
        return n_new

    def _extend_default(self, sids_rows: np.ndarray, start: int, counts: np.ndarray) -> None:
        d = self.default
        hide = np.zeros(len(sids_rows), dtype=bool)
        for sid in np.distinct(sids_rows).tolist():
            meta = self.sources[sid]
            if meta.info.kind == "error-json":
                hide |= sids_rows == sid
            elif meta.info.kind == "console" and meta.tags is not None:
                at = np.flatnonzero(sids_rows == sid)
                tags = np.frombuffer(meta.tags, dtype=np.int32)[counts[sid]:counts[sid] + len(at)]
                mask = self._copy_mask(sid, tags)
                hide[at[:len(mask)]] = mask
        if d.seqs is None and not hide.any():
            return
        if d.seqs is None:
            d.seqs = array("I", range(start))
        keep = np.flatnonzero(~hide) + start
        d.seqs.frombytes(keep.astype(np.uint32).tobytes())

    def _copy_mask(self, sid: int, tags: np.ndarray) -> np.ndarray:
        uniq = np.distinct(tags)
        copies = np.array([t for t in uniq.tolist() if self.is_copy(sid, t)], dtype=np.int32)
        return np.isin(tags, copies) if len(copies) else np.zeros(len(tags), bool)

    def refresh(self, names: Iterable[str] | None = None, now: float | None = None) -> int:
        """Lines written since the last look (following): read and held for their settle
        window, then merged (:meth:`settle`). Returns the number of new rows."""
        with self.lock:
            now = time.monotonic() if now is None else now
            sids = range(len(self.sources)) if names is None else {s for n in names
                                                                    if (s := self.ensure_file(n)) is not None}
            for sid in sorted(sids):
                if self.sources[sid].spool is None and self._read_new(sid):
                    self._arrived(sid, now)
            self.recheck()
            return self.settle(now)

    def recheck(self, names: Iterable[str] = ()) -> None:
        """After a source event (deleted, replaced, rotated, truncated): does each name still lead
        to its lines? Old generations read through their open file are let go once deleted."""
        with self.lock:
            for name in names:
                sid = self.sid_of(name)
                if sid is not None and self.sources[sid].spool is None:
                    self.sources[sid].index.size()
            for m in self.sources:
                m.index.recheck()

    def gone(self) -> list[int]:
        """Sources whose lines can no longer be read back (deleted, truncated): not in views."""
        return [sid for sid, m in enumerate(self.sources) if m.index.gone is not None]

    def spool(self, name: str, texts: list[str], info: SourceInfo | None = None) -> None:
        """Lines of a source that is no file (an ``--exec`` command), kept in a private file."""
        with self.lock:
            sid = self.sid_of(name)
            if sid is None:
                path = self._spool.path(len(self.sources))
                sid = self._add(name, info or SourceInfo(path=name, kind="exec"), read_path=path)
                self.sources[sid].spool = path
            self._spool.write(self.sources[sid].spool, texts)
            now = time.monotonic()
            if self._read_new(sid):
                self._arrived(sid, now)
            self.settle(now)

    def close(self) -> None:
        for m in self.sources:
            m.index.close()
        self._spool.close()

    # -- rank of a line --------------------------------------------------------------------

    def rank_of_tag(self, sid: int, tag: int) -> int | None:
        rank, local = untag(tag)
        if local is not None:
            g = self.rank_map.get((self.sources[sid].info.node_key, local))
            if g is not None:
                return g
        return rank

    def source_rank(self, sid: int) -> int | None:
        info = self.sources[sid].info
        if info.file_rank is not None:
            return info.file_rank
        if info.exec_rank is not None:
            return info.exec_rank
        if info.local_rank is not None:
            return self.rank_map.get((info.node_key, info.local_rank))
        return None

    def is_copy(self, sid: int, tag: int) -> bool:
        """A console line that has its own per-rank file: hidden by default."""
        rank, local = untag(tag)
        if local is not None and (self.sources[sid].info.node_key, local) in self.file_locals:
            return True
        return rank is not None and rank in self.file_ranks

    # -- where a row is --------------------------------------------------------------------

    def locate(self, seq: int) -> tuple[int, int]:
        """(source, 0-based line in it) of merged row ``seq`` (< rows)."""
        sid = int(self.src.a[seq])
        c = seq // BLOCK
        ck = self.ck[c]
        base = int(ck[sid]) if sid < len(ck) else 0
        a = c * BLOCK
        return sid, base + int(np.count_nonzero(self.src.a[a:seq] == sid))

    def seq_of_line(self, sid: int, line0: int) -> int | None:
        """The merged row of (0-based) line ``line0`` of source ``sid``."""
        if line0 < 0 or line0 >= (self.counts[sid] if sid < len(self.counts) else 0):
            return None
        lo, hi = 0, len(self.ck) - 1
        if hi < 0:
            return None
        while lo < hi:  # the last block whose start count is <= line0
            mid = (lo + hi + 1) // 2
            ck = self.ck[mid]
            if (ck[sid] if sid < len(ck) else 0) <= line0:
                lo = mid
            else:
                hi = mid - 1
        ck = self.ck[lo]
        need = line0 - (int(ck[sid]) if sid < len(ck) else 0)
        a = lo * BLOCK
        hits = np.flatnonzero(self.src.view(a, a + BLOCK) == sid)
        return int(a + hits[need]) if need < len(hits) else None

    def seq_of(self, name: str, line: int) -> int | None:
        """The merged row of 1-based ``line`` of source ``name`` (the engine's numbering)."""
        sid = self.sid_of(name)
        return None if sid is None else self.seq_of_line(sid, line - 1)

    def rows_of(self, sid: int) -> np.ndarray:
        """Every merged row of source ``sid``, ascending (its lines in order)."""
        return np.flatnonzero(self.src.view() == sid)

    # -- text ------------------------------------------------------------------------------

    def text(self, seq: int) -> tuple[SafeText, bool]:
        sid, line0 = self.locate(seq)
        return self.text_of(sid, line0)

    def text_of(self, sid: int, line0: int) -> tuple[SafeText, bool]:
        key = (sid, line0)
        hit = self._text.get(key)
        if hit is not None:
            self._text.move_to_end(key)
            return hit
        self.prefetch_lines(sid, line0, 1)
        return self._text.get(key) or (SafeText(""), False)

    def prefetch(self, seqs: Iterable[int]) -> None:
        """Read the lines of these rows from their files, one read per run of a source."""
        want: dict[int, list[int]] = {}
        for seq in seqs:
            if 0 <= seq < self.rows:
                sid, l0 = self.locate(seq)
                if (sid, l0) not in self._text:
                    want.setdefault(sid, []).append(l0)
        for sid, ls in want.items():
            ls.sort()
            start = prev = ls[0]
            for l0 in ls[1:] + [None]:
                if l0 is not None and l0 <= prev + 4:
                    prev = l0
                    continue
                self.prefetch_lines(sid, start, prev - start + 1)
                if l0 is not None:
                    start = prev = l0

    def prefetch_lines(self, sid: int, line0: int, count: int) -> None:
        meta = self.sources[sid]
        if meta.index.gone is not None:  # shown in the unfiltered view only: say why it is empty
            name = safe_line(os.path.basename(meta.name)).text
            got = [(f"[{name} was {meta.index.gone}: its earlier lines can no longer be read]".encode(), False)
                   ] * max(0, min(count, meta.index.lines - line0))
        else:
            got = meta.index.read_lines(line0, count)
        for j, (raw, cut) in enumerate(got):
            st = safe_line(raw)
            key = (sid, line0 + j)
            if key not in self._text:
                self._text[key] = (st, cut)
                self._text_bytes += len(st.text) + 64
        while self._text_bytes > TEXT_CACHE_BYTES and self._text:
            _k, (st, _c) = self._text.popitem(last=False)
            self._text_bytes -= len(st.text) + 64

    def forget_text(self) -> None:
        self._text.clear()
        self._text_bytes = 0

    # -- views: app/timeviews.py builds them over this merge ------------------------------------

    def set_rank_map(self, rank_map: dict[tuple, int]) -> str | None:
        """Global ranks of local ones (the job's resolver): per-rank files of log-dir trees then
        count as files of their global rank. ``"copies"`` when that changes what is a copy,
        ``"tags"`` when only the ranks rows show change, None when nothing changes."""
        with self.lock:
            if rank_map == self.rank_map:
                return None
            self.rank_map = dict(rank_map)
            ranks = set(self.file_ranks)
            for m in self.sources:
                if m.info.kind in ("rank-file", "exec") and m.info.local_rank is not None:
                    g = self.rank_map.get((m.info.node_key, m.info.local_rank))
                    if g is not None:
                        ranks.add(g)
            if ranks == self.file_ranks:
                return "tags"
            self.file_ranks = ranks
            return "copies"
