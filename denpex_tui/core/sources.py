"""Finding log files, telling what each one is, and reading them in whole-line chunks.

Flight Recorder dumps and NCCL RAS reports found beside the logs (or named on the command line)
are told apart by their first bytes: their kind is ``fr-dump`` or ``ras``, and they are read
whole as evidence (:mod:`denpex_tui.core.frdump`, :mod:`denpex_tui.core.ras`), never as lines.

A *job* is everything given on one command line. Directories are searched for files that
look like logs; torchrun's ``--log-dir`` tree (``<run>/attempt_N/<local_rank>/stdout.log``)
tells the attempt and the local rank; a folder that holds a console log and a ``logs/`` tree
is one node. Reading never holds a whole file: chunks of at most ``CHUNK`` bytes, always cut
after a newline, and a line without a newline is cut at ``MAX_LINE`` bytes.
"""

from __future__ import annotations

import codecs
import errno
import gzip
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from .frdump import looks_like_dump_name, sniff_dump
from .model import SourceInfo
from .ras import sniff_ras
from .units import log_int

__all__ = [
    "CHUNK",
    "MAX_LINE",
    "SourceError",
    "discover",
    "classify",
    "read_chunks",
    "looks_like_log",
    "looks_like_evidence",
    "evidence_kind",
]

CHUNK = 8 << 20
MAX_LINE = 1 << 20  # a longer line is cut: its first MAX_LINE bytes are kept as one line
MAX_FILES = 200_000

_LOG_SUFFIX = re.compile(r"\.(?:log|out|err|txt)(?:\.\d+)?(?:\.gz)?$", re.IGNORECASE)
_ROTATED = re.compile(r"\.(\d+)(?:\.gz)?$|\.gz$")
_ATTEMPT = re.compile(r"^attempt_(\d+)$")
_RANK_NAME = re.compile(r"(?:^|[_.-])rank[_-]?(\d+)(?:[_.-]|$)", re.IGNORECASE)
_RAS_NAME = re.compile(r"(?i)(?:^|[_.-])(?:nccl)?ras(?:[_.-]|$)")
_SNIFF_BYTES = 4096
_SLURM_TASK = re.compile(r"^(?:[\w.-]*?[_-])?\d+[_-](\d+)\.(?:out|err|log)$")


class SourceError(Exception):
    """A source that cannot be read; the message is one line for the user."""


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
    try:
        fh, _ = _open(path)
    except (SourceError, OSError):
        return None
    with fh:
        try:
            head = fh.read(_SNIFF_BYTES)
        except OSError:
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


def _sniff(head: bytes) -> str:
    """'utf-16-le', 'utf-16-be', 'binary' or 'text'."""
    # A BOM alone is not proof (a log can start with any bytes): the text after it must
    # look like UTF-16 too (mostly NUL high bytes for the ASCII that logs are made of).
    if head.startswith(b"\xff\xfe") and _mostly_nul(head[3:4096:2]):
        return "utf-16-le"
    if head.startswith(b"\xfe\xff") and _mostly_nul(head[2:4096:2]):
        return "utf-16-be"
    if head.startswith(b"\x1f\x8b"):
        return "gzip"
    if not head:
        return "text"
    sample = head[:4096]
    # UTF-16 without BOM: every other byte NUL on ASCII text.
    if len(sample) >= 64 and sample[1::2].count(0) > len(sample) // 2 * 0.9:
        return "utf-16-le"
    if len(sample) >= 64 and sample[0::2].count(0) > len(sample) // 2 * 0.9:
        return "utf-16-be"
    # Text logs hold TAB/LF/CR/FF and ESC (colour); other C0 bytes and DEL are rare. Random or
    # compressed data has about 10 % of them, so 3 % is a clear line between the two.
    nul = sample.count(0)
    ctrl = len(sample.translate(None, _TEXT_BYTES))
    if nul > len(sample) // 100 + 4 or ctrl > len(sample) * 3 // 100 + 8:
        return "binary"
    return "text"


