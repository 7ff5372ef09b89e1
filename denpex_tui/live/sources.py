"""File sources of the live engine: what a followed file turns into.

Public types
------------
``Chunk``        whole lines read from one source (a file or an ``--exec`` command).
``SourceEvent``  something happened to a source: ``added``, ``rotated``, ``truncated``,
                 ``replaced``, ``deleted``, ``error``, ``possibly-lost`` (and ``exited``
                 for command sources).
``FileFollower`` follows one path.  Blocking: every method that touches the filesystem
                 is meant to run in a worker thread (the ``Tailer`` does that).
``DirWatch``     one directory of a directory or glob source; re-lists only when the
                 directory's mtime changes.
``SourceSpec`` / ``expand_spec``  turn a user argument (file, directory, glob) into
                 followers and directory watches.

Everything here is synchronous and single-threaded per object: the ``Tailer`` never
polls the same object from two threads at once.  See docs/live-engine.md.
"""

from __future__ import annotations

import errno
import fnmatch
import gzip
import os
import re
import stat as stat_mod
import time
import zlib
from dataclasses import dataclass, field
from typing import Any

from denpex_tui.core.lines.reader import link_outside, sniff, special_target

from ._records import LineRecords

__all__ = [
    "Chunk",
    "SourceEvent",
    "FileFollower",
    "DirWatch",
    "SourceSpec",
    "PollResult",
    "classify_name",
    "expand_spec",
    "MAX_LINE",
    "READ_CHUNK",
]

HEAD_BYTES = 1024  # head fingerprint: first KiB of the file
OVERLAP = 4096  # bytes before our offset re-read with every read to verify continuity
CKPT_SAMPLE = 256  # bytes before a line-boundary checkpoint kept to verify it
MTIME_SLACK_S = 2.0  # a write this close to the last mtime may not change it (timestamp tick)
MAX_LINE = 1 << 20  # a line longer than this is emitted in pieces of this size
READ_CHUNK = 8 << 20  # largest single read (history and catch-up)
NUL_HOLD_S = 1.0  # NUL bytes at the end of a read are held back this long (NFS holes)
LINGER_S = 10.0  # an old (rotated/deleted) file is still followed until quiet this long
PARTIAL_TIMEOUT_S = 5.0  # a partial line is flushed after the file is quiet this long
NAME_CHECK_MIN_S = 1.0  # stat by name at most this often while the file is quiet ...
NAME_CHECK_MAX_S = 10.0  # ... and at least this often even while it grows
NAME_CHECK_WATCHED_S = 60.0  # with an inotify watch on a local filesystem (safety net)
RETRY_S = 30.0  # retry period for paths in error (permission denied, FIFO, ...)
AWAIT_NAME_S = 30.0  # after a rename, look for the new file at the name this long, fast
MAX_CKPTS = 16

_O_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
_NUL_RUN = re.compile(rb"\x00{64,}")

# Indirections so tests can simulate a hung or failing mount (monkeypatch these).
os_stat = os.stat
os_fstat = os.fstat
os_open = os.open
os_pread = os.pread
os_scandir = os.scandir


@dataclass(slots=True)
class Chunk:
    """Whole lines from one source.

    ``data`` always ends with ``b"\\n"``.  ``offset`` is the byte offset of ``data[0]``
    in the file (for ``kind == "exec"``: bytes read from the command so far).  After a
    rotation the offset starts again at 0; after a truncation it is where reading resumed,
    the line boundary before the first changed byte (a ``SourceEvent`` says why).

    ``history``      the bytes were in the file when it was first opened at start-up
                     (the fast history scan), not appended while following.
    ``partial_end``  the last line was not terminated in the source: Denpex added the
                     final ``b"\\n"`` (rotation, truncation, a line longer than
                     ``MAX_LINE``, a partial line quiet for ``PARTIAL_TIMEOUT_S``, end of
                     a command's output).
    ``continues``    the first line continues a line whose earlier piece was emitted
                     with ``partial_end`` (only for lines split by the length cap or a
                     partial-line timeout; never guessed across files).
    ``note``         human-readable reason for the flags, or provenance (e.g. bytes
                     recovered from ``x.log.1`` after a copytruncate).
    ``rank``         rank given on the command line for an ``--exec N=...`` source.
    """

    source_id: str
    path: str
    data: bytes
    offset: int
    kind: str = "file"
    history: bool = False
    partial_end: bool = False
    continues: bool = False
    note: str = ""
    rank: int | None = None

    @property
    def line_count(self) -> int:
        return self.data.count(b"\n")


@dataclass(slots=True)
class SourceEvent:
    """A change of a source's state; ``to_dict`` gives the timeline event."""

    path: str
    state: str
    detail: str = ""
    source_id: str = ""
    time: float = field(default_factory=time.time)
    kind: str = "file"

    def to_dict(self) -> dict[str, Any]:
        return {"event": "source", "path": self.path, "state": self.state, "detail": self.detail}


class NotRegularFile(OSError):
    pass


@dataclass(slots=True)
class PollResult:
    """What one ``poll`` produced (filled in a worker thread, read on the loop)."""

    budget: int = READ_CHUNK
    items: list = field(default_factory=list)
    calls: int = 0  # metadata calls made (stat, fstat, open, listdir)
    nbytes: int = 0
    more: bool = False  # data left to read: poll again at once
    active: bool = False  # new data was read
    hold: bool = False  # something is held back briefly (NUL bytes): poll again soon
    done: bool = False  # remove this pollable
    hint: float | None = None  # do not poll again before this many seconds (errors)
    discovered: list = field(default_factory=list)  # DirWatch: [(path, history_only, startup, explicit, link)]
    new_dirs: list = field(default_factory=list)  # DirWatch: [DirWatch]


