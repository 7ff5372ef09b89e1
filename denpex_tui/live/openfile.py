"""One open inode of a followed file and the reading of it.

``OpenFile.read`` reads the bytes appended since the last read (re-reading the
``OVERLAP`` bytes before our offset to prove the file was not rewritten under us) and
``emit`` turns them into ``Chunk`` items of whole lines: a partial line waits in
``pending``, a line longer than ``MAX_LINE`` goes out in pieces, runs of NUL bytes (NFS
holes, sparse regions) are held back briefly and then dropped, a hole is skipped at seek
speed.  What to do when the file under the name changes, or shrinks, is the follower's
(``live/follower.py``, ``live/truncation.py``): this module only reads.

This is the follower's hot path: the work per read is a few ``bytes.find`` calls at C
speed, and nothing here looks at single lines.
"""

from __future__ import annotations

import errno
import os
import re
from typing import Any

from . import sources as _s
from ._records import LineRecords
from .sources import (
    CKPT_SAMPLE,
    HEAD_BYTES,
    MAX_CKPTS,
    MAX_LINE,
    NUL_HOLD_S,
    OVERLAP,
    READ_CHUNK,
    Chunk,
    PollResult,
)

NUL_RUN = re.compile(rb"\x00{64,}")


class OpenFile:
    """One open inode of a followed path and our reading state in it."""

    __slots__ = (
        "fd", "dev", "ino", "size", "mtime_ns", "nlink", "pos", "emit_off", "pending",
        "pending_cont", "tail", "head", "ckpts", "history_end", "skip_nl", "nul_since",
        "last_growth", "static", "wd", "note", "gz", "recs", "dup_until", "skip_note", "sid", "path",
    )

    def __init__(self, fd: int, st: os.stat_result | None, now: float, sid: str, path: str) -> None:
        self.sid = sid  # the follower's source id and path, the chunks' (also for a copy read for it)
        self.path = path
        self.fd = fd
        self.dev = st.st_dev if st else 0
        self.ino = st.st_ino if st else 0
        self.size = st.st_size if st else 0
        self.mtime_ns = st.st_mtime_ns if st else 0
        self.nlink = st.st_nlink if st else 1
        self.pos = 0  # next byte to read
        self.emit_off = 0  # file offset of the first byte of ``pending``
        self.pending = b""  # partial line (no newline yet)
        self.pending_cont = False
        self.tail = b""  # up to OVERLAP bytes just before ``pos``
        self.head = b""  # up to HEAD_BYTES bytes at offset 0
        self.ckpts: list[tuple[int, bytes]] = []  # (line-boundary offset, bytes before it)
        self.recs = LineRecords()  # the last lines emitted, to resume exactly after a truncation
        self.dup_until = 0  # bytes before this were emitted already (a torn line read again)
        self.skip_note = ""  # said on the next chunk (a skipped hole)
        self.history_end = -1
        self.skip_nl = False
        self.nul_since: float | None = None
        self.last_growth = now
        self.static = False  # a copy being drained (copytruncate recovery)
        self.wd: int | None = None
        self.note = ""
        self.gz: Any = None

    def close(self) -> None:
        if self.gz is not None:
            try:
                self.gz.close()
            except Exception:
                pass
            self.gz = None
        if self.fd >= 0:
            try:
                os.close(self.fd)
            except OSError:
                pass
            self.fd = -1



    def _chunk(self, data: bytes, off: int, history: bool, pe: bool, cont: bool, note: str) -> Chunk:
        return Chunk(self.sid, self.path, data, off, "file", history, pe, cont, note)

    def emit(self, data: bytes, r: PollResult, history: bool, note: str = "") -> None:
        if self.skip_nl:
            i = data.find(b"\n")
            if i < 0:
                self.emit_off += len(data)
                return
            self.emit_off += i + 1
            data = data[i + 1 :]
            self.skip_nl = False
            if not data:
                return
        start = self.emit_off
        buf = self.pending + data if self.pending else data
        cont = self.pending_cont
        nl = buf.rfind(b"\n")
        if nl >= 0:
            complete = buf[: nl + 1]
            rest = buf[nl + 1 :]
            pieces = split_long(complete)
            if pieces is None:
                r.items.append(self._chunk(complete, start, history, False, cont, note))
            else:
                off = start
                for i, (piece, pe, pc) in enumerate(pieces):
                    r.items.append(
                        self._chunk(piece, off, history, pe, pc or (i == 0 and cont),
                                    note or ("line longer than 1 MiB split" if (pe or pc) else ""))
                    )
                    off += len(piece) - (1 if pe else 0)
            cont = False
            self.recs.add(start, complete)
            start += len(complete)
            self.ckpts.append((start, complete[-CKPT_SAMPLE:]))
            if len(self.ckpts) > MAX_CKPTS:
                self.ckpts = self.ckpts[:-4:2] + self.ckpts[-4:]
        else:
            rest = buf
        if len(rest) > MAX_LINE:
            j = 0  # pieces cut by index: re-slicing the rest each time copies it again
            while len(rest) - j > MAX_LINE:
                piece = rest[j : j + MAX_LINE] + b"\n"
                r.items.append(self._chunk(piece, start, history, True, cont, "line longer than 1 MiB split"))
                start += MAX_LINE
                j += MAX_LINE
                cont = True
            rest = rest[j:]
        self.pending = rest
        self.pending_cont = cont
        self.emit_off = start

    def flush(self, r: PollResult, why: str) -> bool:
        if self.pending and self.emit_off + len(self.pending) <= self.dup_until:
            # the head of a line cut by a truncation, emitted already with its line: not again
            self.emit_off += len(self.pending)
            self.pending = b""
            self.pending_cont = False
            return False
        if self.pending:
            history = self.history_end >= self.pos
            r.items.append(self._chunk(self.pending + b"\n", self.emit_off, history, True, self.pending_cont, why))
            self.emit_off += len(self.pending)
            self.pending = b""
            self.pending_cont = False
            return True
        return False

    # -- reading -----------------------------------------------------------
    def read(self, size: int, now: float, r: PollResult, note: str = "") -> str:
        """Read new bytes up to ``size``; return ``"ok"`` or ``"mismatch"``."""
        limit = size
        if self.history_end > self.pos:
            limit = min(size, self.history_end)  # a history chunk never crosses into live data
        n = min(limit - self.pos, r.budget, READ_CHUNK)
        if n <= 0:
            if size > self.pos:
                r.more = True
            return "ok"
        ov = min(len(self.tail), self.pos)
        data = _s.os_pread(self.fd, ov + n, self.pos - ov)
        if ov and data[:ov] != self.tail[-ov:]:
            return "mismatch"
        new = data[ov:] if ov else data
        if not new:
            return "ok"  # stale size (attribute cache): nothing there yet
        dropped = 0
        z = new.find(b"\x00")
        if z >= 0:
            if self.nul_since is None:
                self.nul_since = now
            if now - self.nul_since < NUL_HOLD_S:
                r.hold = True
                new = new[:z]
                if not new:
                    return "ok"
            else:
                if z == 0:
                    d = data_after(self.fd, self.pos, size)
                    if d - self.pos > len(new):  # a hole past this read: jump over it at seek speed
                        self.skip_hole(d, size, now, r)
                        return "ok"
                stripped = NUL_RUN.sub(b"", new)
                dropped = len(new) - len(stripped)
                self.nul_since = None
                if dropped:
                    note = (note + "; " if note else "") + f"dropped {dropped} NUL bytes (sparse region or unwritten NFS pages)"
        else:
            self.nul_since = None
        if self.skip_note:
            note = (note + "; " if note else "") + self.skip_note
            self.skip_note = ""
        read_start = self.pos
        self.pos += len(new)
        hl = len(self.head)
        if hl < HEAD_BYTES and read_start <= hl:
            self.head += new[hl - read_start : HEAD_BYTES - read_start]
        self.tail = new[-OVERLAP:] if len(new) >= OVERLAP else (self.tail + new)[-OVERLAP:]
        self.last_growth = now
        history = self.history_end >= self.pos
        if dropped:
            self.emit(NUL_RUN.sub(b"", new), r, history, note)
            self.recs.clear()  # what was emitted is not the file's bytes
            if not self.pending:
                self.emit_off += dropped
        else:
            self.emit(new, r, history, note)
        r.nbytes += len(new)
        r.budget -= len(new)
        r.active = True
        if self.pos < size:
            r.more = True
        return "ok"

    def skip_hole(self, to: int, size: int, now: float, r: PollResult) -> None:
        """A sparse region (never written: zeros) from our offset to ``to``: skipped, as
        runs of NUL bytes are dropped; the next chunk's note says how much."""
        self.skip_note = f"skipped {to - self.pos} bytes of a sparse region (a hole)"
        self.pos = to
        if not self.pending:
            self.emit_off = to
        self.tail = b""  # zeros: nothing to compare (the head still is)
        self.recs.clear()
        self.nul_since = None
        self.last_growth = now
        r.active = True
        if self.pos < size:
            r.more = True



