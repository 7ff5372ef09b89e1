"""The one reader of log bytes: whole-line chunks with the hostile-input guards.

Every consumer that reads a log (scan's pipeline and the history pass of ``follow``/``watch``,
the view's index and its rows, first-error search, evidence excerpts, the control comparison,
the probes' path extraction) reads it through here, so offsets, line numbers and decoding are the
same everywhere:

* FIFOs, devices and files of /proc and /sys (also behind links) are refused, never opened for
  a blocking read; a binary file is refused after its first bytes;
* gzip (rotated copies) and UTF-16 logs are decoded; their offsets count decoded bytes;
* a line longer than :data:`MAX_LINE` keeps its first ``MAX_LINE`` bytes and counts as one line
  (the rest of it up to its newline is dropped);
* holes of a sparse file are skipped at seek speed and end the line before them;
* a final line without a newline is a line (``partial_tail=True``, the scan of a finished file)
  or is left for the follower to complete (``partial_tail=False``, the history of a live file).

Chunks never hold a whole file: at most ``chunk`` bytes, always cut after a newline.
"""

from __future__ import annotations

import codecs
import errno
import gzip
import os
import stat
import time
from typing import Iterator

__all__ = ["CHUNK", "MAX_LINE", "SourceError", "sniff", "special_target", "link_outside", "read_chunks",
           "read_lines", "read_head", "read_tail", "text_kind", "line_start_after"]

CHUNK = 8 << 20
MAX_LINE = 1 << 20  # a longer line is cut: its first MAX_LINE bytes are kept as one line


class SourceError(Exception):
    """A source that cannot be read; the message is one line for the user."""


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


def _open_reading(path: str):
    try:
        return _open(path)
    except SourceError:
        raise
    except FileNotFoundError:
        raise SourceError(f"{path}: no such file (deleted?)") from None
    except PermissionError:
        raise SourceError(f"{path}: permission denied") from None
    except OSError as exc:
        raise SourceError(f"{path}: cannot be read ({exc.strerror or exc})") from None


def text_kind(path: str) -> str:
    """'text', 'gzip', 'utf-16-le' or 'utf-16-be' (raises :class:`SourceError` for what is
    not a log: binary data, a FIFO, a device, a file of /proc)."""
    fh, st = _open_reading(path)
    with fh:
        sparse = st.st_size > 512 * getattr(st, "st_blocks", st.st_size) + (1 << 20)
        try:
            head = fh.read(max(1, min(4096, _next_hole(fh.fileno(), 0, st.st_size))) if sparse else 4096)
        except OSError as exc:
            raise SourceError(f"{path}: read error ({exc.strerror or exc})") from None
    kind = _sniff(head.rstrip(b"\0") if sparse else head)
    if kind == "binary":
        raise SourceError(f"{path}: binary file, not a log: skipped")
    return kind


def read_chunks(path: str, *, chunk: int = CHUNK, start: int = 0, end: int | None = None,
                partial_tail: bool = True, progress: dict | None = None) -> Iterator[tuple[int, bytes]]:
    """Yield ``(offset, data)`` where ``data`` holds whole lines (ends with ``\\n``) and
    ``offset`` is where its first line starts.

    Offsets are exact: the bytes of a chunk are the file's bytes at ``offset`` (for gzip and
    UTF-16 files: of the decoded text), except that a line cut at :data:`MAX_LINE` comes alone
    in its chunk. ``start`` must be a line start; with ``end``, reading stops at the first line
    boundary at or after ``end`` (a range of a big file read in parallel). ``partial_tail``:
    a final line without a newline is a line (it gets one), else it is not yielded.
    ``progress["read"]`` counts the bytes read or skipped (a watchdog sees progress even
    through a region without a newline); ``progress["stop"]`` is, at the end, the offset after
    the last byte yielded, and ``progress["kind"]`` / ``progress["ident"]`` the file's kind and
    (device, inode). Raises :class:`SourceError` with a one-line message.
    """
    progress = progress if progress is not None else {}
    progress.setdefault("read", 0)
    progress["io_since"] = time.monotonic()
    try:
        fh, st = _open_reading(path)
    finally:
        progress["io_since"] = None
    progress["ident"] = (st.st_dev, st.st_ino)
    progress["stop"] = start
    # sparse files: an apparent size well above the allocated blocks says there are holes
    sparse = st.st_size > 512 * getattr(st, "st_blocks", st.st_size) + (1 << 20)
    with fh:
        progress["io_since"] = time.monotonic()
        try:
            # the kind is told from data, not from the zeros of a hole
            head = fh.read(max(1, min(4096, _next_hole(fh.fileno(), 0, st.st_size))) if sparse else 4096)
        except OSError as exc:
            raise SourceError(f"{path}: read error ({exc.strerror or exc})") from None
        finally:
            progress["io_since"] = None
        kind = _sniff(head.rstrip(b"\0") if sparse else head)  # a hole's block starts with zeros
        progress["kind"] = kind
        if kind == "binary":
            raise SourceError(f"{path}: binary file, not a log: skipped")
        fh.seek(0)
        raw = fh
        if kind == "gzip":
            raw = gzip.GzipFile(fileobj=fh, mode="rb")  # type: ignore[assignment]
        decoder = codecs.getincrementaldecoder(kind)("replace") if kind.startswith("utf-16") else None
        if kind != "text":
            start, end = 0, None
        if start:
            fh.seek(start)
        cut = _Cutter(start)
        sparse = sparse and kind == "text"
        whole_reads = kind == "text" and not sparse
        while True:
            want = chunk
            pos = cut.next_read
            if end is not None and pos >= end and not cut.carry and not cut.skipping:
                break
            if sparse:
                data_at = _next_data(fh.fileno(), pos, st.st_size)
                if data_at > pos:  # a hole: skipped, and it ends the line before it
                    progress["read"] += data_at - pos
                    yield from cut.hole(data_at)
                    progress["stop"] = cut.emitted
                    if data_at >= st.st_size:
                        break
                    fh.seek(data_at)
                    pos = data_at
                want = max(1, min(chunk, _next_hole(fh.fileno(), pos, st.st_size) - pos))
            if end is not None and pos < end:
                want = min(want, max(4096, end - pos))
            progress["io_since"] = time.monotonic()  # a watchdog tells a hung read from slow work
            try:
                if whole_reads and not cut.carry and not cut.skipping:  # (a hung probe is a hung read)
                    want = _through_newline(fh.fileno(), pos, want, end)
                block = raw.read(want)
            except (OSError, EOFError, gzip.BadGzipFile) as exc:
                raise SourceError(f"{path}: read error ({getattr(exc, 'strerror', None) or exc})") from None
            finally:
                progress["io_since"] = None
            progress["read"] += len(block)
            counter = progress.get("counter")
            if counter is not None:
                counter(len(block))
            if decoder is not None:
                block = decoder.decode(block, final=not block).encode("utf-8", "replace")
                if block.startswith(b"\xef\xbb\xbf") and cut.next_read == 0 and not cut.carry:
                    block = block[3:]
            if not block:
                break
            for item in cut.feed(block, stop_at=end):
                yield item
                progress["stop"] = cut.emitted
            if cut.done:
                break
        if partial_tail and (cut.carry or cut.skipping):
            yield from cut.flush()
        progress["stop"] = cut.emitted


