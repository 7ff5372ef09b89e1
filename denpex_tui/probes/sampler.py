"""The Prober: measure the watched processes and paths, one ``Snapshot`` at a time.

Per path: ``os.statvfs`` (bytes and inodes as an unprivileged writer sees them), the mount point
and filesystem type from /proc/self/mountinfo (string lookup), and ``st_dev`` to attribute
deleted-but-open files to the filesystem that holds them. A path on a network, parallel or FUSE
filesystem is measured in a daemon worker thread with a timeout: a hung mount gives
``error: "did not answer in 2 s"`` for that path, the caller goes on, and while that call is still stuck no
second thread is started for the same path.

Read-only: nothing here writes, creates or opens for writing anything under a watched path.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

from denpex_tui.core.bounded import BOUNDED, Bounded, NoAnswer

from . import processes as _processes
from .facade import read_process
from .mounts import Mount, MountTable, is_network_class
from .readings import PathReading, ProcessReading, Snapshot

SHM = "/dev/shm"
DEFAULT_TIMEOUT = 2.0
CANON_TTL = 30.0  # seconds a resolved (realpath, nearest existing ancestor) is reused
MAX_AUTO_PATHS = 8


class HungPathError(NoAnswer):
    pass


class _HangGuard:
    """The shared bounded worker (core/bounded.py) as the path meter uses it: a call that does
    not answer in ``timeout`` raises :class:`HungPathError` ("did not answer in N s"), at most
    one stuck thread per key."""

    def __init__(self, bounded: Bounded | None = None) -> None:
        self._b = bounded if bounded is not None else Bounded()

    def call(self, key: str, fn: Callable[[], object], timeout: float):
        try:
            return self._b.call(key, fn, timeout, what=key.split(":", 1)[-1])
        except NoAnswer as exc:
            raise HungPathError(exc.what, exc.timeout) from None

    def stuck(self) -> list[str]:
        return self._b.stuck()


_GUARD = _HangGuard(BOUNDED)


def _nearest_existing(path: str) -> tuple[str, bool]:
    """(realpath of path or of its nearest existing ancestor, whether path itself exists)."""
    rp = os.path.realpath(path)
    q = rp
    while True:
        try:
            os.stat(q)
            return q, q == rp
        except (FileNotFoundError, NotADirectoryError):
            parent = os.path.dirname(q)
            if parent == q:
                raise
            q = parent


def _statvfs_and_dev(path: str) -> tuple[os.statvfs_result, int]:
    return os.statvfs(path), os.stat(path).st_dev


@dataclass
class _Canon:
    measured: str
    exists: bool
    at: float


@dataclass
class WatchedPath:
    path: str  # absolute, as given
    why: list[str] = field(default_factory=list)
    source_lines: list[str] = field(default_factory=list)
    is_shm: bool = False
    auto: bool = False  # added because a watched process holds files there


class PathMeter:
    """Measures paths; keeps the resolved form of each for a while (cheap repeated readings)."""

    def __init__(
        self,
        mounts: MountTable | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        guard: _HangGuard | None = None,
    ):
        self.mounts = mounts if mounts is not None else MountTable()
        self.timeout = timeout
        self.guard = guard or _GUARD
        self._canon: dict[str, _Canon] = {}

    def _risky(self, path: str) -> bool:
        m = self.mounts.find(path)
        return m is None or m.network

    def read(self, path: str, why: Iterable[str] = (), is_shm: bool = False,
             now: float | None = None) -> tuple[PathReading, int | None]:
        """(reading, st_dev of the measured path or None)."""
        t0 = time.perf_counter()
        now = time.time() if now is None else now
        ap = os.path.abspath(path)
        r = PathReading(path=ap, why=list(why), is_shm=is_shm)
        dev: int | None = None
        canon = self._canon.get(ap)
        try:
            if canon is None or now - canon.at > CANON_TTL or not canon.exists:
                # realpath walks every component: a symlink on a local fs may lead onto a
                # network mount, so resolve in the guarded thread whenever one is mounted
                has_net = any(m.network for m in self.mounts.mounts)
                if has_net or self._risky(ap):
                    measured, exists = self.guard.call(
                        "canon:" + ap, lambda: _nearest_existing(ap), self.timeout
                    )
                else:
                    measured, exists = _nearest_existing(ap)
                canon = _Canon(measured, exists, now)
                self._canon[ap] = canon
            m = self.mounts.find(canon.measured)
            if m is None or m.network:
                st, dev = self.guard.call(
                    "statvfs:" + canon.measured,
                    lambda: _statvfs_and_dev(canon.measured),
                    self.timeout,
                )
            else:
                try:
                    st, dev = _statvfs_and_dev(canon.measured)
                except (FileNotFoundError, NotADirectoryError):
                    # removed since we resolved it: resolve again, once
                    measured, exists = _nearest_existing(ap)
                    canon = _Canon(measured, exists, now)
                    self._canon[ap] = canon
                    m = self.mounts.find(measured)
                    st, dev = _statvfs_and_dev(measured)
        except HungPathError:
            m = self.mounts.find(ap)
            _fill_mount(r, m)
            r.error = f"did not answer in {self.timeout:g} s"
            r.read_cost_s = time.perf_counter() - t0
            return r, None
        except PermissionError:
            _fill_mount(r, self.mounts.find(ap))
            r.error = "permission denied"
            r.read_cost_s = time.perf_counter() - t0
            return r, None
        except OSError as e:
            _fill_mount(r, self.mounts.find(ap))
            r.error = (e.strerror or str(e)).lower()
            r.read_cost_s = time.perf_counter() - t0
            return r, None
        r.exists = canon.exists
        r.measured_path = canon.measured
        _fill_mount(r, m)
        _fill_statvfs(r, st)
        r.read_cost_s = time.perf_counter() - t0
        return r, dev


def _fill_mount(r: PathReading, m: Mount | None) -> None:
    if m is None:
        return
    r.mount = m.mount_point
    r.mount_root = m.root
    r.fstype = m.fstype
    r.source = m.source
    r.fs_class = m.fs_class
    r.network_fs = is_network_class(m.fs_class)
    r.readonly = m.readonly


def _fill_statvfs(r: PathReading, st: os.statvfs_result) -> None:
    frsize = st.f_frsize or st.f_bsize
    r.bytes_total = st.f_blocks * frsize
    r.bytes_free = st.f_bavail * frsize
    r.bytes_reserved = max(0, st.f_bfree - st.f_bavail) * frsize
    r.bytes_used = max(0, st.f_blocks - st.f_bfree) * frsize
    if st.f_files > 0:
        r.inodes_total = st.f_files
        r.inodes_free = st.f_favail
    else:  # btrfs and some network filesystems report no inode limit
        r.inodes_total = None
        r.inodes_free = None
    if st.f_flag & getattr(os, "ST_RDONLY", 1):
        r.readonly = True


def read_path(path: str, *, timeout: float = DEFAULT_TIMEOUT,
              mounts: MountTable | None = None) -> PathReading:
    """One-off reading of a path (used by the differential when the snapshot lacks it)."""
    return PathMeter(mounts=mounts, timeout=timeout).read(path)[0]


def _system_files() -> tuple[int | None, int | None]:
    try:
        with open("/proc/sys/fs/file-nr", "rb") as f:
            a, _unused, mx = f.read().split()[:3]
        return int(a), int(mx)
    except (OSError, ValueError):
        return None, None


class Prober:
    """Holds the watched pids and paths; ``snapshot()`` measures them all.

    ``pids``: measure exactly these (``--pid``); otherwise training processes are discovered with
    ``find_training_processes()`` (again every ``discover_every`` seconds, and at once when a
    watched one is gone). ``paths``: directories to watch; /dev/shm is always added (when it
    exists), and so are the filesystems the watched processes hold regular files on.
    """

    def __init__(
        self,
        pids: Iterable[int] | None = None,
        paths: Iterable[str] = (),
        *,
        discover: bool | None = None,
        watch_shm: bool = True,
        watch_open_files: bool = True,
        timeout: float = DEFAULT_TIMEOUT,
        discover_every: float = 5.0,
        exited_linger: float = 30.0,
        include_launchers: bool = True,
        finder: Callable[[], list[_processes.TrainingProcess]] | None = None,
    ):
        self.given_pids = list(dict.fromkeys(pids)) if pids else []
        self.discover = (not self.given_pids) if discover is None else discover
        self.watch_open_files = watch_open_files
        self.include_launchers = include_launchers
        self.discover_every = discover_every
        self.exited_linger = exited_linger
        self.finder = finder or _processes.find_training_processes
        self.mounts = MountTable()
        self.meter = PathMeter(self.mounts, timeout=timeout)
        self.host = socket.gethostname()
        self._paths: dict[str, WatchedPath] = {}
        self._auto: dict[str, WatchedPath] = {}
        # (pid) -> identity reading template, create_time
        self._procs: dict[int, ProcessReading] = {}
        self._exited_at: dict[int, float] = {}
        self._last_discovery = 0.0
        self._need_discovery = False
        self.last_discovery_cost_s: float | None = None
        self.last_discovery_error: str | None = None
        for p in paths:
            self.add_path(p, "--path")
        if watch_shm and os.path.isdir(SHM):
            wp = self.add_path(SHM, "/dev/shm")
            wp.is_shm = True
        for pid in self.given_pids:
            self._procs[pid] = self._identity_for_pid(pid)

    # -- watched set ------------------------------------------------------------------------

    def add_path(self, path: str, why: str, source_line: str | None = None) -> WatchedPath:
        ap = os.path.abspath(path)
        wp = self._paths.get(ap)
        if wp is None:
            wp = self._paths[ap] = WatchedPath(ap)
            self._auto.pop(ap, None)
        if why and why not in wp.why:
            wp.why.append(why)
        if source_line and source_line not in wp.source_lines and len(wp.source_lines) < 3:
            wp.source_lines.append(source_line)
        return wp

    @property
    def paths(self) -> list[WatchedPath]:
        return list(self._paths.values()) + list(self._auto.values())

    def _identity_for_pid(self, pid: int) -> ProcessReading:
        r = ProcessReading(pid=pid, role="given", cwd=_cwd(pid))
        cl = _processes.read_cmdline(pid)
        if cl is not None:
            r.cmdline = cl
            env = _processes.read_environ(pid) or {}
            r.rank = _processes._int_or_none(env.get("RANK"))
            r.local_rank = _processes._int_or_none(env.get("LOCAL_RANK"))
            if r.local_rank is None:
                r.local_rank = _processes.local_rank_from_argv(cl)
            r.world_size = _processes._int_or_none(env.get("WORLD_SIZE"))
            st = _processes.read_stat(pid)
            if st is not None:
                r.create_time = _processes.create_time_from_ticks(st[1])
        return r

    def _discover(self, now: float) -> None:
        t0 = time.perf_counter()
        try:
            found = self.finder()
        except Exception as e:  # noqa: BLE001 - keep the last known set rather than crash
            self.last_discovery_error = f"{type(e).__name__}: {e}"
            self._last_discovery = now
            return
        self.last_discovery_error = None
        self.last_discovery_cost_s = time.perf_counter() - t0
        self._last_discovery = now
        seen = set()
        for tp in found:
            if tp.role == "launcher" and not self.include_launchers:
                continue
            seen.add(tp.pid)
            old = self._procs.get(tp.pid)
            if old is not None and old.create_time == tp.create_time:
                continue
            self._procs[tp.pid] = ProcessReading(
                pid=tp.pid, rank=tp.rank, local_rank=tp.local_rank, world_size=tp.world_size,
                cmdline=list(tp.cmdline), role=tp.role, create_time=tp.create_time, cwd=_cwd(tp.pid),
            )
            self._exited_at.pop(tp.pid, None)
        for pid in list(self._procs):
            if pid not in seen and pid not in self._exited_at:
                self._exited_at[pid] = now

    # -- measuring ----------------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        t0 = time.perf_counter()
        now = time.time()
        self.mounts.refresh()
        if self.discover and (
            now - self._last_discovery >= self.discover_every or self._need_discovery
        ):
            self._need_discovery = False
            self._discover(now)

        # paths first: processes count their fds under the canonical forms
        path_readings: list[tuple[WatchedPath, PathReading, int | None]] = []
        for wp in list(self._paths.values()):
            pr, dev = self.meter.read(wp.path, wp.why, wp.is_shm, now)
            path_readings.append((wp, pr, dev))
        watched = []
        for wp, pr, _dev in path_readings:
            if pr.measured_path and pr.exists and not wp.is_shm:
                watched.append(pr.measured_path)
        watched = list(dict.fromkeys(watched))
        procs = self._read_processes(now, watched)
        if self.watch_open_files:  # filesystems the processes hold files on
            self._add_open_mounts(procs)
            for wp in list(self._auto.values()):
                pr, dev = self.meter.read(wp.path, wp.why, False, now)
                path_readings.append((wp, pr, dev))
        _held_on_paths(path_readings, procs, watched)
        fo, fm = _system_files()
        snap = Snapshot(
            time=now,
            host=self.host,
            processes=_order(procs),
            paths=[pr for _wp, pr, _d in path_readings],
            discovered=self.discover,
            system_files_open=fo,
            system_files_max=fm,
        )
        snap.cost_s = time.perf_counter() - t0
        return snap

    def _read_processes(self, now: float, watched: list[str]) -> list[ProcessReading]:
        """A reading of every known process; one that exited (or whose pid was reused) is kept,
        as gone, for ``exited_linger`` seconds and asks for a new discovery."""
        procs: list[ProcessReading] = []
        for pid, ident in list(self._procs.items()):
            gone_at = self._exited_at.get(pid)
            if gone_at is not None and now - gone_at > self.exited_linger:
                del self._procs[pid]
                del self._exited_at[pid]
                continue
            if gone_at is not None and ident.error in ("exited", "pid reused"):
                procs.append(ident)  # already known gone: do not read a reused pid again
                continue
            r = read_process(
                pid,
                expect_create_time=ident.create_time,
                watched=watched,
                mount_of=self._mount_point_of,
                base=ProcessReading(
                    pid=pid, rank=ident.rank, local_rank=ident.local_rank,
                    world_size=ident.world_size, cmdline=ident.cmdline, role=ident.role,
                    create_time=ident.create_time, cwd=ident.cwd,
                ),
            )
            if r.error in ("exited", "pid reused"):
                r.create_time = ident.create_time
                self._procs[pid] = r
                self._exited_at.setdefault(pid, now)
                self._need_discovery = True
            elif ident.create_time is None and r.create_time is not None:
                ident.create_time = r.create_time
            procs.append(r)
        return procs

    def _add_open_mounts(self, procs: list[ProcessReading]) -> None:
        """Watch (as ``auto`` paths) the writable filesystems the processes hold files on,
        each labelled with the ranks that do."""
        for r in procs:
            for mp in (r.open_mounts or {}):
                if mp in self._paths or mp in self._auto:
                    continue
                m = self.mounts.find(mp)
                if m is None or m.fs_class in ("pseudo",) or m.readonly:
                    continue
                if len(self._auto) >= MAX_AUTO_PATHS:
                    break
                self._auto[mp] = WatchedPath(mp, auto=True)
            for mp in (r.open_mounts or {}):
                wp = self._auto.get(mp)
                if wp is not None:
                    label = (f"files open by rank {r.rank} (pid {r.pid})" if r.rank is not None
                             else f"files open by pid {r.pid}")
                    if label not in wp.why and len(wp.why) < 4:
                        wp.why.append(label)

    def _mount_point_of(self, path: str) -> str | None:
        m = self.mounts.find(path)
        return m.mount_point if m is not None else None


def _order(procs: list[ProcessReading]) -> list[ProcessReading]:
    order = {"launcher": 0, "worker": 1, "given": 1, "helper": 2}
    big = 1 << 30
    return sorted(
        procs,
        key=lambda p: (order.get(p.role, 3), p.rank if p.rank is not None else big,
                       p.local_rank if p.local_rank is not None else big, p.pid),
    )


__all__ = ["Prober", "PathMeter", "WatchedPath", "read_path", "HungPathError", "SHM"]


def _held_on_paths(path_readings: list, procs: list[ProcessReading], watched: list[str]) -> None:
    """Per path: the fds of watched processes open there, and the deleted-open bytes on its
    filesystem (each inode once)."""
    readable = [r for r in procs if r.readable or r.fds is not None]
    if not readable:
        return
    for wp, pr, dev in path_readings:
        if wp.auto or (pr.mount and pr.measured_path == pr.mount):
            pr.open_fds = sum((r.open_mounts or {}).get(pr.mount, 0) for r in readable)
        elif pr.measured_path in watched:
            pr.open_fds = sum((r.open_under_watched or {}).get(pr.measured_path, 0)
                              for r in readable)
        if dev is not None:
            seen: dict[tuple[int, int], int] = {}
            for r in readable:
                for d in r.deleted or ():
                    if d.dev == dev:
                        seen[(d.dev, d.ino)] = d.bytes
            pr.deleted_open_bytes = sum(seen.values())


def _cwd(pid: int) -> str | None:
    """A process's working directory (read once, when it is found), None when it cannot be read."""
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return None
