"""Find the paths worth watching in training logs.

``paths_from_logs(paths)`` streams log files (or every file under a directory), in bounded
memory, chunk by chunk with a literal prefilter, skipping binary files, and extracts:

* checkpoint save paths: DeepSpeed ``Saving model checkpoint: X`` / ``[Torch] Saving X...`` /
  ``zero checkpoint saved X``, HF ``Saving model checkpoint to X``, Megatron ``saving checkpoint
  at iteration N to X``, accelerate ``Saving current state to X``, Lightning ``saving model to 'X'``;
* paths named by errors: ``[Errno 28|24|122|30|5] ...: 'X'``, ``deepspeed_aio: open for write
  failed on X error = N``, short swap files, GDS ``filename = X``, torch shared memory
  ``</torch_...>`` (that is /dev/shm);
* DeepSpeed NVMe offload: ``nvme_path`` from the config echo (``nvme_path=PosixPath('X')``,
  ``'nvme_path': 'X'``), ``swap_folder ....... X``, ``Copying NVMe offload files from X to Y``;
* the torchelastic log dir: ``log directory set to: X``, ``error_file: X``.

Each becomes a directory to watch (the save dir rather than the per-step tag dir that rotation
deletes; the nearest existing ancestor when it does not exist here), deduplicated. Relative paths
are resolved against the log file's directory and its parents (torchrun's ``--log-dir`` files are
``<cwd>/<log_dir>/<run>/attempt_N/<rank>/stdout.log``), then the current directory
(probes/logdirs.py).

Nothing here opens a watched path for writing; logs are only read.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Iterable, Iterator

from denpex_tui.core.detect import ErrnoDetector, errno_info
from denpex_tui.core.lines.facts import parse_line
from denpex_tui.core.lines.reader import SourceError, read_chunks
from denpex_tui.core.text import safe_str
from denpex_tui.core.units import MAX_ERRNO, log_int

from .logdirs import abs_named, resolve_dir, transform

CHUNK = 1 << 20
MAX_FILES = 5000
SHM = "/dev/shm"


@dataclass(frozen=True)
class WatchPath:
    path: str  # absolute directory to watch (nearest existing ancestor when it does not exist)
    why: str
    source_line: str  # the log line (control characters escaped, truncated)
    raw: str = ""  # the path as the log wrote it
    log: str = ""
    line_no: int = 0
    exists: bool = True  # False: the directory named in the log does not exist on this machine
    wanted: str = ""  # the directory the log names (absolute), before falling back to an ancestor


@dataclass(frozen=True)
class LogError:
    """An ENOSPC/EMFILE-family error line with the path it names (for the differential)."""

    errno: int | None
    signature_id: str  # os.enospc, os.emfile, os.edquot, os.shm-enospc, deepspeed.aio-file-error
    path: str | None  # absolute path as named (may not exist here), "</torch_...>" kept raw
    source_line: str
    log: str
    line_no: int


@dataclass(frozen=True)
class SaveEvent:
    rank: int | None  # global rank; None with local_rank None = every rank
    local_rank: int | None
    source_line: str
    log: str
    line_no: int


@dataclass
class LogScan:
    watch: list[WatchPath] = field(default_factory=list)
    errors: list[LogError] = field(default_factory=list)
    saves: list[SaveEvent] = field(default_factory=list)
    files_read: int = 0
    files_skipped: list[tuple[str, str]] = field(default_factory=list)  # (file, reason)
    bytes_read: int = 0


# --- rules ----------------------------------------------------------------------------------

_PREFILTER = re.compile(
    rb"Saving model checkpoint|\[Torch\] Saving|checkpoint saved|saving checkpoint at|"
    rb"Saving current state to|saving model to|\[Errno \d+\]|deepspeed_aio|tensor\.swp|"
    rb"filename = |unable to |nvme_path|swap_folder|Copying NVMe|log directory set to|"
    rb"error_file:|Saving checkpoint|is about to be saved"
)

_Q = r"(?:'(?P<q1>[^']*)'|\"(?P<q2>[^\"]*)\")"
_ERRNO = ErrnoDetector()  # the one place that knows errno texts and spellings


def _errno_name(e: int) -> str:
    info = errno_info(e)
    return info.name if info else f"errno {e}"

# (kind, regex, transform, why). transform: "file->savedir" (tag dir's parent), "dir->savedir"
# (parent when the last component looks like a step/tag dir), "file->dir", "dir", "errfile"
_RULES: list[tuple[str, re.Pattern, str, str]] = [
    ("save", re.compile(r"Saving model checkpoint: (?P<p>\S+)"), "file->savedir",
     "checkpoint save dir (DeepSpeed)"),
    ("save", re.compile(r"\[Torch\] Saving (?P<p>\S+?)\.\.\.\s*$"), "file->savedir",
     "checkpoint save dir (DeepSpeed)"),
    ("save", re.compile(r"\bcheckpoint saved (?P<p>/\S+|\.{0,2}/?\S+\.pt)\s*$"), "file->savedir",
     "checkpoint save dir (DeepSpeed)"),
    ("save", re.compile(r"Saving model checkpoint to (?P<p>\S.*?)\s*$"), "dir->savedir",
     "checkpoint save dir (HF Trainer)"),
    ("save", re.compile(r"saving checkpoint at iteration\s+\d+ to (?P<p>\S+)"), "dir",
     "checkpoint save dir (Megatron)"),
    ("save", re.compile(r"Saving current state to (?P<p>\S.*?)\s*$"), "dir->savedir",
     "checkpoint save dir (accelerate)"),
    ("save", re.compile(r"saving model to " + _Q), "file->dir",
     "checkpoint save dir (Lightning)"),
    ("nvme", re.compile(r"nvme_path=PosixPath\(" + _Q + r"\)"), "dir", "DeepSpeed nvme_path"),
    ("nvme", re.compile(r"""['"]nvme_path['"]\s*:\s*""" + _Q), "dir", "DeepSpeed nvme_path"),
    ("nvme", re.compile(r"\bnvme_path=" + _Q), "dir", "DeepSpeed nvme_path"),
    ("nvme", re.compile(r"\bswap_folder \.{2,} (?P<p>\S+)"), "dir", "DeepSpeed swap folder"),
    ("nvme", re.compile(r"Copying NVMe offload files from (?P<p>\S+) to (?P<p2>\S+?),"), "dir",
     "DeepSpeed NVMe offload copy"),
    ("elastic", re.compile(r"log directory set to: (?P<p>\S+)"), "dir", "torchelastic log dir"),
    ("elastic", re.compile(r"\berror_file:\s+(?P<p>[^\s<]\S*)"), "errfile",
     "torchelastic log dir"),
]