_TEXT_BYTES = bytes(b for b in range(256) if not (b < 32 and b not in (9, 10, 11, 12, 13, 27)) and b != 127)


def _mostly_nul(sample: bytes) -> bool:
    return bool(sample) and sample.count(0) >= len(sample) * 0.6


_PSEUDO_FS = ("/proc/", "/sys/")


def special_target(path: str) -> str | None:
    """Why ``path`` (or what a link there points to) must not be read as a log: a file of
    /proc or /sys (``/proc/kmsg`` says it is a regular file; reading it blocks and consumes
    the kernel log), or None. FIFOs and devices are refused by their type."""
    real = os.path.realpath(path)
    if real.startswith(_PSEUDO_FS):
        return f"a file of /{real.split('/')[1]}: {real}"
    return None


def link_outside(path: str, root_real: str) -> str | None:
    """The target of ``path`` when it is a symbolic link leading out of ``root_real``."""
    if not os.path.islink(path):
        return None
    real = os.path.realpath(path)
    if real == root_real or real.startswith(root_real.rstrip("/") + "/"):
        return None
    return real


def sniff(head: bytes) -> str:
    """'text', 'binary', 'gzip', 'utf-16-le' or 'utf-16-be' from a file's first bytes
    (trailing NULs, the start of a hole or of unwritten pages, are not evidence)."""
    return _sniff(head.rstrip(b"\0"))


def _open(path: str):
    """Open a source for binary reading; refuses FIFOs and devices (a FIFO would block),
    and files of /proc, /sys and /dev behind links."""
    why = special_target(path)
    if why:
        raise SourceError(f"{path}: not a regular file ({why}): skipped")
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise SourceError(f"{path}: not a regular file: skipped")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb", buffering=0), st
    except BaseException:
        try:
            os.close(fd)
        except OSError:
            pass
        raise


def _next_data(fd: int, pos: int, size: int) -> int:
    """Where data starts at or after ``pos`` (SEEK_DATA): ``size`` when only a hole is
    left, ``pos`` when the filesystem cannot tell (it then reports everything as data)."""
    try:
        return os.lseek(fd, pos, os.SEEK_DATA)
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # nothing but a hole up to the end
            return max(pos, size)
        return pos
    except AttributeError:  # no SEEK_DATA on this platform
        return pos
    finally:
        os.lseek(fd, pos, os.SEEK_SET)  # SEEK_DATA moves the file position


def _next_hole(fd: int, pos: int, size: int) -> int:
    try:
        return os.lseek(fd, pos, os.SEEK_HOLE)
    except (OSError, AttributeError):
        return size
    finally:
        os.lseek(fd, pos, os.SEEK_SET)  # SEEK_HOLE moves the file position


