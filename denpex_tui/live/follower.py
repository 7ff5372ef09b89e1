"""``FileFollower``: follow one path, across rotation, truncation, replacement and deletion.

The follower owns what the *name* leads to: it opens the file by name, decides where
reading starts (history, the history pass's offset, the end), checks the name for another
file (rotation, replacement), notices deletion, keeps reading an old file for
``LINGER_S`` in case its writer still writes, reopens after I/O errors, and rewinds after a
truncation (the steps are in ``live/truncation.py``).  Reading the bytes of an open file
into whole-line chunks is ``OpenFile``'s (``live/openfile.py``).

Blocking: every method that touches the filesystem is meant to run in a worker thread
(the ``Tailer`` does that).
"""

from __future__ import annotations

import errno
import gzip
import os
import stat as stat_mod
import time
import zlib
from typing import Any

from denpex_tui.core.lines.reader import sniff, special_target

from . import sources as _s
from .openfile import OpenFile
from .sources import (
    AWAIT_NAME_S,
    CKPT_SAMPLE,
    HEAD_BYTES,
    LINGER_S,
    MTIME_SLACK_S,
    NAME_CHECK_MAX_S,
    NAME_CHECK_MIN_S,
    O_FLAGS,
    OVERLAP,
    PARTIAL_TIMEOUT_S,
    READ_CHUNK,
    RETRY_S,
    NotRegularFile,
    PollResult,
    Scheduled,
    SourceEvent,
    kind_of,
)
from .rotation import NameChecks
from .truncation import open_copy, reread_from, resume_point, rewind_event

__all__ = ["FileFollower"]


def _recent(mtime_ns: int) -> bool:
    return abs(time.time() - mtime_ns / 1e9) < MTIME_SLACK_S