_AIO = re.compile(r"deepspeed_aio:\s+(?:open for write|open for read|fstat for read)\s+failed on "
                  r"(?P<p>\S+) error = (?P<e>\d+)")
_SWP = re.compile(r"(?P<p>\S+\.tensor\.swp): (?:file_offset|buffer nbytes)")
_GDS = re.compile(r"(?:read|write) failed with .* filename = (?P<p>\S+) num bytes")
_SHM = re.compile(r"unable to (?:write to file|allocate shared memory\(shm\) for file|open shared "
                  r"memory object) (?P<p><[^>]*>)")
_SAVE_EVENT = re.compile(
    r"Saving model checkpoint|\[Torch\] Checkpoint \S+ is about to be saved|"
    r"saving checkpoint at iteration|Saving current state to|saving model to|"
    r"\bSaving checkpoint\b"
)
def _clean(line: str, limit: int = 500) -> str:
    return safe_str(line.rstrip("\r\n"), limit)


def _grp(m: re.Match, *names: str) -> str | None:
    for n in names:
        try:
            v = m.group(n)
        except IndexError:
            continue
        if v is not None:
            return v
    return None


# --- reading --------------------------------------------------------------------------------


def _iter_files(paths: Iterable[str], scan: LogScan) -> Iterator[str]:
    n = 0
    for p in paths:
        if os.path.isdir(p):
            for root, dirs, files in os.walk(p, followlinks=False):
                dirs.sort()
                for f in sorted(files):
                    n += 1
                    if n > MAX_FILES:
                        scan.files_skipped.append((os.path.join(root, f), "too many files"))
                        return
                    yield os.path.join(root, f)
        else:
            n += 1
            yield p


