"""A process reader that degrades instead of raising.

``read_process()`` returns a :class:`ProcessReading` for any pid, always: a process that exited
between listing and reading, that we may not read (another user's, without privileges), that is
a zombie, or whose pid now belongs to another process (create_time changed) gives
``readable=False`` with ``None`` readings and an ``error`` saying why, never an exception and
never a zero.

On Linux it reads /proc directly and only what the screen needs, per process:

* ``/proc/PID/stat`` once (state, start time for the PID-reuse guard, rss);
* ``prlimit(pid, RLIMIT_NOFILE)`` (one syscall; /proc/PID/limits only if that is refused);
* ``/proc/PID/fd``: one ``scandir`` and one ``readlink`` per fd, classified by the link text;
* ``stat(/proc/PID/fd/N)`` only for targets ending in `` (deleted)``, to get the blocks the
  orphaned inode still holds (``st_blocks * 512``), once per ``(st_dev, st_ino)``.

Elsewhere (macOS dev boxes) it falls back to psutil with the same degrade rules.
"""

from __future__ import annotations

import os
import stat as _stat
import time
from typing import Callable, Iterable

from .readings import DeletedFile, ProcessReading
from .mounts import is_under
from .processes import create_time_from_ticks

try:
    import resource as _resource
except ImportError:  # pragma: no cover - Windows
    _resource = None  # type: ignore[assignment]

PROC = "/proc"
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096

STATUS_NAMES = {
    "R": "running",
    "S": "sleeping",
    "D": "disk-sleep",
    "T": "stopped",
    "t": "tracing-stop",
    "Z": "zombie",
    "X": "dead",
    "x": "dead",
    "K": "wake-kill",
    "W": "waking",
    "P": "parked",
    "I": "idle",
}

DELETED_SUFFIX = " (deleted)"
_MISSING = object()


class _Gone(Exception):
    pass


def _read_stat(pid: int, proc: str) -> tuple[str, int, int, int]:
    """(state, ppid, starttime ticks, rss pages); raises _Gone / PermissionError."""
    try:
        with open(f"{proc}/{pid}/stat", "rb", buffering=0) as f:
            raw = f.read(4096)
    except (FileNotFoundError, ProcessLookupError):
        raise _Gone()
    r = raw.rindex(b")")
    rest = raw[r + 2 :].split()
    return rest[0].decode(), int(rest[1]), int(rest[19]), int(rest[21])


def _limits_from_proc(pid: int, proc: str) -> tuple[int | None, int | None]:
    try:
        with open(f"{proc}/{pid}/limits", "r") as f:
            for line in f:
                if line.startswith("Max open files"):
                    parts = line.split()
                    soft, hard = parts[3], parts[4]
                    return (
                        None if soft == "unlimited" else int(soft),
                        None if hard == "unlimited" else int(hard),
                    )
    except (OSError, ValueError, IndexError):
        pass
    return None, None


def fd_limits(pid: int, proc: str = PROC) -> tuple[int | None, int | None]:
    """The process's own soft and hard RLIMIT_NOFILE (None when unknown or unlimited)."""
    if _resource is not None and hasattr(_resource, "prlimit") and proc == PROC:
        try:
            soft, hard = _resource.prlimit(pid, _resource.RLIMIT_NOFILE)
            inf = _resource.RLIM_INFINITY
            return (None if soft == inf else soft, None if hard == inf else hard)
        except (PermissionError, ProcessLookupError, OSError):
            pass
    return _limits_from_proc(pid, proc)


def classify_target(target: str) -> str:
    """fd kind from its /proc/PID/fd link text: file, socket, pipe, anon, shm, dev, other."""
    if target.startswith("/"):
        if target.startswith("/memfd:") or target.startswith("/dev/shm/"):
            return "shm"
        if target.startswith("/dev/"):
            return "dev"
        return "file"
    if target.startswith("socket:"):
        return "socket"
    if target.startswith("pipe:"):
        return "pipe"
    if target.startswith("anon_inode:"):
        return "anon"
    return "other"