def read_chunks(path: str, *, chunk: int = CHUNK, start: int = 0,
                progress: dict | None = None) -> Iterator[tuple[int, bytes]]:
    """Yield ``(offset, data)`` where ``data`` holds whole lines (ends with ``\\n``).

    ``offset`` is the byte offset of ``data[0]`` in the file as stored (for compressed and
    UTF-16 files: in the decoded text). A final line without a newline gets one. A line
    longer than :data:`MAX_LINE` is cut there (the rest of it is skipped). Holes of a
    sparse file (a region never written: zeros) are skipped at seek speed (SEEK_DATA) and
    end the line before them. ``progress["read"]`` counts the bytes read or skipped, so a
    watchdog sees progress even through a region without a newline.
    Raises :class:`SourceError` with a one-line message.
    """
    progress = progress if progress is not None else {}
    progress.setdefault("read", 0)
    try:
        fh, st = _open(path)
    except SourceError:
        raise
    except FileNotFoundError:
        raise SourceError(f"{path}: no such file (deleted?)") from None
    except PermissionError:
        raise SourceError(f"{path}: permission denied") from None
    except OSError as exc:
        raise SourceError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    # sparse files: an apparent size well above the allocated blocks says there are holes
    sparse = st.st_size > 512 * getattr(st, "st_blocks", st.st_size) + (1 << 20)
    with fh:
        try:
            # the kind is told from data, not from the zeros of a hole
            head = fh.read(max(1, min(4096, _next_hole(fh.fileno(), 0, st.st_size))) if sparse else 4096)
        except OSError as exc:
            raise SourceError(f"{path}: read error ({exc.strerror or exc})") from None
        kind = _sniff(head.rstrip(b"\0") if sparse else head)  # a hole's block starts with zeros
        if kind == "binary":
            raise SourceError(f"{path}: binary file, not a log: skipped")
        fh.seek(0)
        raw = fh
        if kind == "gzip":
            raw = gzip.GzipFile(fileobj=fh, mode="rb")  # type: ignore[assignment]
        decoder = codecs.getincrementaldecoder(kind)("replace") if kind.startswith("utf-16") else None
        if start and kind == "text":
            fh.seek(start)
        offset = start if kind == "text" else 0
        carry = b""
        skipping = False  # inside an over-long line, dropping bytes until its newline
        sparse = sparse and kind == "text"
        while True:
            want = chunk
            if sparse:
                pos = offset + len(carry)  # where the next read starts
                data_at = _next_data(fh.fileno(), pos, st.st_size)
                if data_at > pos:  # a hole: skipped, and it ends the line before it
                    progress["read"] += data_at - pos
                    carry = carry.rstrip(b"\0")  # the zeros of the hole's first block
                    if carry:
                        yield offset, carry + b"\n"
                    carry, skipping = b"", False
                    offset = pos = data_at
                    if data_at >= st.st_size:
                        break
                    fh.seek(data_at)
                want = max(1, min(chunk, _next_hole(fh.fileno(), pos, st.st_size) - pos))
            try:
                block = raw.read(want)
            except (OSError, EOFError, gzip.BadGzipFile) as exc:
                raise SourceError(f"{path}: read error ({getattr(exc, 'strerror', None) or exc})") from None
            progress["read"] += len(block)
            if decoder is not None:
                block = decoder.decode(block, final=not block).encode("utf-8", "replace")
                if block.startswith(b"\xef\xbb\xbf") and offset == 0 and not carry:
                    block = block[3:]
            if not block:
                break
            if skipping:
                nl = block.find(b"\n")
                if nl < 0:
                    offset += len(block)
                    continue
                block = block[nl + 1 :]
                offset += nl + 1
                skipping = False
            data = carry + block if carry else block
            cut = data.rfind(b"\n") + 1
            if cut == 0:
                if len(data) > MAX_LINE:
                    yield offset, data[:MAX_LINE] + b"\n"
                    offset += len(data)
                    carry = b""
                    skipping = True
                else:
                    carry = data
                continue
            out, carry = data[:cut], data[cut:]
            if len(carry) > MAX_LINE:
                yield offset, out
                offset += len(out)
                yield offset, carry[:MAX_LINE] + b"\n"
                offset += len(carry)
                carry = b""
                skipping = True
                continue
            # Cut over-long lines inside the chunk.
            if len(out) > MAX_LINE and _has_long_line(out):
                out = _cut_long_lines(out)
            yield offset, out
            offset += cut
        if carry:
            yield offset, carry + b"\n"


def _has_long_line(data: bytes) -> bool:
    """True when some window of MAX_LINE bytes holds no newline (a line longer than
    2 x MAX_LINE surely exists; shorter over-long lines are let through: still bounded)."""
    n = len(data)
    for start in range(0, n - MAX_LINE, MAX_LINE):
        if data.find(b"\n", start, start + MAX_LINE) < 0:
            return True
    return False


def _cut_long_lines(data: bytes) -> bytes:
    out = []
    for line in data.split(b"\n")[:-1]:
        out.append(line[:MAX_LINE])
    return b"\n".join(out) + b"\n"