def iter_candidate_lines(fn: str, scan: LogScan | None = None,
                         start: int = 0, limit: int | None = None
                         ) -> Iterator[tuple[int, str]]:
    """(line_no, text) of the lines that pass the literal prefilter, read through the one reader
    (binary files, FIFOs and devices refused; long lines cut). Line numbers are 1-based from
    ``start`` (0 = file start)."""
    line_no = 0
    got = 0
    try:
        for _off, data in read_chunks(fn, start=start, end=None if limit is None else start + limit, chunk=CHUNK):
            if scan is not None and not got:
                scan.files_read += 1
            got += len(data)
            if scan is not None:
                scan.bytes_read += len(data)
            yield from _emit(data, line_no)
            line_no += data.count(b"\n")
    except SourceError as e:
        if scan is not None:
            scan.files_skipped.append((fn, str(e).split(": ", 1)[-1]))


def _emit(block: bytes, base_line: int) -> Iterator[tuple[int, str]]:
    if not _PREFILTER.search(block):
        return
    last_end = -1
    for m in _PREFILTER.finditer(block):
        s = block.rfind(b"\n", 0, m.start()) + 1
        if s <= last_end:
            continue  # same line as the previous hit
        e = block.find(b"\n", m.end())
        e = len(block) if e < 0 else e
        last_end = e
        no = base_line + block.count(b"\n", 0, s) + 1
        yield no, block[s:e].decode("utf-8", "replace")


def _rank_of(line: str) -> tuple[int | None, int | None]:
    pl = parse_line(line)
    if "ds-rank" in pl.formats:
        return None, None  # log_dist on rank 0 announces a save every rank makes
    g, local = pl.ranks()
    return (g, None) if g is not None else (None, local)


def scan_line(text: str, log: str, line_no: int, out: LogScan, *, want_saves: bool = True
              ) -> None:
    """Apply every rule to one line; append what it names to ``out``."""
    src = None
    found: list[tuple[str, str, int | None]] = []  # (dir (raw, transformed), why, errno)

    for _kind, rx, how, why in _RULES:
        m = rx.search(text)
        if not m:
            continue
        for grp in (("p", "q1", "q2"), ("p2",)):
            raw = _grp(m, *grp)
            if raw is None:
                continue
            d = transform(raw, how)
            if d is not None:
                found.append((d, raw, why, None))

    hit = _ERRNO.detect(text) if not (_AIO.search(text) or _SHM.search(text)) else None
    if hit is not None and hit[1].get("path") and not hit[1]["path"].startswith("<"):
        sig, fields = hit
        e, raw = fields["errno"], fields["path"]
        d = transform(raw, "oserror")
        if d is not None:
            found.append((d, raw, f"{fields['errname']} (errno {e}) in the log", e))
        src = src or _clean(text)
        out.errors.append(LogError(e, sig, abs_named(raw, log), src, log, line_no))
    m = _AIO.search(text)
    if m and log_int(m.group("e"), MAX_ERRNO) is not None:
        e = int(m.group("e"))
        raw = m.group("p")
        found.append((os.path.dirname(raw) or ".", raw,
                      f"DeepSpeed aio {_errno_name(e)} (errno {e})", e))
        nv = raw.split("/zero_stage_3/", 1)
        if len(nv) == 2 and nv[0]:
            found.append((nv[0], raw, "DeepSpeed nvme_path", None))
        out.errors.append(LogError(e, "deepspeed.aio-file-error", abs_named(raw, log),
                                   _clean(text), log, line_no))
    for rx in (_SWP, _GDS):
        m = rx.search(text)
        if m:
            raw = m.group("p")
            found.append((os.path.dirname(raw) or ".", raw, "DeepSpeed swap file", None))
    m = _SHM.search(text)
    if m:
        found.append((SHM, m.group("p"), "shared memory (/dev/shm) in the log", None))
        if "(28)" in text or "No space left" in text:
            out.errors.append(LogError(28, "os.shm-enospc", m.group("p"), _clean(text), log,
                                       line_no))

    for d, raw, why, _e in found:
        watch, exists, want = resolve_dir(d, log)
        out.watch.append(WatchPath(watch, why, src or _clean(text), raw, log, line_no, exists,
                                   want))
    if want_saves and _SAVE_EVENT.search(text):
        rank, lrank = _rank_of(text)
        out.saves.append(SaveEvent(rank, lrank, _clean(text), log, line_no))