_PROBE = 4096


def _through_newline(fd: int, pos: int, want: int, end: int | None) -> int:
    """How many bytes to read at ``pos`` (a line start) so that the read ends just after a
    newline: the last one in the ``want`` bytes, or for a range's last read the first one at
    or after ``end``, looked for in the page at that place (``os.pread``: the file's position
    stays). The chunk is then the read's own bytes object: cutting its partial last line off,
    or joining it to the next read's start, copied every chunk once more (8 MB, about 1 ms).
    ``want`` unchanged when that page holds no newline (a line longer than it: the cut copies)."""
    try:
        if end is not None and pos + want >= end:
            probe = os.pread(fd, _PROBE, end - 1)
            j = probe.find(b"\n")
            return end + j - pos if j >= 0 else want
        if want <= _PROBE:
            return want
        probe = os.pread(fd, _PROBE, pos + want - _PROBE)
    except OSError:  # the read itself reports it
        return want
    j = probe.rfind(b"\n")
    return want - _PROBE + j + 1 if j >= 0 else want


class _Cutter:
    """Bytes in order -> whole-line chunks with exact offsets, lines cut at MAX_LINE."""

    __slots__ = ("carry", "carry_off", "skipping", "next_read", "emitted", "done")

    def __init__(self, offset: int) -> None:
        self.carry = b""
        self.carry_off = offset  # where ``carry`` starts
        self.skipping = False  # the kept start of an over-long line was yielded; dropping its rest
        self.next_read = offset
        self.emitted = offset  # the offset after the last line yielded
        self.done = False

    def hole(self, data_at: int) -> Iterator[tuple[int, bytes]]:
        carry = self.carry.rstrip(b"\0")  # the zeros of the hole's first block
        if carry and not self.skipping:
            yield self.carry_off, carry[:MAX_LINE] + b"\n"
        self.carry, self.skipping = b"", False
        self.carry_off = self.next_read = self.emitted = data_at

    def feed(self, block: bytes, stop_at: int | None = None) -> Iterator[tuple[int, bytes]]:
        self.next_read += len(block)
        if self.skipping:
            nl = block.find(b"\n")
            if nl < 0:
                self.carry_off += len(block)
                return
            block = block[nl + 1:]
            self.carry_off += nl + 1
            self.emitted = self.carry_off
            self.skipping = False
        # ``carry`` (the partial line before ``block``) holds no newline: the lines end in the
        # block, and the whole lines are joined from the two in one copy (a chunk was copied
        # twice, carry + block and then its whole lines: 0.3 ns a byte)
        carry = self.carry
        nc = len(carry)
        base = self.carry_off
        cut = block.rfind(b"\n") + 1
        last = nc + cut if cut else 0  # the end of the whole lines, in carry + block
        if stop_at is not None and base + last >= stop_at:
            # the range ends at the first line boundary at or after stop_at
            self.done = True
            if stop_at <= base:
                self.carry = b""
                return
            last = nc + block.find(b"\n", max(0, stop_at - base - 1 - nc)) + 1
        if last == 0:
            data = carry + block
            if len(data) > MAX_LINE:
                yield base, data[:MAX_LINE] + b"\n"
                self.carry, self.skipping = b"", True
                self.carry_off = base + len(data)
            else:
                self.carry = data
            return
        if nc:
            whole = b"".join((carry, memoryview(block)[:last - nc]))
        else:
            whole = block if last == len(block) else block[:last]
        yield from _exact(whole, base)
        self.emitted = base + last
        rest = block[last - nc:] if not self.done else b""
        self.carry_off = base + last
        if len(rest) > MAX_LINE:
            yield self.carry_off, rest[:MAX_LINE] + b"\n"
            self.carry, self.skipping = b"", True
            self.carry_off += len(rest)
        else:
            self.carry = rest

    def flush(self) -> Iterator[tuple[int, bytes]]:
        if self.carry and not self.skipping:
            yield self.carry_off, self.carry + b"\n"
            self.emitted = self.carry_off + len(self.carry)
        elif self.skipping:
            self.emitted = self.carry_off
        self.carry, self.skipping = b"", False


