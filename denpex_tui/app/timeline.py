"""The merged timeline: every line of every source of the job, in time order (no Textual here).

A k-way merge by timestamp over the sources' records (a timestamped line and the untimestamped
lines after it, see :mod:`~denpex_tui.app.lineindex`): a traceback stays under its message in
its own source; a source with no timestamp at all keeps its line order and is placed at its
last write (mtime). Lines that arrive while following are merged by time within each refresh
and appended after what is already there (the screen never reorders under the user).

Memory, per merged line: one byte (which source; two beyond 255 sources), plus four bytes in
the default view once it hides something (the console's copies of per-rank lines) and four per
console line (its rank tags); plus the sources' checkpoints (about 0.75 MB per GB) and a 4 MB
text cache. For lines of ~130 bytes (~8 M lines per GB): ~8 MB per GB for plain rank files,
up to ~70 MB per GB for a torchrun console with per-rank files; texts are read back from the
files for the rows on screen.

Row ``seq`` (a line's position in the whole merge) is stable: filtered views are lists of seqs.
Written by one builder thread, read by the screen: everything is appended, and readers only
look below ``rows`` (the committed count).
"""

from __future__ import annotations

import bisect
import os
import threading
from array import array
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, Iterable

from denpex_tui.core.model import SourceInfo
from denpex_tui.core.sources import classify, discover
from denpex_tui.core.text import SafeText, safe_line

from .lineindex import FileIndex, Record
from .spool import Spool

__all__ = ["Timeline", "View", "SourceMeta"]

BLOCK = 4096
FAST_BYTES = 64 << 20  # a job of one file this big is indexed without reading its lines' times
TEXT_CACHE_BYTES = 4 << 20


@dataclass
class SourceMeta:
    name: str  # the source as the engine names it (findings' paths)
    info: SourceInfo
    index: FileIndex
    tags: array | None = None  # consoles: rank tag per line (None: not read yet)
    spool: str | None = None  # an --exec command's lines: the private file they are written to


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


