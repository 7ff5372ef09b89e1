"""Where each line of one log file starts and when it was written, without keeping its text.

A :class:`FileIndex` is built from the reader's chunks and their line facts
(:func:`~denpex_tui.core.lines.chunk.chunk_lines`) in the same pass that finds the findings:

* a sparse table of line starts, one ``(line, offset)`` checkpoint at least every
  :data:`CHECKPOINT_BYTES` of file (about 0.75 MB per GB of log): the text of a line is read
  back from the file when it is shown (lnav and toolong do the same);
* its *records* for the merged timeline: a record is a timestamped line and the untimestamped
  lines after it (a traceback stays with the message it belongs to); lines before the file's
  first timestamp go with the first record; a time earlier than the file's previous one is
  raised to it (time never goes backwards within a file), and consecutive lines of one time are
  one record. Records are kept as two arrays (the line each starts at, its time) until the
  merge takes them (:meth:`take_records`);
* a console's rank tag per line (who wrote it: :func:`~denpex_tui.core.lines.chunk.tag_of`).

Reading back a line costs at most ``CHECKPOINT_BYTES`` of short lines plus ``MAX_SHOW`` bytes of
the line itself: a 2 GB line is read as its first ``MAX_SHOW`` bytes and marked cut.
"""

from __future__ import annotations

import bisect
import os
from array import array
from datetime import datetime

from denpex_tui.core.lines import npy as np

from .chunk import ChunkLines

__all__ = ["FileIndex", "CHECKPOINT_BYTES", "MAX_SHOW", "READ"]

CHECKPOINT_BYTES = 16 << 10
MAX_SHOW = 16 << 10  # bytes of one line read back for the screen (the rest is marked cut)
READ = 1 << 20