def data_after(fd: int, pos: int, size: int) -> int:
    """Where data starts at or after ``pos`` (SEEK_DATA; ``size`` if only a hole is left;
    ``pos`` where the filesystem cannot tell)."""
    try:
        return os.lseek(fd, pos, os.SEEK_DATA)
    except OSError as e:
        return max(pos, size) if e.errno == errno.ENXIO else pos
    except AttributeError:
        return pos




def split_long(complete: bytes) -> list[tuple[bytes, bool, bool]] | None:
    """Split lines longer than MAX_LINE in ``complete`` (which ends with a newline).

    Returns None when no line is longer than MAX_LINE (the common case, checked by
    probing windows of MAX_LINE/2 for a newline, at C speed).
    """
    n = len(complete)
    if n <= MAX_LINE + 1:
        return None
    half = MAX_LINE // 2
    for k in range(0, n - half + 1, half):
        if complete.find(b"\n", k, k + half) < 0:
            break
    else:
        return None
    out: list[tuple[bytes, bool, bool]] = []
    seg = 0
    pos = 0
    while pos < n:
        nl = complete.find(b"\n", pos)
        if nl < 0:
            nl = n - 1
        if nl - pos > MAX_LINE:
            if pos > seg:
                out.append((complete[seg:pos], False, False))
            cont = False
            j = pos
            while j < nl:
                end = min(j + MAX_LINE, nl)
                last = end >= nl
                piece = complete[j:end] + b"\n"
                out.append((piece, not last, cont))
                cont = True
                j = end
            seg = nl + 1
        pos = nl + 1
    if seg < n:
        out.append((complete[seg:], False, False))
    return out