def read_process(
    pid: int,
    *,
    expect_create_time: float | None = None,
    watched: Iterable[str] = (),
    mount_of: Callable[[str], str | None] | None = None,
    proc: str = PROC,
    base: ProcessReading | None = None,
) -> ProcessReading:
    """Read one process. Never raises for process-state reasons.

    ``watched``: canonical (realpath) directories; fds open under each are counted.
    ``mount_of``: maps an absolute path to its mount point (string lookup), to list the
    filesystems the process holds files on. ``base``: a reading with identity fields (rank,
    cmdline, role) already filled; it is updated in place and returned.
    """
    t0 = time.perf_counter()
    r = base if base is not None else ProcessReading(pid=pid)
    r.pid = pid
    if not os.path.isdir(proc):  # pragma: no cover - non-Linux
        _read_with_psutil(r, expect_create_time)
        r.read_cost_s = time.perf_counter() - t0
        return r
    try:
        state, _ppid, ticks, rss_pages = _read_stat(pid, proc)
    except _Gone:
        return _unreadable(r, "exited", "exited", t0)
    except PermissionError:
        return _unreadable(r, "access denied", None, t0)
    except (OSError, ValueError, IndexError):
        return _unreadable(r, "exited", "exited", t0)

    ctime = create_time_from_ticks(ticks)
    if expect_create_time is not None and abs(ctime - expect_create_time) > 1e-3:
        # the pid now belongs to another process: the one we watched is gone
        return _unreadable(r, "pid reused", "exited", t0)
    r.create_time = ctime
    r.status = STATUS_NAMES.get(state, state)
    if state in ("Z", "X", "x"):
        return _unreadable(r, "zombie", r.status, t0)
    r.rss_bytes = rss_pages * _PAGE
    try:
        r.uid = os.stat(f"{proc}/{pid}").st_uid
    except OSError:
        r.uid = None
    r.fd_soft_limit, r.fd_hard_limit = fd_limits(pid, proc)

    err = _read_fds(r, pid, proc, list(watched), mount_of)
    if err is not None:
        r.error = err
        r.readable = False
        for name in ("fds", "fds_by_kind", "deleted_open_files", "deleted_open_bytes", "deleted",
                     "shm_open_files", "shm_open_bytes", "open_under_watched", "open_mounts"):
            setattr(r, name, None)
        if err == "exited":
            r.status = "exited"
            r.rss_bytes = None
    else:
        r.error = None
        r.readable = r.fd_soft_limit is not None and r.rss_bytes is not None
        if r.fd_soft_limit is None:
            r.error = "fd limit unreadable"
    r.read_cost_s = time.perf_counter() - t0
    return r


