"""The mount table (/proc/self/mountinfo), and which filesystems are network or parallel ones.

Lookups are by string (longest mount-point prefix, component-wise, last mount wins when several
are stacked on one point), so finding the mount of a path costs no syscall and cannot hang on a
dead NFS server.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

MOUNTINFO = "/proc/self/mountinfo"

# fstype -> class. Anything "fuse.*" is "fuse" unless listed as local below.
_NETWORK = {
    "nfs", "nfs4", "nfsd", "cifs", "smb3", "smbfs", "9p", "afs", "ncpfs", "ncp", "coda",
    "davfs", "sshfs", "virtiofs",
}
_PARALLEL = {
    "lustre", "gpfs", "beegfs", "ceph", "glusterfs", "orangefs", "pvfs2", "panfs", "wekafs",
    "quobyte", "ocfs2", "gfs2", "cvfs", "lizardfs", "moosefs", "daos",
}
_MEMORY = {"tmpfs", "ramfs", "hugetlbfs", "devtmpfs"}
_PSEUDO = {
    "proc", "sysfs", "cgroup", "cgroup2", "devpts", "mqueue", "debugfs", "tracefs",
    "securityfs", "pstore", "bpf", "configfs", "fusectl", "binfmt_misc", "autofs", "nsfs",
    "efivarfs", "rpc_pipefs", "selinuxfs", "hugetlbfs_", "sockfs", "pipefs", "anon_inodefs",
}
_LOCAL_FUSE = {"fuse-overlayfs", "fuse.fuse-overlayfs", "fuseblk", "fuse.lxcfs", "fuse.portal"}

FS_CLASS_TEXT = {
    "network": "network filesystem",
    "parallel": "parallel filesystem",
    "fuse": "FUSE filesystem (may be network-backed)",
    "memory": "memory filesystem",
    "local": "local filesystem",
    "pseudo": "pseudo filesystem",
}


def fs_class(fstype: str | None) -> str | None:
    if not fstype:
        return None
    t = fstype.lower()
    if t in _LOCAL_FUSE:
        return "local"
    base = t.split(".", 1)[0]
    if t in _PARALLEL or base in _PARALLEL:
        return "parallel"
    if t in _NETWORK:
        return "network"
    if base in ("fuse", "fuse3"):
        sub = t.split(".", 1)[1] if "." in t else ""
        if sub in _PARALLEL or sub in ("ceph-fuse", "glusterfs", "lustre", "juicefs", "weka"):
            return "parallel"
        return "fuse"
    if t in _MEMORY:
        return "memory"
    if t in _PSEUDO:
        return "pseudo"
    return "local"


def is_network_class(cls: str | None) -> bool:
    return cls in ("network", "parallel", "fuse")


@dataclass(frozen=True)
class Mount:
    mount_point: str
    root: str  # the subtree of the filesystem mounted here ("/" unless a bind mount)
    fstype: str
    source: str
    options: frozenset
    dev: str  # "major:minor"

    @property
    def fs_class(self) -> str | None:
        return fs_class(self.fstype)

    @property
    def network(self) -> bool:
        return is_network_class(self.fs_class)

    @property
    def readonly(self) -> bool:
        return "ro" in self.options


def _unescape(s: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as \ooo
    if "\\" not in s:
        return s
    out = []
    i = 0
    while i < len(s):
        if s[i] == "\\" and i + 3 < len(s) and s[i + 1 : i + 4].isdigit():
            out.append(chr(int(s[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(s[i])
            i += 1
    return "".join(out)


def parse_mountinfo(text: str) -> list[Mount]:
    mounts = []
    for line in text.splitlines():
        parts = line.split(" ")
        try:
            sep = parts.index("-", 6)
        except ValueError:
            continue
        if len(parts) < sep + 3:
            continue
        opts = set(parts[5].split(","))
        opts.update(parts[sep + 3].split(",") if len(parts) > sep + 3 else ())
        mounts.append(
            Mount(
                mount_point=_unescape(parts[4]),
                root=_unescape(parts[3]),
                fstype=parts[sep + 1],
                source=_unescape(parts[sep + 2]),
                options=frozenset(opts),
                dev=parts[2],
            )
        )
    return mounts


class MountTable:
    """Parsed mount table; ``refresh()`` re-reads it (one small read)."""

    def __init__(self, path: str = MOUNTINFO, text: str | None = None):
        self.path = path
        self.mounts: list[Mount] = []
        self._by_point: dict[str, Mount] = {}
        if text is not None:
            self._load(text)
        else:
            self.refresh()

    def refresh(self) -> None:
        try:
            with open(self.path, "r", encoding="utf-8", errors="surrogateescape") as f:
                text = f.read()
        except OSError:
            text = ""
        self._load(text)

    def _load(self, text: str) -> None:
        self.mounts = parse_mountinfo(text)
        by_point: dict[str, Mount] = {}
        for m in self.mounts:  # later entries are mounted over earlier ones
            by_point[m.mount_point] = m
        self._by_point = by_point

    def lookup(self, path: str) -> tuple[str, str]:
        """``(mount_point, fstype)`` of the mount holding ``path``; ``("/", "unknown")`` when
        the table is empty (the live tailer groups work per mount with this)."""
        m = self.find(path)
        return (m.mount_point, m.fstype) if m is not None else ("/", "unknown")

    @staticmethod
    def is_network(fstype: str) -> bool:
        """Can another node write there (so inotify cannot see those writes)?"""
        return is_network_class(fs_class(fstype))

    def find(self, path: str) -> Mount | None:
        """The mount holding absolute ``path`` (string lookup, no syscall)."""
        p = path or "/"
        if not p.startswith("/") or "//" in p or "/." in p or (len(p) > 1 and p.endswith("/")):
            p = os.path.abspath(p)  # normalizes too
        by = self._by_point
        while True:
            m = by.get(p)
            if m is not None:
                return m
            if p == "/":
                return None
            i = p.rfind("/")
            p = p[:i] if i > 0 else "/"


def is_under(path: str, root: str) -> bool:
    """Component-wise prefix test on normalized absolute paths."""
    if root == "/":
        return path.startswith("/")
    return path == root or path.startswith(root + "/")


__all__ = ["Mount", "MountTable", "fs_class", "is_network_class", "is_under", "parse_mountinfo",
           "FS_CLASS_TEXT"]