def _kind_of(mode: int) -> str:
    if stat_mod.S_ISFIFO(mode):
        return "a FIFO"
    if stat_mod.S_ISDIR(mode):
        return "a directory"
    if stat_mod.S_ISCHR(mode):
        return "a character device"
    if stat_mod.S_ISBLK(mode):
        return "a block device"
    if stat_mod.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


class _Open:
    """One open inode of a followed path and our reading state in it."""

    __slots__ = (
        "fd", "dev", "ino", "size", "mtime_ns", "nlink", "pos", "emit_off", "pending",
        "pending_cont", "tail", "head", "ckpts", "history_end", "skip_nl", "nul_since",
        "last_growth", "static", "wd", "note", "gz", "recs", "dup_until", "skip_note",
    )

    def __init__(self, fd: int, st: os.stat_result | None, now: float) -> None:
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


def _data_after(fd: int, pos: int, size: int) -> int:
    """Where data starts at or after ``pos`` (SEEK_DATA; ``size`` if only a hole is left;
    ``pos`` where the filesystem cannot tell)."""
    try:
        return os.lseek(fd, pos, os.SEEK_DATA)
    except OSError as e:
        return max(pos, size) if e.errno == errno.ENXIO else pos
    except AttributeError:
        return pos


def _recent(mtime_ns: int) -> bool:
    return abs(time.time() - mtime_ns / 1e9) < MTIME_SLACK_S


