"""What a follower does when its name leads elsewhere: rotation, replacement, deletion.

While the file is quiet (or at least every ``NAME_CHECK_MAX_S``) the follower ``stat``s
its name (on NFS: open+fstat+close, which refreshes the attribute cache).  Another inode
means rotation (our file still has a name) or replacement (ours was deleted); no name
means deleted, or renamed away with the new file not created yet.  The old file is
drained first, so lines stay in order, then read for ``LINGER_S`` more in case its
writer has not reopened yet (``_poll_old``, also used for a copytruncate copy).

``NameChecks`` is a part of ``FileFollower`` (live/follower.py), split out to keep each
module to one idea; it uses the follower's ``path``, ``cto``, ``cur``, ``old``, ``state``,
``err``, ``odd_name``, ``awaiting_since``, ``missing_since`` and its ``_open``,
``_rewind``, ``_unwatch``, ``_event``, ``_error`` and ``_io_error``.
"""

from __future__ import annotations

import os

from . import sources as _s
from .openfile import OpenFile
from .sources import AWAIT_NAME_S, LINGER_S, O_FLAGS, NotRegularFile, PollResult


class NameChecks:
    """Rotation, replacement, deletion and the linger of old files (a ``FileFollower`` part)."""

    def _poll_old(self, o: OpenFile, now: float, r: PollResult) -> None:
        """Drain an old inode (rotated away, deleted, or a copytruncate copy)."""
        retire = False
        try:
            if o.static:
                size = o.size
            else:
                st = _s.os_fstat(o.fd)
                r.calls += 1
                size = st.st_size
            if size > o.pos:
                if o.read(size, now, r, o.note) == "mismatch":
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
            o.flush(r, why)
            self._unwatch(o)
            o.close()
            if o in self.old:
                self.old.remove(o)

    def _name_check(self, now: float, r: PollResult) -> None:
        self.last_name_check = now
        self.force_name_check = False
        cur = self.cur
        assert cur is not None
        try:
            if self.cto:
                fd = _s.os_open(self.path, O_FLAGS)
                try:
                    st = _s.os_fstat(fd)
                finally:
                    os.close(fd)
                r.calls += 2
            else:
                st = _s.os_stat(self.path)
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
        state, detail = self._what_changed(cur, new, r)
        # The new name exists now, so whatever the writer put in the old file before
        # creating the new one is visible: drain it first, so lines stay in order.
        try:
            st_old = _s.os_fstat(cur.fd)
            r.calls += 1
            if st_old.st_size > cur.pos:
                cur.read(st_old.st_size, now, r)
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
            st = _s.os_fstat(new.fd)
            r.calls += 1
            if st.st_size > new.pos:
                if new.read(st.st_size, now, r) == "mismatch":
                    self._rewind(new, st.st_size, now, r)
            new.size, new.mtime_ns = st.st_size, st.st_mtime_ns
        except OSError as e:
            self._io_error(e, now, r, "fstat")

    def _what_changed(self, cur: OpenFile, new: OpenFile, r: PollResult) -> tuple[str, str]:
        """Another file is under the name: ``rotated`` (ours still has a name) or
        ``replaced`` (ours was deleted); a replacement with our content up to our offset
        (a copy written back) is read on from there."""
        try:
            cur.nlink = _s.os_fstat(cur.fd).st_nlink
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
                        ok = _s.os_pread(new.fd, len(cur.tail), cur.pos - len(cur.tail)) == cur.tail
                    except OSError:
                        ok = False
                if ok:
                    new.pos, new.emit_off, new.pending, new.pending_cont = cur.pos, cur.emit_off, cur.pending, cur.pending_cont
                    new.tail, new.ckpts, new.recs = cur.tail, cur.ckpts, cur.recs
                    cur.pending = b""
                    detail = f"replaced by a file with the same content up to offset {cur.pos}; continuing there"
        return state, detail
