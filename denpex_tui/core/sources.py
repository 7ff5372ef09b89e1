"""Finding log files and telling what each one is (reading them: :mod:`.lines.reader`).

Flight Recorder dumps and NCCL RAS reports found beside the logs (or named on the command line)
are told apart by their first bytes: their kind is ``fr-dump`` or ``ras``, and they are read
whole as evidence (:mod:`denpex_tui.core.frdump`, :mod:`denpex_tui.core.ras`), never as lines.

A *job* is everything given on one command line. Directories are searched for files that
look like logs; torchrun's ``--log-dir`` tree (``<run>/attempt_N/<local_rank>/stdout.log``)
tells the attempt and the local rank; a folder that holds a console log and a ``logs/`` tree
is one node.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from .frdump import looks_like_dump_name, sniff_dump
from .lines.reader import SourceError, link_outside, read_head, special_target
from .model import SourceInfo
from .ras import sniff_ras
from .units import log_int

__all__ = ["SourceError", "Discovery", "discover", "classify", "looks_like_log", "looks_like_evidence", "evidence_kind"]

MAX_FILES = 200_000

_LOG_SUFFIX = re.compile(r"\.(?:log|out|err|txt)(?:\.\d+)?(?:\.gz)?$", re.IGNORECASE)
_ROTATED = re.compile(r"\.(\d+)(?:\.gz)?$|\.gz$")
_ATTEMPT = re.compile(r"^attempt_(\d+)$")
_RANK_NAME = re.compile(r"(?:^|[_.-])rank[_-]?(\d+)(?:[_.-]|$)", re.IGNORECASE)
_RAS_NAME = re.compile(r"(?i)(?:^|[_.-])(?:nccl)?ras(?:[_.-]|$)")
_SNIFF_BYTES = 4096
_SLURM_TASK = re.compile(r"^(?:[\w.-]*?[_-])?\d+[_-](\d+)\.(?:out|err|log)$")


@dataclass
class Discovery:
    sources: list[SourceInfo]
    warnings: list[str]


def looks_like_log(name: str) -> bool:
    if name == "error.json":
        return True
    return bool(_LOG_SUFFIX.search(name))


def looks_like_evidence(name: str) -> bool:
    """A name a Flight Recorder dump or a RAS report may have in a log folder (the content
    decides: :func:`evidence_kind`). A dump is not a log and is never read as lines."""
    return (looks_like_dump_name(name) and not looks_like_log(name)) or bool(_RAS_NAME.search(name))


def evidence_kind(path: str) -> str | None:
    """``"fr-dump"`` (a Flight Recorder dump, JSON or pickle), ``"ras"`` (an NCCL RAS report), or
    None (a log, or unreadable: the log reader says why) from the file's first bytes."""
    head = read_head(path, _SNIFF_BYTES)
    if head is None:
        return None
    if sniff_dump(head):
        return "fr-dump"
    if sniff_ras(head):
        return "ras"
    return None


def _rotation_key(path: str) -> tuple:
    """Rotated copies are read oldest first: app.log.3.gz, app.log.2, app.log.1, app.log."""
    m = _ROTATED.search(os.path.basename(path))
    n = (log_int(m.group(1)) or 0) if m and m.group(1) else (1 if m else 0)
    base = _ROTATED.sub("", path) if m else path
    return (base, -n)


def classify(path: str, order: int = 0) -> SourceInfo:
    p = Path(path)
    parts = p.parts
    name = p.name
    info = SourceInfo(path=path, kind="rank-file", order=order)
    info.history_only = bool(_ROTATED.search(name)) and name not in ("stdout.log", "stderr.log")
    if name == "error.json":
        info.kind = "error-json"
    # torchrun --log-dir: .../<run_id>_<rand>/attempt_N/<local_rank>/{stdout,stderr}.log|error.json
    attempt_idx = None
    for i in range(len(parts) - 2, -1, -1):
        if _ATTEMPT.match(parts[i]):
            attempt_idx = i
            break
    # a number out of range (4 301 digits) is not an attempt or a local rank: log_int says None
    if attempt_idx is not None and attempt_idx + 2 == len(parts) - 1 and parts[attempt_idx + 1].isdigit():
        attempt, local_rank = log_int(parts[attempt_idx][len("attempt_"):]), log_int(parts[attempt_idx + 1])
        if attempt is not None and local_rank is not None:
            info.attempt, info.local_rank = attempt, local_rank
            run_dir = Path(*parts[:attempt_idx])  # <run_id>_<rand>
            logs_dir = run_dir.parent
            info.node_key = str(logs_dir.parent if logs_dir.name in ("logs", "log") else logs_dir)
            return info
    info.node_key = str(p.parent)
    m = _RANK_NAME.search(name)
    if m:
        info.file_rank = log_int(m.group(1))
    else:
        m = _SLURM_TASK.match(name)
        if m:
            info.file_rank = log_int(m.group(1))
    if info.kind != "error-json" and info.file_rank is None:
        info.kind = "console"
    return info