def _common(a: bytes, b: bytes) -> int:
    """Length of the common prefix of ``a`` and ``b``."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def _split_long(complete: bytes) -> list[tuple[bytes, bool, bool]] | None:
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


class FileFollower:
    """Follow one path: an open fd polled with ``fstat``, the name checked with ``stat``.

    ``poll(now, budget)`` does one round of I/O and returns a ``PollResult``; it is
    blocking and runs in a worker thread.  Per round:

    * ``fstat`` the open fd.  Size above our offset: read (at most ``budget`` bytes),
      re-reading the ``OVERLAP`` bytes before the offset to check that the file was not
      rewritten under us.  Size below: truncation (copytruncate).  Same size but a new
      mtime: verify the bytes before the offset.
    * While the file is quiet (or at least every ``NAME_CHECK_MAX_S``), ``stat`` the
      name (on NFS: open+fstat+close, which refreshes the attribute cache): another
      inode means rotation (the old file is drained first, then followed for
      ``LINGER_S`` more in case its writer has not reopened yet); no name means deleted.
    * A truncation (to any size), or changed bytes before our offset (truncated and
      regrown between two polls, even to the same size in the same mtime tick), first
      tries to read the lost tail from ``<path>.1`` (the copy ``logrotate copytruncate``
      makes), then reads again from the first changed line (``_rewind``); lines possibly
      cut before we read them are announced by a ``possibly-lost`` event.
    """

    kind = "file"

    def __init__(
        self,
        path: str,
        *,
        source_id: str | None = None,
        start: str = "begin",
        history: bool = True,
        startup: bool = True,
        explicit: bool = True,
        history_only: bool = False,
        cto: bool = False,
        inotify: Any = None,
        link_outside: str = "",
        at: tuple | None = None,
    ) -> None:
        """``start="at"`` with ``at=((dev, ino), offset, last_bytes)``: the history up to
        ``offset`` was read already (the history pass), ending with ``last_bytes`` (whole
        lines): follow from there when the file is still that one."""
        if start not in ("begin", "end", "at"):
            raise ValueError("start must be 'begin', 'end' or 'at'")
        self.at = at
        self.path = path
        self.source_id = source_id or os.path.abspath(path)
        self.start = start
        self.history = history
        self.startup = startup
        self.explicit = explicit
        self.history_only = history_only
        self.gz = history_only and path.endswith(".gz")
        self.cto = cto
        self.inotify = inotify
        self.cur: _Open | None = None
        self.old: list[_Open] = []
        self.state = "new"  # new, open, missing, error, done
        self.err: str | None = None
        self.ever_opened = False
        self.last_name_check = 0.0
        self.name_check_min = NAME_CHECK_MIN_S  # the Tailer raises it with many files
        self.awaiting_since: float | None = None  # renamed away, new file not there yet
        self.force_name_check = False
        self.missing_since: float | None = None
        self.lost: _Open | None = None  # identity of a file we lost to an I/O error
        self.odd_name = False  # the name points to a FIFO, device... instead of a file
        self.link_outside = link_outside  # a link out of the followed tree: its target
        self.sniffed = False  # told text from binary (from the first bytes)
        # scheduling state, owned by the Tailer
        self.lane: Any = None
        self.interval = 0.0
        self.next_due = 0.0
        self.seq = 0
        self.inflight = False
        self.queued = False
        self.hung_reported = False

    # -- helpers -----------------------------------------------------------
    @property
    def in_history(self) -> bool:
        c = self.cur
        return c is not None and c.history_end > c.pos

    def _event(self, r: PollResult, state: str, detail: str) -> None:
        r.items.append(SourceEvent(self.path, state, detail, self.source_id))

    def _error(self, r: PollResult, detail: str) -> None:
        if detail != self.err:
            self.err = detail
            self._event(r, "error", detail)

    def _chunk(self, f: _Open, data: bytes, off: int, history: bool, pe: bool, cont: bool, note: str) -> Chunk:
        return Chunk(self.source_id, self.path, data, off, "file", history, pe, cont, note)

    def close(self) -> None:
        for o in self.old:
            self._unwatch(o)
            o.close()
        self.old = []
        if self.cur is not None:
            self._unwatch(self.cur)
            self.cur.close()
            self.cur = None

    def _unwatch(self, f: _Open) -> None:
        if f.wd is not None and self.inotify is not None:
            try:
                self.inotify.remove(f.wd)
            except Exception:
                pass
            f.wd = None

    # -- emission ----------------------------------------------------------
    def _emit(self, f: _Open, data: bytes, r: PollResult, history: bool, note: str = "") -> None:
        if f.skip_nl:
            i = data.find(b"\n")
            if i < 0:
                f.emit_off += len(data)
                return
            f.emit_off += i + 1
            data = data[i + 1 :]
            f.skip_nl = False
            if not data:
                return
        start = f.emit_off
        buf = f.pending + data if f.pending else data
        cont = f.pending_cont
        nl = buf.rfind(b"\n")
        if nl >= 0:
            complete = buf[: nl + 1]
            rest = buf[nl + 1 :]
            pieces = _split_long(complete)
            if pieces is None:
                r.items.append(self._chunk(f, complete, start, history, False, cont, note))
            else:
                off = start
                for i, (piece, pe, pc) in enumerate(pieces):
                    r.items.append(
                        self._chunk(f, piece, off, history, pe, pc or (i == 0 and cont),
                                    note or ("line longer than 1 MiB split" if (pe or pc) else ""))
                    )
                    off += len(piece) - (1 if pe else 0)
            cont = False
            f.recs.add(start, complete)
            start += len(complete)
            f.ckpts.append((start, complete[-CKPT_SAMPLE:]))
            if len(f.ckpts) > MAX_CKPTS:
                f.ckpts = f.ckpts[:-4:2] + f.ckpts[-4:]
        else:
            rest = buf
        if len(rest) > MAX_LINE:
            j = 0  # pieces cut by index: re-slicing the rest each time copies it again
            while len(rest) - j > MAX_LINE:
                piece = rest[j : j + MAX_LINE] + b"\n"
                r.items.append(self._chunk(f, piece, start, history, True, cont, "line longer than 1 MiB split"))
                start += MAX_LINE
                j += MAX_LINE
                cont = True
            rest = rest[j:]
        f.pending = rest
        f.pending_cont = cont
        f.emit_off = start

    def _flush(self, f: _Open, r: PollResult, why: str) -> bool:
        if f.pending and f.emit_off + len(f.pending) <= f.dup_until:
            # the head of a line cut by a truncation, emitted already with its line: not again
            f.emit_off += len(f.pending)
            f.pending = b""
            f.pending_cont = False
            return False
        if f.pending:
            history = f.history_end >= f.pos
            r.items.append(self._chunk(f, f.pending + b"\n", f.emit_off, history, True, f.pending_cont, why))
            f.emit_off += len(f.pending)
            f.pending = b""
            f.pending_cont = False
            return True
        return False

    # -- reading -----------------------------------------------------------
    def _read(self, f: _Open, size: int, now: float, r: PollResult, note: str = "") -> str:
        """Read new bytes of ``f`` up to ``size``; return ``"ok"`` or ``"mismatch"``."""
        limit = size
        if f.history_end > f.pos:
            limit = min(size, f.history_end)  # a history chunk never crosses into live data
        n = min(limit - f.pos, r.budget, READ_CHUNK)
        if n <= 0:
            if size > f.pos:
                r.more = True
            return "ok"
        ov = min(len(f.tail), f.pos)
        data = os_pread(f.fd, ov + n, f.pos - ov)
        if ov and data[:ov] != f.tail[-ov:]:
            return "mismatch"
        new = data[ov:] if ov else data
        if not new:
            return "ok"  # stale size (attribute cache): nothing there yet
        dropped = 0
        z = new.find(b"\x00")
        if z >= 0:
            if f.nul_since is None:
                f.nul_since = now
            if now - f.nul_since < NUL_HOLD_S:
                r.hold = True
                new = new[:z]
                if not new:
                    return "ok"
            else:
                if z == 0:
                    d = _data_after(f.fd, f.pos, size)
                    if d - f.pos > len(new):  # a hole past this read: jump over it at seek speed
                        self._skip_hole(f, d, size, now, r)
                        return "ok"
                stripped = _NUL_RUN.sub(b"", new)
                dropped = len(new) - len(stripped)
                f.nul_since = None
                if dropped:
                    note = (note + "; " if note else "") + f"dropped {dropped} NUL bytes (sparse region or unwritten NFS pages)"
        else:
            f.nul_since = None
        if f.skip_note:
            note = (note + "; " if note else "") + f.skip_note
            f.skip_note = ""
        read_start = f.pos
        f.pos += len(new)
        hl = len(f.head)
        if hl < HEAD_BYTES and read_start <= hl:
            f.head += new[hl - read_start : HEAD_BYTES - read_start]
        f.tail = new[-OVERLAP:] if len(new) >= OVERLAP else (f.tail + new)[-OVERLAP:]
        f.last_growth = now
        history = f.history_end >= f.pos
        if dropped:
            self._emit(f, _NUL_RUN.sub(b"", new), r, history, note)
            f.recs.clear()  # what was emitted is not the file's bytes
            if not f.pending:
                f.emit_off += dropped
        else:
            self._emit(f, new, r, history, note)
        r.nbytes += len(new)
        r.budget -= len(new)
        r.active = True
        if f.pos < size:
            r.more = True
        return "ok"

    def _skip_hole(self, f: _Open, to: int, size: int, now: float, r: PollResult) -> None:
        """A sparse region (never written: zeros) from our offset to ``to``: skipped, as
        runs of NUL bytes are dropped; the next chunk's note says how much."""
        f.skip_note = f"skipped {to - f.pos} bytes of a sparse region (a hole)"
        f.pos = to
        if not f.pending:
            f.emit_off = to
        f.tail = b""  # zeros: nothing to compare (the head still is)
        f.recs.clear()
        f.nul_since = None
        f.last_growth = now
        r.active = True
        if f.pos < size:
            r.more = True

    def _resume_point(self, f: _Open, size: int) -> tuple[int, str, int] | None:
        """Where to read again after the file shrank below our offset or its bytes before
        it changed: ``(offset, how, changed_at)``, or None when nothing changed.

        ``offset`` is a line boundary; the bytes before it are the ones we read.  ``how``:

        * ``"exact"``: proven by the head (compared from offset 0) or by the recorded
          lines (``LineRecords``: a line unchanged at its offset is one we had read);
        * ``"repeat"``: the change is older than the recorded lines (more than 64 KiB
          before our offset, past the head): read again from the last checkpoint that
          still matches; lines after it may repeat.
        """
        t, h = f.tail, f.head
        if h:
            cur = os_pread(f.fd, len(h), 0)
            if cur != h:
                j = _common(cur, h)
                return h.rfind(b"\n", 0, j) + 1, "exact", j
        if size >= f.pos and (not t or os_pread(f.fd, len(t), f.pos - len(t)) == t):
            return None  # the head and the bytes just before our offset are as we read them
        recs = f.recs
        if recs.end == f.emit_off and (recs or recs.base <= len(h)):
            count, off = recs.matched(lambda n, o: os_pread(f.fd, n, o), size)
            if count or recs.base <= len(h):
                return off, "exact", off
        m = min(size, recs.base if recs.end == f.emit_off else f.pos)
        for off, sample in reversed(f.ckpts):
            if len(h) <= off <= m and os_pread(f.fd, len(sample), off - len(sample)) == sample:
                return off, "repeat", m
        return h.rfind(b"\n") + 1, "repeat", m

    def _try_recover(self, f: _Open, now: float, r: PollResult) -> _Open | None:
        """After copytruncate: open ``<path>.1`` if it is a copy of what we were reading."""
        if not f.head or f.pos == 0:
            return None
        cand = self.path + ".1"
        try:
            st = os_stat(cand)
            r.calls += 1
            if not stat_mod.S_ISREG(st.st_mode) or st.st_size < f.pos or (st.st_dev, st.st_ino) == (f.dev, f.ino):
                return None
            fd = os_open(cand, _O_FLAGS)
            r.calls += 1
        except OSError:
            return None
        try:
            ok = os_pread(fd, len(f.head), 0) == f.head
            if ok and f.tail:
                ok = os_pread(fd, len(f.tail), f.pos - len(f.tail)) == f.tail
        except OSError:
            ok = False
        if not ok:
            os.close(fd)
            return None
        o = _Open(fd, st, now)
        o.pos, o.emit_off, o.pending, o.pending_cont = f.pos, f.emit_off, f.pending, f.pending_cont
        o.tail, o.head, o.static = f.tail, f.head, True
        o.note = f"recovered from {cand}"
        f.pending = b""
        f.pending_cont = False
        return o

    def _rewind(self, f: _Open, size: int, now: float, r: PollResult) -> bool:
        """The file is shorter than our offset, or its bytes before our offset changed
        (truncated and rewritten between two polls, or rewritten in place): read again
        from the last line boundary before the first changed byte, so that no unchanged
        line is emitted twice and no new one is skipped.  Returns False if nothing changed.

        Lines the writer appended after our last read and before the truncation are gone
        from the file: they are read from ``<path>.1`` when that is a copy of what we were
        reading (logrotate's copytruncate); otherwise a ``possibly-lost`` event says so."""
        shrunk = size < f.pos
        d = self._resume_point(f, size)
        if d is None:
            return False
        b, how, m = d
        b = min(b, f.emit_off)  # a partial line is read again from its start
        old_pos, old_emit = f.pos, f.emit_off
        rec = None
        if b < f.emit_off or b == 0:
            rec = self._try_recover(f, now, r)
        if rec is not None:
            self.old.insert(0, rec)
            self._poll_old(rec, now, r)
        elif b < f.emit_off:
            # the partial line after the change was never emitted and is gone from the file
            self._flush(f, r, "partial line before truncation; newline added")
        # the bytes from b that are still the ones we emitted (the head of a torn line)
        lo = f.pos - len(f.tail)
        known = f.tail[b - lo :] if b >= lo else f.head[b:]
        known = known[: max(0, old_emit - b)]
        f.dup_until = b + _common(os_pread(f.fd, len(known), b), known) if known else 0
        n = min(OVERLAP, b)
        f.tail = os_pread(f.fd, n, b - n) if n else b""  # bytes before b: ours, by the above
        f.pos = f.emit_off = b
        f.pending, f.pending_cont = b"", False
        f.head = f.head[:b]
        f.ckpts = [(o, s) for o, s in f.ckpts if o <= b]
        f.recs.cut(b)
        f.history_end = -1
        f.skip_nl = False
        f.nul_since = None
        if shrunk:
            state, detail = "truncated", f"size {size} < offset {old_pos} (copytruncate?)"
        else:
            state = "truncated" if rec is not None else "possibly-lost"
            detail = (f"content before offset {old_pos} changed at offset {m} between two polls "
                      f"(truncated and rewritten, or rewritten in place)")
        if rec is not None:
            detail += f"; the rest of the old content is read from {self.path}.1"
        elif not shrunk:
            detail += "; lines appended after our last read and before the truncation may be lost"
        if not b:
            detail += "; reading from the start"
        elif how == "exact":
            detail += f"; unchanged up to offset {b}: reading from there"
        elif how == "assumed":
            detail += f"; taken as unchanged up to offset {b}: reading from there"
        else:
            detail += f"; reading again from offset {b}: lines up to offset {m} may repeat"
        r.items.append(SourceEvent(self.path, state, detail, self.source_id))
        return True

    def _poll_old(self, o: _Open, now: float, r: PollResult) -> None:
        """Drain an old inode (rotated away, deleted, or a copytruncate copy)."""
        retire = False
        try:
            if o.static:
                size = o.size
            else:
                st = os_fstat(o.fd)
                r.calls += 1
                size = st.st_size
            if size > o.pos:
                if self._read(o, size, now, r, o.note) == "mismatch":
                    retire = True
            elif size < o.pos:
                retire = True
            if o.static:
                retire = retire or o.pos >= o.size
            elif now - o.last_growth >= LINGER_S:
                retire = True
        except OSError:
            retire = True
        if retire:
            why = "partial line of the old file; newline added"
            self._flush(o, r, why)
            self._unwatch(o)
            o.close()
            if o in self.old:
                self.old.remove(o)

    def _open(self, now: float, r: PollResult) -> _Open:
        st = os_stat(self.path)
        r.calls += 1
        if not stat_mod.S_ISREG(st.st_mode):
            raise NotRegularFile(errno.EINVAL, _kind_of(st.st_mode))
        why = special_target(self.path) if not self.history_only else None
        if why:  # /proc/kmsg says it is a regular file
            raise NotRegularFile(errno.EINVAL, why)
        fd = os_open(self.path, _O_FLAGS)
        r.calls += 1
        try:
            st2 = os_fstat(fd)
            r.calls += 1
            if not stat_mod.S_ISREG(st2.st_mode):
                raise NotRegularFile(errno.EINVAL, _kind_of(st2.st_mode))
            o = _Open(fd, st2, now)
            if st2.st_size:
                o.head = os_pread(fd, min(HEAD_BYTES, st2.st_size), 0)
        except BaseException:
            os.close(fd)
            raise
        if self.inotify is not None:
            try:
                from ._fsinfo import FILE_MASK

                o.wd = self.inotify.add(self.path, FILE_MASK, self)
            except Exception:
                o.wd = None
        return o

    def _open_name(self, now: float, r: PollResult) -> None:
        try:
            o = self._open(now, r)
        except FileNotFoundError:
            if self.state == "new" and not self.explicit:
                self.state = "done"
                r.done = True
            elif self.state == "new":
                self.state = "missing"
                self._error(r, "not found; waiting for it to appear")
            elif self.state in ("missing",) and not self.explicit and self.missing_since is not None and now - self.missing_since >= LINGER_S and not self.old:
                self.state = "done"
                r.done = True
            return
        except NotRegularFile as e:
            self.state = "error"
            self._error(r, f"{e.strerror}: not followed")
            # a followed file replaced by a FIFO... may come back soon: retry every second
            r.hint = 1.0 if self.ever_opened else RETRY_S
            return
        except PermissionError:
            self.state = "error"
            self._error(r, "permission denied")
            r.hint = RETRY_S
            return
        except OSError as e:
            self.state = "error"
            self._error(r, f"open: {e.strerror or e}")
            r.hint = RETRY_S
            return
        detail = f"{o.size} bytes"
        lost = self.lost
        self.lost = None
        if lost is not None and (lost.dev, lost.ino) == (o.dev, o.ino) and o.size >= lost.pos:
            o.pos, o.emit_off, o.pending, o.pending_cont = lost.pos, lost.emit_off, lost.pending, lost.pending_cont
            o.tail, o.ckpts, o.recs = lost.tail, lost.ckpts, lost.recs
            detail = f"reopened after an error; continuing at offset {o.pos}"
        elif lost is not None:
            detail = "reopened after an error: a different file; reading from the start"
        elif not self.ever_opened and self.startup:
            if self.history_only:
                o.history_end = o.size
                detail += ", history only (rotated file)"
            elif self.start == "at" and self.at is not None and self.at[0] in (None, (o.dev, o.ino)):
                # the history pass read up to ``off``: follow from there, knowing the last lines
                # it read (a truncation since is then handled as any other)
                off, back = self.at[1], (self.at[2] if len(self.at) > 2 else b"")
                o.pos = o.emit_off = off
                if off and back:
                    o.tail = back[-OVERLAP:]
                    whole = back[-o.recs.max_bytes:]
                    if len(whole) < len(back):
                        whole = whole[whole.find(b"\n") + 1:]
                    if whole:
                        o.recs.add(off - len(whole), whole)
                        o.ckpts.append((off, whole[-CKPT_SAMPLE:]))
                elif off:
                    o.tail = os_pread(o.fd, min(OVERLAP, off, o.size), max(0, min(off, o.size) - OVERLAP))
                detail += f", history read to offset {off}; following from there"
            elif self.start == "at":
                o.history_end = o.size  # another file than the one read: read it all
                detail += ", another file than the one whose history was read: read again"
            elif self.start == "end":
                o.pos = o.emit_off = o.size
                if o.size:
                    t = os_pread(o.fd, min(OVERLAP, o.size), o.size - min(OVERLAP, o.size))
                    o.tail = t
                    o.skip_nl = not t.endswith(b"\n")
                detail += ", following from the end"
            elif self.history:
                o.history_end = o.size
        elif self.ever_opened:
            detail = "recreated; " + detail
        if self.link_outside and not self.ever_opened:
            detail += f"; followed a link outside the tree (to {self.link_outside})"
        if self.gz:
            o.history_end = 1 << 62
        self.ever_opened = True
        self.cur = o
        self.state = "open"
        self.err = None
        self.missing_since = None
        self.last_name_check = now
        self._event(r, "added", detail)

    def _io_error(self, e: OSError, now: float, r: PollResult, what: str) -> None:
        f = self.cur
        if f is not None:
            self._flush(f, r, "partial line before a read error; newline added")
            self._unwatch(f)
            f.close()
            self.lost = f
            self.cur = None
        self.state = "error"
        self.err = None
        self._error(r, f"{what}: {e.strerror or e}; reopening by name")
        r.hint = 1.0

    # -- the poll ----------------------------------------------------------
    def poll(self, now: float, budget: int = READ_CHUNK) -> PollResult:
        r = PollResult(budget=budget)
        if self.state == "done":
            r.done = True
            return r
        try:
            if self.gz:
                self._poll_gz(now, r)
            else:
                self._poll(now, r)
        except OSError as e:
            self._io_error(e, now, r, "read")
        return r

    def _poll(self, now: float, r: PollResult) -> None:
        if self.cur is None:
            self._open_name(now, r)
            if self.cur is None:
                if self.state == "missing" and self.missing_since is not None and now - self.missing_since < AWAIT_NAME_S:
                    r.hold = True  # deleted a moment ago: a new file may come at once
                if self.old:
                    for o in list(self.old):
                        self._poll_old(o, now, r)
                if r.done:
                    self.close()
                return
        for o in list(self.old):
            self._poll_old(o, now, r)
            if (o.static and o in self.old) or r.more:
                r.more = True
                return  # finish the old file (or recovered copy) before reading the new one
        f = self.cur
        if not self.sniffed and f.head.rstrip(b"\0"):
            self.sniffed = True
            if sniff(f.head) == "binary":  # as scan does
                self._error(r, "binary file, not a log: not followed")
                self.close()
                self.state = "done"
                r.done = True
                return
        try:
            st = os_fstat(f.fd)
        except OSError as e:
            self._io_error(e, now, r, "fstat")
            return
        r.calls += 1
        f.nlink = st.st_nlink
        size = st.st_size
        grew = False
        if size < f.pos:
            self._rewind(f, size, now, r)
            if any(o.static for o in self.old):
                f.size, f.mtime_ns = size, st.st_mtime_ns
                r.more = True
                return
        elif size == f.pos and f.pos > 0 and (st.st_mtime_ns != f.mtime_ns or _recent(st.st_mtime_ns)):
            # same size: truncated and rewritten to the same length? A write in the same
            # timestamp tick as the last one leaves the mtime unchanged, so while the mtime
            # is recent the bytes are checked (head and the window before our offset)
            self._rewind(f, size, now, r)
        if size > f.pos:
            before = f.pos
            if self._read(f, size, now, r) == "mismatch":
                self._rewind(f, size, now, r)
                if any(o.static for o in self.old):
                    f.size, f.mtime_ns = size, st.st_mtime_ns
                    r.more = True
                    return
                self._read(f, size, now, r)
            grew = f.pos > before
        f.size, f.mtime_ns = size, st.st_mtime_ns
        if self.history_only and f.pos >= f.history_end:
            self._flush(f, r, "end of a rotated file without a final newline; newline added")
            self.close()
            self.state = "done"
            r.done = True
            return
        if f.pending and not grew and now - f.last_growth >= PARTIAL_TIMEOUT_S and not r.hold:
            if self._flush(f, r, f"partial line quiet for {PARTIAL_TIMEOUT_S:g} s; newline added"):
                f.pending_cont = True
        at_eof = f.pos >= size and not r.more
        since = now - self.last_name_check
        if at_eof and not self.history_only and (
            self.force_name_check or since >= max(NAME_CHECK_MAX_S, self.name_check_min)
            or (self.odd_name and since >= NAME_CHECK_MIN_S)
            or (not grew and since >= self.name_check_min)
        ):
            self._name_check(now, r)
        if self.odd_name:
            r.hold = True  # poll again soon: the name is checked every second meanwhile

    def _name_check(self, now: float, r: PollResult) -> None:
        self.last_name_check = now
        self.force_name_check = False
        cur = self.cur
        assert cur is not None
        try:
            if self.cto:
                fd = os_open(self.path, _O_FLAGS)
                try:
                    st = os_fstat(fd)
                finally:
                    os.close(fd)
                r.calls += 2
            else:
                st = os_stat(self.path)
                r.calls += 1
        except (FileNotFoundError, NotADirectoryError):
            r.calls += 1
            if cur.nlink == 0:
                self.old.append(cur)
                self.cur = None
                self.state = "missing"
                self.missing_since = now
                cur.last_growth = now
                self._event(r, "deleted", f"name removed at offset {cur.pos}; the open file is read for {LINGER_S:g} s more in case its writer still writes")
            else:
                # renamed away, the new file not created yet (rotation in progress):
                # look again soon, not at the quiet cadence (nothing else will tell us
                # when the new file appears: no inotify watch is on it yet)
                if self.awaiting_since is None:
                    self.awaiting_since = now
                if now - self.awaiting_since < AWAIT_NAME_S:
                    self.force_name_check = True
                    r.hold = True
            return
        except OSError as e:
            self._error(r, f"stat: {e.strerror or e}")
            return
        self.awaiting_since = None
        if (st.st_dev, st.st_ino) == (cur.dev, cur.ino):
            self.err = None  # the name is our file again (a refusal is said once per change)
            self.odd_name = False
            return
        self._switch(now, r)

    def _switch(self, now: float, r: PollResult) -> None:
        cur = self.cur
        assert cur is not None
        try:
            new = self._open(now, r)
        except FileNotFoundError:
            return
        except NotRegularFile as e:
            self._error(r, f"{e.strerror} now: not followed")
            # a regular file may take its place at any time, and nothing announces it (the
            # inotify watch is on the old file): look at the name every second meanwhile
            self.odd_name = True
            return
        except OSError as e:
            self._error(r, f"open: {e.strerror or e}")
            return
        if (new.dev, new.ino) == (cur.dev, cur.ino):
            self._unwatch(new)
            new.close()
            return
        try:
            cur.nlink = os_fstat(cur.fd).st_nlink
            r.calls += 1
        except OSError:
            cur.nlink = 0
        if cur.nlink > 0:
            state = "rotated"
            detail = f"renamed away at offset {cur.pos}; following the new file from the start"
        else:
            state = "replaced"
            detail = "old file deleted and a new one created; following the new file from the start"
            if cur.head and new.size >= cur.pos and new.head == cur.head:
                ok = True
                if cur.tail:
                    try:
                        ok = os_pread(new.fd, len(cur.tail), cur.pos - len(cur.tail)) == cur.tail
                    except OSError:
                        ok = False
                if ok:
                    new.pos, new.emit_off, new.pending, new.pending_cont = cur.pos, cur.emit_off, cur.pending, cur.pending_cont
                    new.tail, new.ckpts, new.recs = cur.tail, cur.ckpts, cur.recs
                    cur.pending = b""
                    detail = f"replaced by a file with the same content up to offset {cur.pos}; continuing there"
        # The new name exists now, so whatever the writer put in the old file before
        # creating the new one is visible: drain it first, so lines stay in order.
        try:
            st_old = os_fstat(cur.fd)
            r.calls += 1
            if st_old.st_size > cur.pos:
                self._read(cur, st_old.st_size, now, r)
        except OSError:
            pass
        cur.last_growth = now
        cur.note = "late write to the old (rotated) file"
        self.old.append(cur)
        self.cur = new
        self.odd_name = False
        self.err = None
        self._event(r, state, detail)
        if r.more:
            return  # the old file is not drained yet (budget): the new one waits
        # read the new file right away (lower latency after a rotation)
        try:
            st = os_fstat(new.fd)
            r.calls += 1
            if st.st_size > new.pos:
                if self._read(new, st.st_size, now, r) == "mismatch":
                    self._rewind(new, st.st_size, now, r)
            new.size, new.mtime_ns = st.st_size, st.st_mtime_ns
        except OSError as e:
            self._io_error(e, now, r, "fstat")

    # -- gzip history --------------------------------------------------------
    def _poll_gz(self, now: float, r: PollResult) -> None:
        if self.cur is None:
            self._open_name(now, r)
            if self.cur is None:
                return
            try:
                self.cur.gz = gzip.GzipFile(fileobj=os.fdopen(os.dup(self.cur.fd), "rb"))
            except OSError as e:
                self._error(r, f"gzip: {e}")
                self.close()
                self.state = "done"
                r.done = True
                return
        f = self.cur
        try:
            data = f.gz.read(min(r.budget, READ_CHUNK))
        except (OSError, EOFError, zlib.error) as e:
            self._error(r, f"gzip: {e}")
            data = b""
        if data:
            f.pos += len(data)
            self._emit(f, data, r, True)
            r.nbytes += len(data)
            r.budget -= len(data)
            r.active = True
            r.more = True
            return
        self._flush(f, r, "end of a rotated file without a final newline; newline added")
        self.close()
        self.state = "done"
        r.done = True


