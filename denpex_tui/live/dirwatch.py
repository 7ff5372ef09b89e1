"""Directory and glob sources: which files of a directory a source follows.

``expand_spec`` turns a user argument into a ``SourceSpec`` (a file, a directory, a glob
with ``**``); a ``DirWatch`` per directory of a ``dir`` or ``glob`` source lists it when
its mtime changes and reports the files to follow (``classify_name``: log-looking names,
rotated copies read as history only) and the subdirectories to watch.
"""

from __future__ import annotations

import fnmatch
import os
import re
import stat as stat_mod
import time
from dataclasses import dataclass
from typing import Any

from denpex_tui.core.lines.reader import link_outside, special_target

from . import sources as _s
from .sources import RETRY_S, PollResult, Scheduled, SourceEvent, kind_of

__all__ = ["DirWatch", "SourceSpec", "classify_name", "expand_spec"]

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


class DirWatch(Scheduled):
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
        st = self._stat(r)
        if st is None or (st.st_mtime_ns == self.mtime_ns and not self.force):
            return r
        first = self.state != "listed"
        if self.inotify is not None and self.wd is None:
            try:
                from ._fsinfo import DIR_MASK

                self.wd = self.inotify.add(self.path, DIR_MASK, self)
            except Exception:
                self.wd = None
        try:
            with _s.os_scandir(self.path) as it:
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
        for e in entries:
            if not e.name.startswith("."):
                self._entry(e, startup, r)
        # forget children that disappeared so a re-created one is found again
        if self.children:
            names = {e.name for e in entries}
            self.children &= names
        return r

    def _stat(self, r: PollResult) -> os.stat_result | None:
        """The directory's stat, or None when it is not (or no longer) one to list:
        missing, in error, or a file (then the tailer follows it instead)."""
        try:
            st = _s.os_stat(self.path)
            r.calls += 1
        except FileNotFoundError:
            r.calls += 1
            if self.is_root:
                if self.state == "new":
                    self._error(r, "not found; waiting for it to appear")
                self.state = "missing"
                self.mtime_ns = None
                self.force = True
                return None
            self.close()
            r.done = True
            return None
        except OSError as e:
            r.calls += 1
            self._error(r, f"stat: {e.strerror or e}")
            r.hint = RETRY_S
            return None
        if stat_mod.S_ISDIR(st.st_mode):
            return st
        if self.is_root and self.spec.kind == "path":
            # the argument turned out to be a file: the tailer follows it instead
            r.discovered.append((self.path, False, self.state == "new", True, ""))
            r.done = True
        elif self.is_root:
            self._error(r, f"{kind_of(st.st_mode)}: not followed")
            r.hint = RETRY_S
        else:
            r.done = True
        return None

    def _entry(self, e: os.DirEntry, startup: bool, r: PollResult) -> None:
        """One listed entry: a subdirectory to watch, or a file to follow (``live``) or to
        read as history only (``rotated``, at start-up)."""
        name = e.name
        try:
            is_dir = e.is_dir(follow_symlinks=False)
            is_file = not is_dir and e.is_file()
        except OSError:
            return
        rel = self.rel + (name,)
        if is_dir:
            if name in self.children or len(self.rel) + 1 > self.MAX_DEPTH:
                return
            mode = None
            if self.mode == "all" or _match_full(rel, self.spec.pats):
                mode = "all"
            elif _match_prefix(rel, self.spec.pats):
                mode = "glob"
            if mode is not None:
                self.children.add(name)
                r.new_dirs.append(DirWatch(e.path, self.spec, rel, mode, startup=startup, inotify=self.inotify))
            return
        if not (is_file or e.is_symlink()):
            return
        if self.mode == "all":
            c = classify_name(name)
        else:
            c = None
            if _match_full(rel, self.spec.pats):
                c = classify_name(name) or "live"
                if c == "rotated" and not _has_magic(self.spec.pats[-1]):
                    c = "live"
        if c is None:
            return
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
                return
            if not is_file:
                return  # a dangling link
            if self.root_real is None:
                self.root_real = os.path.realpath(self.spec.root)
            link = link_outside(e.path, self.root_real) or ""
        if c == "live":
            r.discovered.append((e.path, False, startup, False, link))
        elif c == "rotated" and startup:
            r.discovered.append((e.path, True, startup, False, link))
