"""Where each line of one log file starts, without keeping its text (no Textual here).

A :class:`FileIndex` keeps a sparse table of line starts: one ``(line, offset)`` checkpoint at
least every ``CHECKPOINT_BYTES`` of file (12 bytes per checkpoint, about 0.75 MB per GB of
log). The text of a line is read back from the file when it is needed (the rows on screen, a
search), as toolong and lnav do: from the checkpoint before it, at most ``CHECKPOINT_BYTES`` of
short lines plus ``MAX_SHOW`` bytes of the line itself. A line of any length costs only what is
shown of it: a 2 GB line is read as its first ``MAX_SHOW`` bytes and marked cut.

Scanning yields one *record* per timestamped line: the line and the untimestamped lines after
it in the same file (a traceback stays with the message it belongs to). The time is read through
:func:`~denpex_tui.app.lineinfo.line_facts`; a time earlier than the file's previous one is
raised to it (time never goes backwards within a file).
"""

from __future__ import annotations

import bisect
import os
from array import array
from dataclasses import dataclass
from datetime import datetime
from typing import Iterator

from .lineinfo import line_facts

__all__ = ["FileIndex", "Record", "CHECKPOINT_BYTES", "MAX_SHOW"]

CHECKPOINT_BYTES = 16 << 10
MAX_SHOW = 16 << 10  # bytes of one line read back for the screen (the rest is marked cut)
HEAD = 256  # bytes of a line's start that its time and rank are read from
READ = 1 << 20


@dataclass(slots=True)
class Record:
    time: float | None
    lines: int  # the timestamped line and the untimestamped lines after it
    tags: list[int] | None  # per line, the rank tag (consoles only): see ``FileIndex.tag``