# --- directories and globs ---------------------------------------------------

_LIVE_SUFFIXES = (".log", ".out", ".err", ".txt")
_LIVE_NAMES = frozenset({"error.json"})
_ROT_NUM = re.compile(r"^(.+)\.(\d{1,3})$")
_ROT_DATE = re.compile(r"^(.+)-\d{8}(\d{2,6})?$")


def classify_name(name: str) -> str | None:
    """``"live"``, ``"rotated"`` (history only) or ``None`` for a file name in a directory.

    Live: ``*.log *.out *.err *.txt`` (torchrun's ``stdout.log``/``stderr.log``, Slurm's
    ``%j-%t.out``), ``error.json``.  Rotated: those followed by ``.N``, ``-YYYYMMDD`` and/or
    ``.gz`` (``train.log.1``, ``train.log.2.gz``, ``train.log-20240101``).
    """
    if name.startswith("."):
        return None
    base = name
    rotated = False
    if base.endswith(".gz"):
        base = base[:-3]
        rotated = True
    m = _ROT_NUM.match(base) or _ROT_DATE.match(base)
    if m:
        base = m.group(1)
        rotated = True
    if base in _LIVE_NAMES or base.endswith(_LIVE_SUFFIXES):
        return "rotated" if rotated else "live"
    return None


