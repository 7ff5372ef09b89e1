"""Probe readings: what ``denpex probe`` measured, and its stable JSON face (schema 1).

``Snapshot.to_json()`` is the public wire format of ``denpex probe --json`` / ``--stream`` and of
what remote nodes will later send to the head node. Keep it stable: add fields, never rename or
change the meaning of one. Every reading we could not take is ``None`` (JSON ``null``), never 0.

Schema 1::

    {"schema": 1, "time": "2026-11-29T17:40:16.720+01:00", "host": "node3",
     "processes": [{"pid", "rank", "local_rank", "cmdline", "fds", "fd_soft_limit",
                    "fd_hard_limit", "deleted_open_files", "deleted_open_bytes", "rss_bytes",
                    "status", ... extra fields}],
     "paths": [{"path", "mount", "fstype", "bytes_total", "bytes_free", "bytes_reserved",
                "inodes_total", "inodes_free", "network_fs", ... extra fields}],
     ... extra top-level fields}
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from typing import Any

SCHEMA = 1

FD_KINDS = ("file", "socket", "pipe", "anon", "shm", "dev", "other")


def iso_time(ts: float) -> str:
    """ISO 8601 with the local UTC offset and milliseconds, e.g. 2026-11-29T17:40:16.720+01:00."""
    return _dt.datetime.fromtimestamp(ts).astimezone().isoformat(timespec="milliseconds")


def pct(part: float | int | None, whole: float | int | None) -> float | None:
    if part is None or whole is None or whole <= 0:
        return None
    return 100.0 * part / whole


@dataclass
class DeletedFile:
    """One deleted-but-open regular file held by a process (one entry per inode)."""

    fd: int
    path: str  # the name it had, without the " (deleted)" suffix
    bytes: int  # allocated: st_blocks * 512
    size: int  # st_size (apparent)
    dev: int | None = None  # None in a snapshot read back from JSON (not on the wire)
    ino: int | None = None

    def to_json(self) -> dict:
        return {"fd": self.fd, "path": self.path, "bytes": self.bytes, "size": self.size}


@dataclass
class ProcessReading:
    pid: int
    rank: int | None = None
    local_rank: int | None = None
    world_size: int | None = None
    cmdline: list[str] = field(default_factory=list)
    role: str = "worker"  # launcher | worker | helper | given (--pid)
    create_time: float | None = None
    readable: bool = False  # True only when every reading below was taken
    error: str | None = None  # "exited", "access denied", "zombie", "pid reused", ...
    status: str | None = None  # running, sleeping, disk-sleep, stopped, zombie, ... (or "exited")
    uid: int | None = None
    fds: int | None = None
    fd_soft_limit: int | None = None  # None also when the limit is "unlimited"
    fd_hard_limit: int | None = None
    fds_by_kind: dict[str, int] | None = None
    deleted_open_files: int | None = None
    deleted_open_bytes: int | None = None
    deleted: list[DeletedFile] | None = None  # the deleted-open files (all of them; JSON caps)
    shm_open_files: int | None = None  # memfd + /dev/shm segments (DataLoader workers: normal)
    shm_open_bytes: int | None = None
    open_under_watched: dict[str, int] | None = None  # watched path -> fds open under it
    open_mounts: dict[str, int] | None = None  # mount point -> regular files held open there
    rss_bytes: int | None = None
    read_cost_s: float | None = None
    node: str | None = None  # the job's node it was measured on (merged multi-node snapshots)
    cwd: str | None = None  # its working directory (a relative path in its logs is relative to it)

    @property
    def fd_used_pct(self) -> float | None:
        return pct(self.fds, self.fd_soft_limit)

    @property
    def key(self) -> tuple[int, float | None]:
        return (self.pid, self.create_time)

    def to_json(self, max_deleted: int = 20) -> dict:
        d: dict[str, Any] = {
            "pid": self.pid,
            "rank": self.rank,
            "local_rank": self.local_rank,
            "cmdline": list(self.cmdline),
            "fds": self.fds,
            "fd_soft_limit": self.fd_soft_limit,
            "fd_hard_limit": self.fd_hard_limit,
            "deleted_open_files": self.deleted_open_files,
            "deleted_open_bytes": self.deleted_open_bytes,
            "rss_bytes": self.rss_bytes,
            "status": self.status,
            # extra fields
            "readable": self.readable,
            "error": self.error,
            "role": self.role,
            "world_size": self.world_size,
            "create_time": self.create_time,
            "uid": self.uid,
            "fd_used_pct": _round(self.fd_used_pct),
            "fds_by_kind": dict(self.fds_by_kind) if self.fds_by_kind is not None else None,
            "shm_open_files": self.shm_open_files,
            "shm_open_bytes": self.shm_open_bytes,
            "open_under_watched": (
                dict(self.open_under_watched) if self.open_under_watched is not None else None
            ),
            "deleted": (
                [f.to_json() for f in sorted(self.deleted, key=lambda f: -f.bytes)[:max_deleted]]
                if self.deleted is not None
                else None
            ),
        }
        if self.node is not None:
            d["node"] = self.node
        if self.cwd is not None:
            d["cwd"] = self.cwd
        return d


@dataclass
class PathReading:
    path: str  # as watched (absolute)
    why: list[str] = field(default_factory=list)  # "--path", "checkpoint save path (log)", ...
    exists: bool | None = None
    measured_path: str | None = None  # realpath actually measured (nearest existing ancestor)
    mount: str | None = None
    mount_root: str | None = None  # root of the mount within its filesystem ("/" unless bind)
    fstype: str | None = None
    source: str | None = None  # device / server:export
    fs_class: str | None = None  # local | memory | network | parallel | fuse | pseudo
    network_fs: bool | None = None
    readonly: bool | None = None
    bytes_total: int | None = None
    bytes_free: int | None = None  # f_bavail: what an unprivileged writer can still use
    bytes_reserved: int | None = None  # f_bfree - f_bavail (ext4 root-reserved blocks)
    bytes_used: int | None = None  # f_blocks - f_bfree (what df calls Used)
    inodes_total: int | None = None  # None when the filesystem does not report inodes
    inodes_free: int | None = None  # f_favail
    error: str | None = None  # "timed out", "permission denied", ...
    is_shm: bool = False
    open_fds: int | None = None  # fds of the watched processes open under this path
    deleted_open_bytes: int | None = None  # held on this filesystem by watched processes (by inode)
    read_cost_s: float | None = None
    node: str | None = None  # the job's node it was measured on (merged multi-node snapshots)

    @property
    def bytes_free_pct(self) -> float | None:
        """As df computes it: available / (used + available); root-reserved blocks are
        neither (see bytes_reserved_pct)."""
        if self.bytes_used is not None and self.bytes_free is not None and self.bytes_used + self.bytes_free > 0:
            return pct(self.bytes_free, self.bytes_used + self.bytes_free)
        return pct(self.bytes_free, self.bytes_total)

    @property
    def bytes_reserved_pct(self) -> float | None:
        return pct(self.bytes_reserved, self.bytes_total)

    @property
    def inodes_free_pct(self) -> float | None:
        return pct(self.inodes_free, self.inodes_total)

    def to_json(self) -> dict:
        d = {
            "path": self.path,
            "mount": self.mount,
            "fstype": self.fstype,
            "bytes_total": self.bytes_total,
            "bytes_free": self.bytes_free,
            "bytes_reserved": self.bytes_reserved,
            "inodes_total": self.inodes_total,
            "inodes_free": self.inodes_free,
            "network_fs": self.network_fs,
            # extra fields
            "why": list(self.why),
            "exists": self.exists,
            "measured_path": self.measured_path,
            "source": self.source,
            "fs_class": self.fs_class,
            "readonly": self.readonly,
            "bytes_used": self.bytes_used,
            "bytes_free_pct": _round(self.bytes_free_pct),
            "bytes_reserved_pct": _round(self.bytes_reserved_pct),
            "inodes_free_pct": _round(self.inodes_free_pct),
            "shm": self.is_shm,
            "open_fds": self.open_fds,
            "deleted_open_bytes": self.deleted_open_bytes,
            "error": self.error,
        }
        if self.node is not None:
            d["node"] = self.node
        return d


@dataclass
class Snapshot:
    time: float
    host: str
    processes: list[ProcessReading] = field(default_factory=list)
    paths: list[PathReading] = field(default_factory=list)
    discovered: bool = True  # processes were found by discovery (not only --pid)
    system_files_open: int | None = None  # /proc/sys/fs/file-nr (ENFILE is system-wide)
    system_files_max: int | None = None
    cost_s: float | None = None

    @property
    def shm(self) -> PathReading | None:
        for p in self.paths:
            if p.is_shm:
                return p
        return None

    def path_reading(self, path: str) -> PathReading | None:
        for p in self.paths:
            if p.path == path or p.measured_path == path:
                return p
        return None

    def to_json(self) -> dict:
        d: dict[str, Any] = {
            "schema": SCHEMA,
            "time": iso_time(self.time),
            "host": self.host,
            "processes": [p.to_json() for p in self.processes],
            "paths": [p.to_json() for p in self.paths],
            # extra fields
            "unix_time": round(self.time, 3),
            "local_training_processes": len(
                [p for p in self.processes if p.role != "launcher"]
            ),
            "system": {
                "files_open": self.system_files_open,
                "files_max": self.system_files_max,
            },
            "cost_ms": round(self.cost_s * 1000, 3) if self.cost_s is not None else None,
        }
        if not self.processes and self.discovered:
            d["note"] = "no local training processes"
        return d


def _round(v: float | None, nd: int = 3) -> float | None:
    return None if v is None else round(v, nd)


__all__ = [
    "SCHEMA",
    "FD_KINDS",
    "DeletedFile",
    "ProcessReading",
    "PathReading",
    "Snapshot",
    "iso_time",
    "pct",
]