class Timeline:
    def __init__(self) -> None:
        self.sources: list[SourceMeta] = []
        self.by_name: dict[str, int] = {}
        self.src: bytearray | array = bytearray()
        self.ck: list[array] = []  # per BLOCK rows: each source's line count before the block
        self.counts: list[int] = []
        self.rows = 0
        self.default = View(None, "default")  # every row, until a line is hidden
        self.file_locals: set[tuple] = set()
        self.file_ranks: set[int] = set()
        self.rank_map: dict[tuple, int] = {}
        self.building = False
        self.built = False
        self.lock = threading.RLock()  # one writer at a time (build, refresh, spool)
        self._text: OrderedDict[tuple[int, int], tuple[SafeText, bool]] = OrderedDict()
        self._text_bytes = 0
        self._spool = Spool()  # --exec lines, capped on disk (app/spool.py)

    # -- sources ---------------------------------------------------------------------------

    def add_paths(self, paths: list[str]) -> None:
        try:
            found = discover(paths).sources
        except Exception:  # a bad path: the engine reports it; the timeline just has less
            found = []
        for info in found:
            self._add(info.path, info)

    def _add(self, name: str, info: SourceInfo, read_path: str | None = None) -> int:
        sid = len(self.sources)
        if sid == 255 and isinstance(self.src, bytearray):
            self.src = array("H", self.src)
        console = info.kind == "console"
        meta = SourceMeta(name, info, FileIndex(read_path or name, sid, console=console))
        self.sources.append(meta)
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
            if meta.spool is None and meta.index.stale:  # truncated or replaced: a new generation
                sid = self._add(name, meta.info)
                self.by_name[name] = sid
                self.by_name[os.path.realpath(name)] = sid
            return sid
        if not os.path.isfile(name):
            return None
        return self._add(name, classify(name, len(self.sources)))

    # -- rank of a line --------------------------------------------------------------------

    def rank_of_tag(self, sid: int, tag: int) -> int | None:
        local = (tag >> 16) - 1
        if local >= 0:
            g = self.rank_map.get((self.sources[sid].info.node_key, local))
            if g is not None:
                return g
        r = (tag & 0xFFFF) - 1
        return r if r >= 0 else None

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
        local = (tag >> 16) - 1
        if local >= 0 and (self.sources[sid].info.node_key, local) in self.file_locals:
            return True
        r = (tag & 0xFFFF) - 1
        return r >= 0 and r in self.file_ranks

    # -- building --------------------------------------------------------------------------

    def _append(self, sid: int, n: int, tags: list[int] | None) -> None:
        """n lines of source sid (its next ones) at the end of the merge."""
        meta = self.sources[sid]
        start = self.rows
        left = n
        while left:
            if start % BLOCK == 0:
                self.ck.append(array("Q", self.counts))
            take = min(left, BLOCK - start % BLOCK)
            if isinstance(self.src, bytearray):
                self.src.extend(bytes((sid,)) * take)
            else:
                self.src.extend([sid] * take)
            self.counts[sid] += take
            start += take
            left -= take
        kind = meta.info.kind
        d = self.default
        if kind == "console" and tags is not None:
            if meta.tags is None:
                meta.tags = array("i")
            meta.tags.extend(tags)
            hidden = [self.is_copy(sid, t) for t in tags]
            if any(hidden) and d.seqs is None:  # the first hidden line: the view becomes a list
                d.seqs = array("I", range(self.rows))
            if d.seqs is not None:
                d.seqs.extend(self.rows + j for j, h in enumerate(hidden) if not h)
        elif kind == "error-json":
            if d.seqs is None:
                d.seqs = array("I", range(self.rows))
        elif d.seqs is not None:
            d.seqs.extend(range(self.rows, self.rows + n))
        self.rows = start

    def build(self, progress: Callable[[], None] | None = None) -> None:
        """Index and merge every source's history (the builder thread)."""
        with self.lock:
            self.building = True
            try:
                self._build(progress)
            finally:
                self.building = False
                self.built = True

    def _build(self, progress) -> None:
        from .merge import merge_history

        merge_history(self, progress)

    def refresh(self, names: Iterable[str] | None = None) -> int:
        """Lines written since the last look (following): merged by time among themselves,
        appended. Returns the number of new rows."""
        with self.lock:
            sids = range(len(self.sources)) if names is None else {s for n in names
                                                                    if (s := self.ensure_file(n)) is not None}
            recs: list[tuple[float, int, int, Record]] = []
            for sid in sorted(sids):
                meta = self.sources[sid]
                if meta.spool is not None or meta.index.stale:
                    continue
                size = meta.index.size()
                if meta.index.stale:
                    continue
                if size <= meta.index.end:
                    continue
                order = 0
                for rec in meta.index.records(size, final=False):
                    recs.append((rec.time if rec.time is not None else float("-inf"), sid, order, rec))
                    order += 1
            recs.sort(key=lambda r: r[:3])
            before = self.rows
            for _t, sid, _o, rec in recs:
                self._append(sid, rec.lines, rec.tags if self.sources[sid].info.kind == "console" else None)
            return self.rows - before

    def spool(self, name: str, texts: list[str], info: SourceInfo | None = None) -> None:
        """Lines of a source that is no file (an ``--exec`` command), kept in a private file."""
        with self.lock:
            sid = self.sid_of(name)
            if sid is None:
                path = self._spool.path(len(self.sources))
                sid = self._add(name, info or SourceInfo(path=name, kind="exec"), read_path=path)
                self.sources[sid].spool = path
            self._spool.write(self.sources[sid].spool, texts)
            idx = self.sources[sid].index
            before = idx.lines
            idx.count_to(idx.size())
            self._append(sid, idx.lines - before, None)

    def close(self) -> None:
        for m in self.sources:
            m.index.close()
        self._spool.close()

    # -- where a row is --------------------------------------------------------------------

    def locate(self, seq: int) -> tuple[int, int]:
        """(source, 0-based line in it) of merged row ``seq`` (< rows)."""
        sid = self.src[seq]
        c = seq // BLOCK
        ck = self.ck[c]
        base = ck[sid] if sid < len(ck) else 0
        a = c * BLOCK
        if isinstance(self.src, bytearray):
            return sid, base + self.src.count(bytes((sid,)), a, seq)
        return sid, base + sum(1 for i in range(a, seq) if self.src[i] == sid)

    def seq_of_line(self, sid: int, line0: int) -> int | None:
        """The merged row of (0-based) line ``line0`` of source ``sid``."""
        if line0 < 0:
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
        need = line0 - (ck[sid] if sid < len(ck) else 0)
        a = lo * BLOCK
        end = min(self.rows, a + BLOCK)
        if isinstance(self.src, bytearray):
            b = bytes((sid,))
            i = self.src.find(b, a, end)
            while i >= 0 and need:
                need -= 1
                i = self.src.find(b, i + 1, end)
            return i if i >= 0 else None
        for i in range(a, end):
            if self.src[i] == sid:
                if not need:
                    return i
                need -= 1
        return None

    def seq_of(self, name: str, line: int) -> int | None:
        """The merged row of 1-based ``line`` of source ``name`` (the engine's numbering)."""
        sid = self.sid_of(name)
        return None if sid is None else self.seq_of_line(sid, line - 1)

    def count_before(self, sid: int, seq: int) -> int:
        """Lines of ``sid`` in rows [0, seq)."""
        if seq >= self.rows:
            return self.counts[sid]
        c = seq // BLOCK
        ck = self.ck[c]
        base = ck[sid] if sid < len(ck) else 0
        if isinstance(self.src, bytearray):
            return base + self.src.count(bytes((sid,)), c * BLOCK, seq)
        return base + sum(1 for i in range(c * BLOCK, seq) if self.src[i] == sid)

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
        for j, (raw, cut) in enumerate(meta.index.read_lines(line0, count)):
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

    # -- views (app/timeviews.py) ---------------------------------------------------------

    def view_for(self, rank: int | None, hide_copies: bool) -> View:
        from .timeviews import view_for

        return view_for(self, rank, hide_copies)

    def set_rank_map(self, rank_map: dict[tuple, int]) -> str | None:
        """Global ranks of local ones (from the job): per-rank files of log-dir trees then
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