def _has_magic(s: str) -> bool:
    return any(c in s for c in "*?[")


def _match_prefix(parts: tuple[str, ...], pats: tuple[str, ...]) -> bool:
    """Can a path starting with ``parts`` match ``pats``?"""
    for i, p in enumerate(parts):
        if i >= len(pats):
            return False
        if pats[i] == "**":
            return True
        if not _comp_match(p, pats[i]):
            return False
    return True


def _comp_match(name: str, pat: str) -> bool:
    if name.startswith(".") and not pat.startswith("."):
        return False
    return fnmatch.fnmatchcase(name, pat)


def _match_full(parts: tuple[str, ...], pats: tuple[str, ...]) -> bool:
    if not pats:
        return not parts
    if pats[0] == "**":
        return any(_match_full(parts[i:], pats[1:]) for i in range(len(parts) + 1))
    return bool(parts) and _comp_match(parts[0], pats[0]) and _match_full(parts[1:], pats[1:])


@dataclass
class SourceSpec:
    """One user argument: ``kind`` is ``file``, ``dir`` or ``glob``."""

    text: str
    kind: str
    root: str
    pats: tuple[str, ...] = ()


def expand_spec(text: str) -> SourceSpec:
    """Classify a path argument without touching the filesystem (except for ``dir``
    vs ``file`` of an existing path, which is decided by the first poll instead). A path that
    exists is that path even when its name holds ``[`` or ``*`` (as ``scan`` does)."""
    if _has_magic(text) and not os.path.lexists(text):
        parts = text.split("/")
        root_parts: list[str] = []
        for p in parts:
            if _has_magic(p):
                break
            root_parts.append(p)
        root = "/".join(root_parts) or ("/" if text.startswith("/") else ".")
        if text.startswith("/") and not root:
            root = "/"
        pats = tuple(p for p in parts[len(root_parts):] if p != "")
        return SourceSpec(text, "glob", root, pats)
    if text.endswith("/"):
        return SourceSpec(text, "dir", text.rstrip("/") or "/")
    return SourceSpec(text, "path", text)


