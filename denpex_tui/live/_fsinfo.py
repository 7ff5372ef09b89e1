"""inotify helpers (and the NFS close-to-open list) for the live source layer.

Both are local to the machine: reading ``/proc/self/mounts`` never touches a
network filesystem, and the inotify file descriptor lives in the kernel.  The
only blocking call here is ``inotify_add_watch`` (it resolves a path, which can
hang on a dead NFS mount), so the tailer only calls it from its worker threads.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import struct
import threading

# The mount table (and which filesystems are network ones) is the probes' one:
# denpex_tui.probes.mounts.MountTable. On these, a changed attribute cache is refreshed
# by open() (close-to-open consistency), not by stat(): the name check reopens the file.
CTO_FS = frozenset({"nfs", "nfs4"})


# --- inotify (optional speed-up) ------------------------------------------

IN_MODIFY = 0x00000002
IN_ATTRIB = 0x00000004
IN_CLOSE_WRITE = 0x00000008
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000

FILE_MASK = IN_MODIFY | IN_ATTRIB | IN_MOVE_SELF | IN_DELETE_SELF
DIR_MASK = IN_CREATE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE | IN_MOVE_SELF | IN_DELETE_SELF | IN_ONLYDIR
# Events that make a file's name worth checking at once (rename, unlink).
NAME_EVENTS = IN_ATTRIB | IN_MOVE_SELF | IN_DELETE_SELF

_HDR = struct.Struct("iIII")


class Inotify:
    """Minimal ctypes inotify wrapper: one fd, watch descriptor -> owner key.

    ``add`` may block (path lookup) and is called from worker threads; ``read``
    is non-blocking and is called on the event loop when the fd is readable.
    """

    def __init__(self) -> None:
        name = ctypes.util.find_library("c") or "libc.so.6"
        self._libc = ctypes.CDLL(name, use_errno=True)
        fd = self._libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e))
        self.fd = fd
        self._lock = threading.Lock()
        self._owner: dict[int, object] = {}
        self.full = False  # max_user_watches reached: polling only from now on

    def add(self, path: str, mask: int, owner: object) -> int | None:
        if self.full or self.fd < 0:
            return None
        wd = self._libc.inotify_add_watch(self.fd, os.fsencode(path), ctypes.c_uint32(mask))
        if wd < 0:
            if ctypes.get_errno() == errno.ENOSPC:
                self.full = True
            return None
        with self._lock:
            self._owner[wd] = owner
        return wd

    def remove(self, wd: int | None) -> None:
        if wd is None or self.fd < 0:
            return
        with self._lock:
            self._owner.pop(wd, None)
        self._libc.inotify_rm_watch(self.fd, ctypes.c_int(wd))

    def read(self) -> tuple[list[tuple[object, int]], bool]:
        """Drain pending events: ``([(owner, mask), ...], overflowed)``."""
        out: list[tuple[object, int]] = []
        overflow = False
        while True:
            try:
                buf = os.read(self.fd, 65536)
            except BlockingIOError:
                break
            except OSError:
                break
            if not buf:
                break
            i = 0
            n = len(buf)
            with self._lock:
                owners = self._owner
                while i + 16 <= n:
                    wd, mask, _cookie, ln = _HDR.unpack_from(buf, i)
                    i += 16 + ln
                    if mask & IN_Q_OVERFLOW:
                        overflow = True
                        continue
                    if mask & IN_IGNORED:
                        owners.pop(wd, None)
                        continue
                    owner = owners.get(wd)
                    if owner is not None:
                        out.append((owner, mask))
            if n < 65536 - 4096:
                break
        return out, overflow

    def close(self) -> None:
        if self.fd >= 0:
            try:
                os.close(self.fd)
            except OSError:
                pass
            self.fd = -1