def _exact(data: bytes, base: int) -> Iterator[tuple[int, bytes]]:
    """Whole lines at ``base`` as chunks; a line over MAX_LINE is cut and comes alone."""
    longs = long_lines(data)
    if not longs:
        yield base, data
        return
    pos = 0
    for s, e in longs:
        if s > pos:
            yield base + pos, data[pos:s]
        yield base + s, data[s:s + MAX_LINE] + b"\n"
        pos = e + 1
    if pos < len(data):
        yield base + pos, data[pos:]


def long_lines(data: bytes) -> list[tuple[int, int]]:
    """(start, newline) of each line longer than MAX_LINE in ``data`` (whole lines), found at C
    speed: only windows of MAX_LINE/2 bytes without a newline are looked at closely."""
    n = len(data)
    if n <= MAX_LINE:
        return []
    half = MAX_LINE // 2
    out: list[tuple[int, int]] = []
    k = 0
    while k + half <= n:
        if data.find(b"\n", k, k + half) >= 0:
            k += half
            continue
        s = data.rfind(b"\n", 0, k) + 1
        e = data.find(b"\n", k + half)
        if e < 0:
            e = n - 1
        if e - s > MAX_LINE:
            out.append((s, e))
        k = e + 1
    return out


def drop_continued(data: bytes, continues: bool) -> bytes:
    """A follower's chunk under the same rule: when its first line continues a line whose start
    was already delivered (a line over MAX_LINE, or one flushed by the partial-line timeout),
    that rest is dropped: a line is counted once."""
    if not continues:
        return data
    nl = data.find(b"\n")
    return b"" if nl < 0 else data[nl + 1:]


def read_lines(path: str, *, start: int = 0, end: int | None = None, max_bytes: int | None = None,
               progress: dict | None = None) -> Iterator[tuple[int, int, bytes]]:
    """``(line_no, offset, raw)`` of every line from ``start`` (``line_no`` counts from 1 at
    ``start``); ``raw`` is the line without its newline (cut at :data:`MAX_LINE`, as every reader
    of log lines sees it). At most ``max_bytes`` are read; ``progress`` as for :func:`read_chunks`."""
    no = 0
    got = 0
    for off, data in read_chunks(path, start=start, end=end, chunk=1 << 20, progress=progress):
        pos = 0
        n = len(data)
        while pos < n:
            nl = data.find(b"\n", pos)
            no += 1
            yield no, off + pos, data[pos:nl]
            pos = nl + 1
        got += n
        if max_bytes is not None and got >= max_bytes:
            return


def read_head(path: str, max_bytes: int) -> bytes | None:
    """The file's first ``max_bytes``, raw (None: not a regular file, or unreadable)."""
    try:
        fh, _st = _open(path)
    except (OSError, SourceError):
        return None
    with fh:
        try:
            return fh.read(max_bytes)
        except OSError:
            return None


def read_tail(path: str, end: int | None, max_bytes: int) -> bytes | None:
    """Up to ``max_bytes`` of the file's bytes before ``end`` (or its end), raw."""
    try:
        fh, st = _open(path)
    except (OSError, SourceError):
        return None
    with fh:
        try:
            if end is None:
                end = st.st_size
            start = max(0, end - max_bytes)
            fh.seek(start)
            return fh.read(end - start)
        except OSError:
            return None


def line_start_after(path: str, pos: int) -> int | None:
    """The offset of the first line that starts at or after ``pos`` (None: past the end)."""
    if pos <= 0:
        return 0
    try:
        fh, st = _open(path)
    except (OSError, SourceError):
        return None
    with fh:
        fh.seek(pos - 1)
        at = pos - 1
        while True:
            b = fh.read(64 << 10)
            if not b:
                return None
            nl = b.find(b"\n")
            if nl >= 0:
                return at + nl + 1
            at += len(b)