class DirWatch:
    """One directory of a ``dir`` or ``glob`` source.

    ``poll`` stats the directory (one metadata call) and lists it only when its mtime
    changed (or was within 2 s of the wall clock at the last listing, because a file
    created in the same timestamp tick would not change it again).  It reports every
    matching file present (the tailer ignores those it already follows) and new
    subdirectories to watch.
    """

    kind = "dir"
    MAX_DEPTH = 8

    def __init__(self, path: str, spec: SourceSpec, rel: tuple[str, ...], mode: str, *,
                 root: bool = False, startup: bool = True, inotify: Any = None) -> None:
        self.path = path
        self.spec = spec
        self.rel = rel  # components below spec.root
        self.mode = mode  # "all" (log-name filter) or "glob" (pattern filter)
        self.is_root = root
        self.startup = startup  # first listing belongs to the start-up scan
        self.inotify = inotify
        self.mtime_ns: int | None = None
        self.force = True
        self.children: set[str] = set()
        self.err: str | None = None
        self.wd: int | None = None
        self.state = "new"
        self.source_id = "dir:" + os.path.abspath(path)
        self.refused: set[str] = set()  # links to special files, reported once
        self.root_real: str | None = None
        # scheduling state, owned by the Tailer
        self.lane: Any = None
        self.interval = 0.0
        self.next_due = 0.0
        self.seq = 0
        self.inflight = False
        self.queued = False
        self.hung_reported = False
        self.force_name_check = False

    in_history = False

    def close(self) -> None:
        if self.wd is not None and self.inotify is not None:
            try:
                self.inotify.remove(self.wd)
            except Exception:
                pass
            self.wd = None

    def _error(self, r: PollResult, detail: str) -> None:
        if detail != self.err:
            self.err = detail
            r.items.append(SourceEvent(self.path, "error", detail, self.source_id, kind="dir"))

    def poll(self, now: float, budget: int = 0) -> PollResult:
        r = PollResult(budget=budget)
        try:
            st = os_stat(self.path)
            r.calls += 1
        except FileNotFoundError:
            r.calls += 1
            if self.is_root:
                if self.state == "new":
                    self._error(r, "not found; waiting for it to appear")
                self.state = "missing"
                self.mtime_ns = None
                self.force = True
                return r
            self.close()
            r.done = True
            return r
        except OSError as e:
            r.calls += 1
            self._error(r, f"stat: {e.strerror or e}")
            r.hint = RETRY_S
            return r
        if not stat_mod.S_ISDIR(st.st_mode):
            if self.is_root and self.spec.kind == "path":
                # the argument turned out to be a file: the tailer follows it instead
                r.discovered.append((self.path, False, self.state == "new", True, ""))
                r.done = True
                return r
            if self.is_root:
                self._error(r, f"{_kind_of(st.st_mode)}: not followed")
                r.hint = RETRY_S
                return r
            r.done = True
            return r
        if st.st_mtime_ns == self.mtime_ns and not self.force:
            return r
        first = self.state != "listed"
        if self.inotify is not None and self.wd is None:
            try:
                from ._fsinfo import DIR_MASK

                self.wd = self.inotify.add(self.path, DIR_MASK, self)
            except Exception:
                self.wd = None
        try:
            with os_scandir(self.path) as it:
                entries = list(it)
        except OSError as e:
            r.calls += 1
            self._error(r, f"listdir: {e.strerror or e}")
            r.hint = RETRY_S
            return r
        r.calls += 1 + len(entries) // 1000
        self.err = None
        self.mtime_ns = st.st_mtime_ns
        self.force = abs(time.time() - st.st_mtime_ns / 1e9) < 2.0
        self.state = "listed"
        startup = self.startup and first
        depth = len(self.rel)
        for e in entries:
            name = e.name
            if name.startswith("."):
                continue
            try:
                is_dir = e.is_dir(follow_symlinks=False)
                is_file = not is_dir and e.is_file()
            except OSError:
                continue
            rel = self.rel + (name,)
            if is_dir:
                if name in self.children or depth + 1 > self.MAX_DEPTH:
                    continue
                mode = None
                if self.mode == "all":
                    mode = "all"
                elif _match_full(rel, self.spec.pats):
                    mode = "all"
                elif _match_prefix(rel, self.spec.pats):
                    mode = "glob"
                if mode is not None:
                    self.children.add(name)
                    r.new_dirs.append(DirWatch(e.path, self.spec, rel, mode, startup=startup, inotify=self.inotify))
            elif is_file or e.is_symlink():
                if self.mode == "all":
                    c = classify_name(name)
                else:
                    c = None
                    if _match_full(rel, self.spec.pats):
                        c = classify_name(name) or "live"
                        if c == "rotated" and not _has_magic(self.spec.pats[-1]):
                            c = "live"
                if c is None:
                    continue
                link = ""
                if e.is_symlink():
                    why = special_target(e.path)
                    if why is None and not is_file and os.path.exists(e.path):
                        why = "a FIFO, device or socket"
                    if why:  # refused as scan refuses such a file named directly
                        if e.path not in self.refused:
                            self.refused.add(e.path)
                            r.items.append(SourceEvent(e.path, "error", f"a link to {why}: not followed",
                                                       os.path.abspath(e.path)))
                        continue
                    if not is_file:
                        continue  # a dangling link
                    if self.root_real is None:
                        self.root_real = os.path.realpath(self.spec.root)
                    link = link_outside(e.path, self.root_real) or ""
                if c == "live":
                    r.discovered.append((e.path, False, startup, False, link))
                elif c == "rotated" and startup:
                    r.discovered.append((e.path, True, startup, False, link))
        # forget children that disappeared so a re-created one is found again
        if self.children:
            names = {e.name for e in entries}
            self.children &= names
        return r