class FileIndex:
    """Line starts of one file; ``lines`` complete lines up to byte ``end`` are indexed."""

    def __init__(self, path: str, sid: int, *, console: bool = False) -> None:
        self.path = path
        self.sid = sid
        self.console = console
        self.ck_line = array("Q")
        self.ck_off = array("Q")
        self.lines = 0
        self.end = 0
        self.last_time: float | None = None
        self.timed = False  # some line had a timestamp
        self.stale = False  # the file was truncated or replaced: its old lines are gone
        self.year_hint: int | None = None
        self._fd: int | None = None
        self.dev_ino: tuple[int, int] | None = None

    # -- the file --------------------------------------------------------------------------

    def size(self) -> int:
        try:
            st = os.stat(self.path)
        except OSError:
            return self.end
        if self.dev_ino is None:
            self.dev_ino = (st.st_dev, st.st_ino)
            self.year_hint = datetime.fromtimestamp(st.st_mtime).year
        elif self.dev_ino != (st.st_dev, st.st_ino) or st.st_size < self.end:
            self.stale = True
        return st.st_size

    def mtime(self) -> float:
        try:
            return os.stat(self.path).st_mtime
        except OSError:
            return 0.0

    def _read(self, n: int, off: int) -> bytes:
        if self.stale:
            return b""
        if self._fd is None:
            try:
                self._fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            except OSError:
                return b""
        try:
            return os.pread(self._fd, n, off)
        except OSError:
            return b""

    def close(self) -> None:
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = None

    # -- indexing --------------------------------------------------------------------------

    def _checkpoint(self, line: int, off: int) -> None:
        if not self.ck_off or off - self.ck_off[-1] >= CHECKPOINT_BYTES:
            self.ck_line.append(line)
            self.ck_off.append(off)

    def count_to(self, stop: int, *, final: bool = True) -> int:
        """Index lines up to byte ``stop`` without parsing them (C-speed): for a file that is
        merged with nothing. Returns the number of new lines."""
        pos, before = self.end, self.lines
        at_start = True
        while pos < stop:
            data = self._read(min(READ, stop - pos), pos)
            if not data:
                break
            if at_start:
                self._checkpoint(self.lines, pos)
            last = data.rfind(b"\n")
            if last < 0:
                if final and pos + len(data) >= stop:  # an unterminated last line
                    self.lines += 1
                    pos += len(data)
                    break
                pos += len(data)
                at_start = False
                continue
            counted, lines_at = 0, self.lines
            nxt = self.ck_off[-1] + CHECKPOINT_BYTES - pos
            while nxt <= last:
                nl = data.find(b"\n", max(nxt, 0), last + 1)
                if nl < 0 or nl == last:
                    break
                lines_at += data.count(b"\n", counted, nl + 1)
                counted = nl + 1
                self._checkpoint(lines_at, pos + nl + 1)
                nxt = nl + 1 + CHECKPOINT_BYTES
            self.lines += data.count(b"\n", 0, last + 1)
            pos += last + 1
            at_start = True
        if at_start or pos >= stop:
            self.end = pos
        return self.lines - before

    def records(self, stop: int, *, final: bool = True, read: int = READ) -> Iterator[Record]:
        """Scan from ``end`` to byte ``stop``, one record per timestamped line. Lines before
        the file's first timestamp go with it; a file without any timestamp is one record
        with no time (the caller places it). With ``final``, an unterminated last line at
        ``stop`` is taken as a line."""
        pos = self.end
        line_start = pos
        head = bytearray()
        cur: Record | None = None
        lead = 0  # untimestamped lines before the first timestamp of this scan
        lead_tags: list[int] = []
        while pos < stop:
            data = self._read(min(read, stop - pos), pos)
            if not data:
                break
            i = 0
            n = len(data)
            while i < n:
                nl = data.find(b"\n", i)
                piece_end = n if nl < 0 else nl
                if len(head) < HEAD:
                    head += data[i:min(piece_end, i + HEAD - len(head))]
                if nl < 0:
                    if not (final and pos + n >= stop):
                        break
                    nl = n  # the unterminated last line
                # one complete line [line_start, pos + nl]
                self._checkpoint(self.lines, line_start)
                self.lines += 1
                facts = line_facts(head.decode("utf-8", "replace"), self.year_hint)
                tag = self.tag(facts.rank, facts.local) if self.console else 0
                t = facts.time
                if t is not None:
                    self.timed = True
                    if self.last_time is not None and t < self.last_time:
                        t = self.last_time
                    self.last_time = t
                    if cur is not None:
                        yield cur
                    cur = Record(t, 1 + lead, ([*lead_tags, tag] if self.console else None))
                    lead, lead_tags = 0, []
                elif cur is not None:
                    cur.lines += 1
                    if cur.tags is not None:
                        cur.tags.append(tag)
                else:
                    lead += 1
                    if self.console:
                        lead_tags.append(tag)
                head.clear()
                i = nl + 1
                line_start = pos + min(i, n)
            pos += n
        self.end = line_start
        if cur is not None:
            yield cur
        if lead:
            yield Record(self.last_time, lead, lead_tags if self.console else None)

    @staticmethod
    def tag(rank: int | None, local: int | None) -> int:
        """A console line's ranks as one int: (local + 1) << 16 | (rank + 1), 0 for none."""
        lo = 0 if rank is None else min(rank, 0xFFFE) + 1
        hi = 0 if local is None else min(local, 0x7FFE) + 1
        return (hi << 16) | lo

    # -- reading back ----------------------------------------------------------------------

    def offset_of(self, line: int) -> int | None:
        """Byte offset where (0-based) ``line`` starts."""
        if line < 0 or line >= self.lines or not self.ck_line:
            return None
        c = bisect.bisect_right(self.ck_line, line) - 1
        pos, at = self.ck_off[c], self.ck_line[c]
        while at < line:
            data = self._read(READ, pos)
            if not data:
                return None
            i = 0
            while at < line:
                nl = data.find(b"\n", i)
                if nl < 0:
                    break
                at += 1
                i = nl + 1
            pos += i if at == line else len(data)
        return pos

    def read_lines(self, line: int, count: int) -> list[tuple[bytes, bool]]:
        """Up to ``count`` lines from ``line`` (0-based): (first MAX_SHOW bytes, cut?)."""
        out: list[tuple[bytes, bool]] = []
        count = min(count, self.lines - line)
        pos = self.offset_of(line) if count > 0 else None
        while pos is not None and len(out) < count:
            data = self._read(READ // 16, pos)
            if not data:
                break
            i = 0
            while len(out) < count:
                nl = data.find(b"\n", i)
                if nl < 0:
                    break
                out.append((data[i:min(nl, i + MAX_SHOW)], nl - i > MAX_SHOW))
                i = nl + 1
            if len(out) >= count:
                break
            if i == 0:  # one line longer than the read: its start only, then the next line
                rest = data[:MAX_SHOW]
                if line + len(out) == self.lines - 1 and len(data) < READ // 16:
                    out.append((rest, False))  # the unterminated last line
                    break
                out.append((rest, True))
                pos = self.offset_of(line + len(out)) if line + len(out) < self.lines else None
            else:
                pos += i
        return out

    def line_at_offset(self, off: int) -> int:
        """The (0-based) line that byte ``off`` is in."""
        c = bisect.bisect_right(self.ck_off, off) - 1
        if c < 0:
            return 0
        pos, at = self.ck_off[c], self.ck_line[c]
        while pos < off:
            data = self._read(min(READ, off - pos), pos)
            if not data:
                break
            at += data.count(b"\n")
            pos += len(data)
        return at