class FileFollower(NameChecks, Scheduled):
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
        self.cur: OpenFile | None = None
        self.old: list[OpenFile] = []
        self.state = "new"  # new, open, missing, error, done
        self.err: str | None = None
        self.ever_opened = False
        self.last_name_check = 0.0
        self.name_check_min = NAME_CHECK_MIN_S  # the Tailer raises it with many files
        self.awaiting_since: float | None = None  # renamed away, new file not there yet
        self.force_name_check = False
        self.missing_since: float | None = None
        self.lost: OpenFile | None = None  # identity of a file we lost to an I/O error
        self.odd_name = False  # the name points to a FIFO, device... instead of a file
        self.link_outside = link_outside  # a link out of the followed tree: its target
        self.sniffed = False  # told text from binary (from the first bytes)

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


    def close(self) -> None:
        for o in self.old:
            self._unwatch(o)
            o.close()
        self.old = []
        if self.cur is not None:
            self._unwatch(self.cur)
            self.cur.close()
            self.cur = None

    def _unwatch(self, f: OpenFile) -> None:
        if f.wd is not None and self.inotify is not None:
            try:
                self.inotify.remove(f.wd)
            except Exception:
                pass
            f.wd = None

    # -- emission ----------------------------------------------------------

    # -- truncation and rewrites (live/truncation.py has the steps) ---------------
    def _rewind(self, f: OpenFile, size: int, now: float, r: PollResult) -> bool:
        """The file is shorter than our offset, or its bytes before our offset changed
        (truncated and rewritten between two polls, or rewritten in place): read again
        from the last line boundary before the first changed byte, so that no unchanged
        line is emitted twice and no new one is skipped.  Returns False if nothing changed.

        Lines the writer appended after our last read and before the truncation are gone
        from the file: they are read from ``<path>.1`` when that is a copy of what we were
        reading (logrotate's copytruncate); otherwise a ``possibly-lost`` event says so."""
        d = resume_point(f, size)
        if d is None:
            return False
        b, how, m = d
        b = min(b, f.emit_off)  # a partial line is read again from its start
        old_pos, old_emit = f.pos, f.emit_off
        rec = None
        if b < f.emit_off or b == 0:
            rec = open_copy(self.path, f, now, r)
        if rec is not None:
            self.old.insert(0, rec)
            self._poll_old(rec, now, r)
        elif b < f.emit_off:
            # the partial line after the change was never emitted and is gone from the file
            f.flush(r, "partial line before truncation; newline added")
        reread_from(f, b, old_emit)
        r.items.append(rewind_event(self.path, self.source_id, size=size, old_pos=old_pos, changed_at=m,
                                    b=b, how=how, recovered=rec is not None))
        return True

    def _open(self, now: float, r: PollResult) -> OpenFile:
        st = _s.os_stat(self.path)
        r.calls += 1
        if not stat_mod.S_ISREG(st.st_mode):
            raise NotRegularFile(errno.EINVAL, kind_of(st.st_mode))
        why = special_target(self.path) if not self.history_only else None
        if why:  # /proc/kmsg says it is a regular file
            raise NotRegularFile(errno.EINVAL, why)
        fd = _s.os_open(self.path, O_FLAGS)
        r.calls += 1
        try:
            st2 = _s.os_fstat(fd)
            r.calls += 1
            if not stat_mod.S_ISREG(st2.st_mode):
                raise NotRegularFile(errno.EINVAL, kind_of(st2.st_mode))
            o = OpenFile(fd, st2, now, self.source_id, self.path)
            if st2.st_size:
                o.head = _s.os_pread(fd, min(HEAD_BYTES, st2.st_size), 0)
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
        except OSError as e:
            self._open_failed(e, now, r)
            return
        detail = self._position(o)
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

    def _open_failed(self, e: OSError, now: float, r: PollResult) -> None:
        """The name could not be opened: wait for it, give up on it, or retry later."""
        if isinstance(e, FileNotFoundError):
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
        self.state = "error"
        if isinstance(e, NotRegularFile):
            self._error(r, f"{e.strerror}: not followed")
            # a followed file replaced by a FIFO... may come back soon: retry every second
            r.hint = 1.0 if self.ever_opened else RETRY_S
        elif isinstance(e, PermissionError):
            self._error(r, "permission denied")
            r.hint = RETRY_S
        else:
            self._error(r, f"open: {e.strerror or e}")
            r.hint = RETRY_S

    def _position(self, o: OpenFile) -> str:
        """Where reading starts in a file just opened by name (resuming after an error,
        history, the history pass's offset, the end); returns the ``added`` event's detail."""
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
                self._resume_history(o)
                detail += f", history read to offset {self.at[1]}; following from there"
            elif self.start == "at":
                o.history_end = o.size  # another file than the one read: read it all
                detail += ", another file than the one whose history was read: read again"
            elif self.start == "end":
                o.pos = o.emit_off = o.size
                if o.size:
                    t = _s.os_pread(o.fd, min(OVERLAP, o.size), o.size - min(OVERLAP, o.size))
                    o.tail = t
                    o.skip_nl = not t.endswith(b"\n")
                detail += ", following from the end"
            elif self.history:
                o.history_end = o.size
        elif self.ever_opened:
            detail = "recreated; " + detail
        return detail

    def _resume_history(self, o: OpenFile) -> None:
        """The history pass read up to ``off``: follow from there, knowing the last lines it
        read (a truncation since is then handled as any other)."""
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
            o.tail = _s.os_pread(o.fd, min(OVERLAP, off, o.size), max(0, min(off, o.size) - OVERLAP))

    def _io_error(self, e: OSError, now: float, r: PollResult, what: str) -> None:
        f = self.cur
        if f is not None:
            f.flush(r, "partial line before a read error; newline added")
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
            st = _s.os_fstat(f.fd)
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
            if f.read(size, now, r) == "mismatch":
                self._rewind(f, size, now, r)
                if any(o.static for o in self.old):
                    f.size, f.mtime_ns = size, st.st_mtime_ns
                    r.more = True
                    return
                f.read(size, now, r)
            grew = f.pos > before
        f.size, f.mtime_ns = size, st.st_mtime_ns
        if self.history_only and f.pos >= f.history_end:
            f.flush(r, "end of a rotated file without a final newline; newline added")
            self.close()
            self.state = "done"
            r.done = True
            return
        if f.pending and not grew and now - f.last_growth >= PARTIAL_TIMEOUT_S and not r.hold:
            if f.flush(r, f"partial line quiet for {PARTIAL_TIMEOUT_S:g} s; newline added"):
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
            f.emit(data, r, True)
            r.nbytes += len(data)
            r.budget -= len(data)
            r.active = True
            r.more = True
            return
        f.flush(r, "end of a rotated file without a final newline; newline added")
        self.close()
        self.state = "done"
        r.done = True