def _read_fds(
    r: ProcessReading,
    pid: int,
    proc: str,
    watched: list[str],
    mount_of: Callable[[str], str | None] | None,
) -> str | None:
    fd_dir = f"{proc}/{pid}/fd"
    kinds = {"file": 0, "socket": 0, "pipe": 0, "anon": 0, "shm": 0, "dev": 0, "other": 0}
    under = {w: 0 for w in watched}
    mounts: dict[str, int] = {}
    dir_mount: dict[str, object] = {}  # parent dir -> mount point (most fds share a few dirs)
    deleted: dict[tuple[int, int], DeletedFile] = {}
    shm_inodes: dict[tuple[int, int], int] = {}
    n = 0
    vanished = 0
    readlink = os.readlink
    # one open of /proc/PID/fd, then readlink/stat relative to it: no path walk per fd
    try:
        dfd = os.open(fd_dir, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    except (FileNotFoundError, ProcessLookupError):
        return "exited"
    except PermissionError:
        return "access denied"
    except OSError as e:
        return f"unreadable ({e.strerror or e})"
    try:
        try:
            names = os.listdir(dfd)
        except (FileNotFoundError, ProcessLookupError):
            return "exited"
        except PermissionError:
            return "access denied"
        except OSError as e:
            return f"unreadable ({e.strerror or e})"
        for name in names:
            try:
                target = readlink(name, dir_fd=dfd)
            except FileNotFoundError:
                vanished += 1  # closed meanwhile (or the process exited: checked below)
                continue
            except PermissionError:
                return "access denied"
            except OSError:
                vanished += 1
                continue
            n += 1
            kind = classify_target(target)
            kinds[kind] += 1
            if kind != "file" and kind != "shm":
                continue
            is_deleted = target.endswith(DELETED_SUFFIX)
            name_path = target[: -len(DELETED_SUFFIX)] if is_deleted else target
            if kind == "file":
                for w in watched:
                    if is_under(name_path, w):
                        under[w] += 1
                if mount_of is not None:
                    parent = name_path[: name_path.rfind("/")] or "/"
                    mp = dir_mount.get(parent, _MISSING)
                    if mp is _MISSING:
                        mp = dir_mount[parent] = mount_of(name_path)
                    if mp is not None:
                        mounts[mp] = mounts.get(mp, 0) + 1  # type: ignore[index]
            if is_deleted or kind == "shm":
                try:
                    st = os.stat(name, dir_fd=dfd)  # follows the fd link to the (orphaned) inode
                except OSError:
                    continue
                if not _stat.S_ISREG(st.st_mode):
                    continue
                key = (st.st_dev, st.st_ino)
                alloc = st.st_blocks * 512
                if kind == "shm":
                    shm_inodes[key] = alloc
                elif st.st_nlink == 0 and key not in deleted:
                    deleted[key] = DeletedFile(
                        fd=int(name), path=name_path, bytes=alloc, size=st.st_size,
                        dev=st.st_dev, ino=st.st_ino,
                    )
    finally:
        os.close(dfd)
    if vanished:
        # an fd that vanished is usually one closed meanwhile; if the process itself went away,
        # what we counted is not a reading of a live process
        try:
            state, _p, _t, _r = _read_stat(pid, proc)
            if state in ("Z", "X", "x"):
                return "exited"
        except (_Gone, OSError, ValueError, IndexError):
            return "exited"
    r.fds = n
    r.fds_by_kind = kinds
    r.deleted = list(deleted.values())
    r.deleted_open_files = len(deleted)
    r.deleted_open_bytes = sum(d.bytes for d in deleted.values())
    r.shm_open_files = len(shm_inodes)
    r.shm_open_bytes = sum(shm_inodes.values())
    r.open_under_watched = under
    r.open_mounts = mounts
    return None


def _unreadable(r: ProcessReading, error: str, status: str | None, t0: float) -> ProcessReading:
    r.readable = False
    r.error = error
    r.status = status
    for name in ("fds", "fd_soft_limit", "fd_hard_limit", "fds_by_kind", "deleted_open_files",
                 "deleted_open_bytes", "deleted", "shm_open_files", "shm_open_bytes",
                 "open_under_watched", "open_mounts", "rss_bytes", "uid"):
        setattr(r, name, None)
    r.read_cost_s = time.perf_counter() - t0
    return r


def _read_with_psutil(r: ProcessReading, expect_create_time: float | None) -> None:  # pragma: no cover
    import psutil

    try:
        p = psutil.Process(r.pid)
        with p.oneshot():
            ct = p.create_time()
            if expect_create_time is not None and abs(ct - expect_create_time) > 1e-3:
                _unreadable(r, "pid reused", "exited", time.perf_counter())
                return
            r.create_time = ct
            r.status = p.status()
            if r.status == psutil.STATUS_ZOMBIE:
                _unreadable(r, "zombie", "zombie", time.perf_counter())
                return
            r.rss_bytes = p.memory_info().rss
            r.fds = p.num_fds()
            try:
                r.fd_soft_limit, r.fd_hard_limit = p.rlimit(psutil.RLIMIT_NOFILE)
            except (AttributeError, psutil.AccessDenied):
                if _resource is not None and r.pid == os.getpid():
                    r.fd_soft_limit, r.fd_hard_limit = _resource.getrlimit(_resource.RLIMIT_NOFILE)
            r.readable = r.fd_soft_limit is not None
    except psutil.NoSuchProcess:
        _unreadable(r, "exited", "exited", time.perf_counter())
    except psutil.AccessDenied:
        _unreadable(r, "access denied", None, time.perf_counter())
    except psutil.ZombieProcess:
        _unreadable(r, "zombie", "zombie", time.perf_counter())


__all__ = ["read_process", "fd_limits", "classify_target", "STATUS_NAMES"]