class FileIndex:
    """Line starts of one file; ``lines`` complete lines up to byte ``end`` are indexed."""

    def __init__(self, path: str, sid: int = 0, *, console: bool = False, continued: bool = False) -> None:
        """``continued``: the index of a range that starts inside the file (its first lines
        before a timestamp continue the previous range's last record)."""
        self.path = path
        self.sid = sid
        self.console = console
        self.ck_line = array("Q")
        self.ck_off = array("Q")
        self.lines = 0
        self.end = 0
        self.last_time: float | None = None
        self.timed = False  # some line had a timestamp
        self.stale = False  # the name no longer leads to these lines (truncated, replaced, renamed)
        self.gone: str | None = None  # why these lines cannot be read back any more
        self.year_hint: int | None = None
        self.dev_ino: tuple[int, int] | None = None
        self.tags: array | None = array("i") if console else None
        self.rec_line = array("I")  # records not yet merged: first line (4 bytes: "q" past 2**32 lines) ...
        self.rec_time = array("d")  # ... and time (NaN: the file has no timestamp yet)
        self._started = continued  # some record was made (merged or pending)
        self._fd: int | None = None

    def __getstate__(self) -> dict:
        d = dict(self.__dict__)
        d["_fd"] = None  # an index travels between processes without its open file
        return d

    # -- building ----------------------------------------------------------------------------

    def add(self, cl: ChunkLines) -> None:
        """Index the lines of one chunk: the file's next lines. The caller sets ``end`` to
        where the reader stopped (a cut line's chunk is shorter than the line)."""
        n = len(cl)
        if not n:
            return
        base = self.lines
        offs = cl.starts + cl.offset
        first_t = int(offs[0]) if not self.ck_off else self.ck_off[-1] + CHECKPOINT_BYTES
        targets = np.arange(first_t, int(offs[-1]) + 1, CHECKPOINT_BYTES, dtype=np.int64)
        picks = np.distinct(np.searchsorted(offs, targets, side="left"))
        picks = picks[picks < n]
        if len(picks):
            self.ck_line.extend((picks + base).tolist())
            self.ck_off.extend(offs[picks].tolist())
        if self.tags is not None and cl.tags is not None:
            self.tags.frombytes(cl.tags.astype(np.int32).tobytes())
        timed = np.flatnonzero(~np.isnan(cl.epoch))
        t = cl.epoch[timed]
        first = timed.astype(np.int64) + base
        if len(t):
            if self.last_time is not None:
                t = np.maximum(t, self.last_time)
            t = np.maximum.accumulate(t)
        pending = len(self.rec_line) > 0
        if pending and np.isnan(self.rec_time[-1]) and len(t):
            # the file's untimed first lines go with its first timestamp
            self.rec_time[-1] = float(t[0])
            first, t = first[1:], t[1:]
        elif not len(first) or first[0] > base:  # lines before the chunk's first timestamp
            if pending:
                pass  # they continue the pending record
            elif self._started:  # the previous record was merged already: a continuation
                first = np.concatenate([[base], first])
                t = np.concatenate([[self.last_time if self.last_time is not None else np.nan], t])
            elif len(first):
                first[0] = base  # the file's first lines go with its first timestamp
            else:
                first, t = np.array([base], np.int64), np.array([np.nan])
        self._started = self._started or len(first) > 0
        if len(timed):
            self.timed = True
            raised = float(np.maximum.accumulate(np.maximum(cl.epoch[timed], self.last_time or -np.inf))[-1])
            self.last_time = raised
        self.append_records(first, t)
        self.lines += n
        if cl.year_hint is not None:
            self.year_hint = cl.year_hint

    def append_records(self, first: np.ndarray, t: np.ndarray) -> None:
        """Append records (first line, time; times never below the pending ones). A record
        whose time is the one before it is no record of its own: its lines join that record.
        The merge puts a file's records of one time next to each other in any case (ties go by
        file, then by position), so the merged order is the same, and a file costs a record per
        distinct time rather than per timestamped line (logs stamped to the second: most lines)."""
        t = np.asarray(t, dtype=np.float64)
        first = np.asarray(first, dtype=np.int64)
        if len(t):
            keep = np.ones(len(t), dtype=bool)
            keep[1:] = t[1:] != t[:-1]  # NaN never equals: an untimed record stays one
            if len(self.rec_time) and self.rec_time[-1] == t[0]:
                keep[0] = False
            if not keep.all():
                first, t = first[keep], t[keep]
        if len(first) and self.rec_line.typecode == "I" and int(first[-1]) >= 1 << 32:
            self.rec_line = array("q", self.record_lines().astype(np.int64).tobytes())
        self.rec_line.frombytes(first.astype(self.record_lines().dtype).tobytes())
        self.rec_time.frombytes(t.tobytes())

    def record_lines(self) -> np.ndarray:
        """The pending records' first lines, in place (no copy)."""
        return np.frombuffer(self.rec_line, dtype=np.uint32 if self.rec_line.typecode == "I" else np.int64)

    def drop_records(self) -> None:
        self.rec_line, self.rec_time = array(self.rec_line.typecode), array("d")

    def pending(self) -> tuple[np.ndarray, np.ndarray]:
        """The records not merged yet, as (first line, time) arrays, kept."""
        return (self.record_lines().astype(np.int64),
                np.frombuffer(self.rec_time, dtype=np.float64).copy())

    def take_records(self, upto: int | None = None) -> tuple[np.ndarray, np.ndarray, int]:
        """The records not merged yet, as (first line, time) arrays, and the line they end
        before; forgotten here. With ``upto``, only the lines before line ``upto`` are taken:
        a record that runs past it is split, its rest staying pending with the same time."""
        first = self.record_lines().astype(np.int64)
        t = np.frombuffer(self.rec_time, dtype=np.float64).copy()
        if upto is None or upto >= self.lines:
            self.drop_records()
            return first, t, self.lines
        k = int(np.searchsorted(first, upto, side="left"))
        rest_f, rest_t = first[k:], t[k:]
        if k and (not len(rest_f) or rest_f[0] > upto):  # record k-1 goes on past upto
            rest_f = np.concatenate([[upto], rest_f]).astype(np.int64)
            rest_t = np.concatenate([[t[k - 1]], rest_t])
        self.rec_line = array(self.rec_line.typecode, rest_f.astype(self.record_lines().dtype).tobytes())
        self.rec_time = array("d", rest_t.tobytes())
        return first[:k], t[:k], upto

    # -- the file ----------------------------------------------------------------------------

    def size(self) -> int:
        """The file's size now; notes when its name stopped leading to the lines indexed."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self._lost()
            return self.end
        except OSError:
            return self.end
        if self.dev_ino is None:
            self.dev_ino = (st.st_dev, st.st_ino)
            if self.year_hint is None:
                self.year_hint = datetime.fromtimestamp(st.st_mtime).year
        elif self.dev_ino != (st.st_dev, st.st_ino):
            self.stale = True  # another file has the name now
            self._lost()
        elif st.st_size < self.end:
            self.stale = True
            self._let_go("truncated")  # the bytes indexed were overwritten or dropped
        return st.st_size

    def _lost(self) -> None:
        """The name does not lead to this file any more. Its lines stay readable through the open
        file while the file still exists under another name (rotated); a deleted file is let
        go at once (holding it would keep its disk space: the deleted-open pattern)."""
        if self.gone is not None:
            return
        if self._fd is None:
            self._let_go("renamed or deleted")
            return
        try:
            alive = os.fstat(self._fd).st_nlink > 0
        except OSError:
            alive = False
        if not alive:
            self._let_go("deleted")

    def recheck(self) -> None:
        """A stale index still read through its open file: let it go once the file is deleted."""
        if self.stale and self.gone is None:
            self._lost()

    def _let_go(self, why: str) -> None:
        self.gone = why
        self.close()

    def mtime(self) -> float:
        try:
            return os.stat(self.path).st_mtime
        except OSError:
            return 0.0

    def _read(self, n: int, off: int) -> bytes:
        if self.gone is not None:
            return b""
        if self._fd is None:
            if self.stale:
                return b""  # the name is another file's now
            try:
                fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0))
            except OSError:
                return b""
            try:
                st = os.fstat(fd)
            except OSError:
                os.close(fd)
                return b""
            if self.dev_ino is not None and (st.st_dev, st.st_ino) != self.dev_ino:
                os.close(fd)  # another file now has the name: its lines are not ours
                self.stale = True
                self._let_go("renamed or deleted")
                return b""
            self._fd = fd
        try:
            return os.pread(self._fd, n, off)
        except OSError:
            return b""

    def close(self) -> None:
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = None

    # -- reading back ----------------------------------------------------------------------

    def offset_of(self, line: int) -> int | None:
        """Byte offset where (0-based) ``line`` starts."""
        if line < 0 or line >= self.lines or not self.ck_line:
            return None
        c = bisect.bisect_right(self.ck_line, line) - 1
        pos, at = self.ck_off[c], self.ck_line[c]
        while at < line:
            data = self._read(READ, pos)
            if not data:
                return None
            i = 0
            while at < line:
                nl = data.find(b"\n", i)
                if nl < 0:
                    break
                at += 1
                i = nl + 1
            pos += i if at == line else len(data)
        return pos

    def read_lines(self, line: int, count: int) -> list[tuple[bytes, bool]]:
        """Up to ``count`` lines from ``line`` (0-based): (first MAX_SHOW bytes, cut?)."""
        out: list[tuple[bytes, bool]] = []
        count = min(count, self.lines - line)
        pos = self.offset_of(line) if count > 0 else None
        while pos is not None and len(out) < count:
            data = self._read(READ // 16, pos)
            if not data:
                break
            i = 0
            while len(out) < count:
                nl = data.find(b"\n", i)
                if nl < 0:
                    break
                out.append((data[i:min(nl, i + MAX_SHOW)], nl - i > MAX_SHOW))
                i = nl + 1
            if len(out) >= count:
                break
            if i == 0:  # one line longer than the read: its start only, then the next line
                rest = data[:MAX_SHOW]
                if line + len(out) == self.lines - 1 and len(data) < READ // 16:
                    out.append((rest, False))  # the unterminated last line
                    break
                out.append((rest, True))
                pos = self.offset_of(line + len(out)) if line + len(out) < self.lines else None
            else:
                pos += i
        return out