def discover(paths: list[str], *, max_files: int = MAX_FILES, progress: dict | None = None,
             evidence: bool = False) -> Discovery:
    """Expand files, directories and globs into classified sources. ``progress["n"]`` counts
    entries looked at (the scan's watchdog uses it to tell a big tree from a hung mount).
    With ``evidence``, Flight Recorder dumps and RAS reports are found too (kinds ``fr-dump``,
    ``ras``); without it they are left out, so a reader of lines never gets one."""
    progress = progress if progress is not None else {}
    progress.setdefault("n", 0)
    sizes: dict[str, int] = progress.setdefault("sizes", {})
    import glob

    warnings: list[str] = progress.setdefault("warnings", [])
    found: list[str] = progress.setdefault("found", [])  # visible to the watchdog as it grows
    seen: set[str] = set()
    explicit: set[str] = set()  # files named on the command line: their content says what they are

    def add(path: str) -> None:
        rp = os.path.realpath(path)
        if rp in seen:
            return
        seen.add(rp)
        found.append(path)

    for arg in paths:
        expanded = [arg]
        if any(c in arg for c in "*?[") and not os.path.exists(arg):
            expanded = sorted(glob.glob(arg, recursive=True))
            if not expanded:
                warnings.append(f"{arg}: no file matches")
                continue
        for path in expanded:
            try:
                st = os.stat(path)
            except FileNotFoundError:
                warnings.append(f"{path}: no such file or directory")
                continue
            except PermissionError:
                warnings.append(f"{path}: permission denied")
                continue
            except OSError as exc:
                warnings.append(f"{path}: cannot be read ({exc.strerror or exc})")
                continue
            progress["n"] += 1
            if stat.S_ISDIR(st.st_mode):
                for f, size in _walk(path, warnings, max_files - len(found), progress):
                    add(f)
                    sizes[f] = size
            elif stat.S_ISREG(st.st_mode):
                add(path)
                explicit.add(path)
                sizes[path] = st.st_size
            else:
                warnings.append(f"{path}: not a regular file or directory (FIFO, device or socket): skipped")
            if len(found) >= max_files:
                warnings.append(f"more than {max_files} log files: the rest were skipped")
                break
    found.sort(key=_rotation_key)
    sources = [classify(p, i) for i, p in enumerate(found)]
    drop = set()
    for src in sources:
        src.size = sizes.get(src.path, 0)
        name = os.path.basename(src.path)
        if src.path in explicit or looks_like_evidence(name):
            kind = evidence_kind(src.path)
            if kind == "ras" and looks_like_log(name):
                src.also_ras = True  # a log holding a report (a launcher that logs it): both
            elif kind:
                src.kind, src.history_only = kind, True
            elif src.path not in explicit and not looks_like_log(name):
                drop.add(src.path)  # found for its name only, and it is neither: not a log either
    if drop:
        sources = [s for s in sources if s.path not in drop]
    if not evidence:
        sources = [s for s in sources if s.kind not in ("fr-dump", "ras")]
        for i, s in enumerate(sources):
            s.order = i
    return Discovery(sources, warnings)


def _walk(root: str, warnings: list[str], budget: int, progress: dict) -> Iterator[tuple[str, int]]:
    """Log-looking regular files under ``root``; symlinks are not followed into directories
    (no loops), unreadable directories are a warning."""
    stack = [root]
    visited: set[tuple[int, int]] = set()
    n = 0
    root_real = os.path.realpath(root)
    while stack:
        d = stack.pop()
        progress["current"] = d
        try:
            st = os.stat(d)
            key = (st.st_dev, st.st_ino)
            if key in visited:
                continue
            visited.add(key)
            with os.scandir(d) as it:
                entries = sorted(it, key=lambda e: e.name)
        except PermissionError:
            warnings.append(f"{d}: permission denied")
            continue
        except OSError as exc:
            warnings.append(f"{d}: cannot be listed ({exc.strerror or exc})")
            continue
        subdirs = []
        for e in entries:
            progress["n"] += 1
            try:
                if e.is_dir(follow_symlinks=False):
                    subdirs.append(e.path)
                elif (looks_like_log(e.name) or looks_like_evidence(e.name)) and e.is_symlink():
                    why = special_target(e.path)
                    if why or not e.is_file(follow_symlinks=True):
                        if why or os.path.exists(e.path):
                            warnings.append(f"{e.path}: a link to {why or 'a FIFO, device or socket'}: skipped")
                        continue
                    out = link_outside(e.path, root_real)
                    if out:
                        warnings.append(f"{e.path}: followed a link outside the tree (to {out})")
                    n += 1
                    if n > budget:
                        return
                    yield e.path, e.stat(follow_symlinks=True).st_size
                elif (looks_like_log(e.name) or looks_like_evidence(e.name)) and e.is_file(follow_symlinks=True):
                    n += 1
                    if n > budget:
                        return
                    yield e.path, e.stat(follow_symlinks=True).st_size
            except OSError:
                continue
        stack.extend(reversed(subdirs))