def _dedupe(watch: list[WatchPath]) -> list[WatchPath]:
    by: dict[str, WatchPath] = {}
    whys: dict[str, list[str]] = {}
    for w in watch:
        if w.path not in by:
            by[w.path] = w
            whys[w.path] = [w.why]
        elif w.why not in whys[w.path]:
            whys[w.path].append(w.why)
            # prefer the entry whose named directory exists
            if not by[w.path].exists and w.exists:
                by[w.path] = w
    out = []
    for p, w in by.items():
        out.append(WatchPath(w.path, "; ".join(whys[p]), w.source_line, w.raw, w.log, w.line_no,
                             w.exists, w.wanted))
    return out


def scan_logs(paths: list[str]) -> LogScan:
    """One pass over the logs: watch paths, ENOSPC/EMFILE error lines, checkpoint save lines."""
    scan = LogScan()
    raw: list[WatchPath] = []
    for fn in _iter_files(paths, scan):
        part = LogScan()
        for no, text in iter_candidate_lines(fn, scan):
            scan_line(text, fn, no, part)
        raw.extend(part.watch)
        scan.errors.extend(part.errors)
        scan.saves.extend(part.saves)
    scan.watch = _dedupe(raw)
    return scan


def paths_from_logs(paths: list[str]) -> list[WatchPath]:
    """Directories to watch named in these logs (files or directories of logs), deduplicated,
    in first-seen order."""
    return scan_logs(paths).watch


class LogFollower:
    """Follows log files for new checkpoint-save lines (for TrendTracker.note_checkpoint_save)
    while ``denpex probe --stream`` runs. Starts at the current end of each file; handles
    truncation; reads at most ``max_bytes`` per file per poll. Line numbers count from where
    following started (counting a multi-GB file's earlier lines is not worth reading it)."""

    def __init__(self, paths: list[str], max_bytes: int = 8 << 20):
        self.paths = list(paths)
        self.max_bytes = max_bytes
        self._off: dict[str, int] = {}
        self._lines: dict[str, int] = {}
        for fn in self._files():
            try:
                self._off[fn] = os.path.getsize(fn)
            except OSError:
                pass
            self._lines[fn] = 0

    def _files(self) -> list[str]:
        scan = LogScan()
        return list(_iter_files(self.paths, scan))

    def poll(self) -> list[SaveEvent]:
        """Checkpoint-save lines appended since the last poll."""
        return self.poll_all().saves

    def poll_all(self) -> LogScan:
        """Everything the new lines name: save events, watch paths, error lines."""
        out = LogScan()
        for fn in self._files():
            try:
                size = os.path.getsize(fn)
            except OSError:
                continue
            off = self._off.get(fn, 0)
            if size < off:  # truncated or rotated in place
                off = 0
                self._lines[fn] = 0
            if size == off:
                self._off[fn] = off
                continue
            # whole lines only, at most max_bytes a poll, through the one reader
            box: dict = {}
            base = self._lines.get(fn, 0)
            try:
                for _o, block in read_chunks(fn, start=off, end=off + self.max_bytes, partial_tail=False,
                                             progress=box):
                    for no, text in _emit(block, base):
                        scan_line(text, fn, no, out)
                    base += block.count(b"\n")
                    out.bytes_read += len(block)
            except SourceError:
                continue
            self._off[fn] = box.get("stop", off)
            self._lines[fn] = base
        out.watch = _dedupe(out.watch)
        return out


__all__ = [
    "WatchPath",
    "LogError",
    "SaveEvent",
    "LogScan",
    "paths_from_logs",
    "scan_logs",
    "scan_line",
    "iter_candidate_lines",
    "LogFollower",
]
