"""What the follower read last, line by line: lengths and CRC-32s of the recent lines.

After a truncation (or a rewrite) the follower must know from where the file's bytes are
no longer the ones it read: before that point a line must not be emitted twice, after it
no new line may be skipped.  The raw bytes cannot be kept (1024 followed files), so the
last ``max_bytes`` of complete lines are kept as ``(length, crc32)`` pairs, contiguous up
to the offset of the last emitted line: about 5 bytes per 100-byte line.

``matched(read, size)`` compares them with what the file holds now and says how many
lines, from the oldest recorded one, are unchanged at their offsets.  Log lines are unique
(timestamps, steps, sequence numbers): a line found unchanged at its offset is one we had
read, so everything before it is unchanged too.
"""

from __future__ import annotations

import zlib
from array import array

__all__ = ["LineRecords"]


class LineRecords:
    __slots__ = ("base", "end", "lens", "crcs", "max_bytes", "max_lines")

    def __init__(self, max_bytes: int = 64 << 10, max_lines: int = 1024) -> None:
        self.base = 0  # offset of the first recorded line
        self.end = -1  # offset after the last recorded line (-1: nothing recorded yet)
        self.lens = array("I")  # line lengths, without the newline
        self.crcs = array("I")
        self.max_bytes = max_bytes
        self.max_lines = max_lines

    def __len__(self) -> int:
        return len(self.lens)

    def clear(self, at: int = -1) -> None:
        self.base = self.end = at
        del self.lens[:]
        del self.crcs[:]

    def add(self, start: int, complete: bytes) -> None:
        """``complete`` (whole lines, as they are in the file) was emitted from ``start``."""
        if start != self.end:
            self.clear(start)  # not contiguous (a flushed partial line, a split long line...)
        n = len(complete)
        if n > self.max_bytes:
            cut = complete.find(b"\n", n - self.max_bytes - 1) + 1
            self.clear(start + cut)
            complete = complete[cut:]
        parts = complete.split(b"\n")
        parts.pop()
        self.lens.extend(map(len, parts))
        self.crcs.extend(map(zlib.crc32, parts))
        self.end = start + n
        if len(self.lens) > 2 * self.max_lines or self.end - self.base > 2 * self.max_bytes:
            self._trim()

    def _trim(self) -> None:
        total = self.end - self.base
        k = 0
        while k < len(self.lens) and (total > self.max_bytes or len(self.lens) - k > self.max_lines):
            total -= self.lens[k] + 1
            self.base += self.lens[k] + 1
            k += 1
        del self.lens[:k]
        del self.crcs[:k]

    def cut(self, at: int) -> None:
        """Forget the lines after offset ``at`` (we read again from there)."""
        if not self.lens or at < self.base:
            self.clear(at)
            return
        off = self.base
        for i, n in enumerate(self.lens):
            if off + n + 1 > at:
                del self.lens[i:]
                del self.crcs[i:]
                break
            off += n + 1
        self.end = off
        if off != at:
            self.clear(at)

    def copy(self) -> "LineRecords":
        o = LineRecords(self.max_bytes, self.max_lines)
        o.base, o.end = self.base, self.end
        o.lens, o.crcs = array("I", self.lens), array("I", self.crcs)
        return o

    def matched(self, read, size: int) -> tuple[int, int]:
        """``(count, offset)``: how many recorded lines, from the oldest, the file still
        holds unchanged at their offsets, and the offset after the last of them.
        ``read(n, off)`` is ``os.pread`` on the file; ``size`` its size now."""
        if not self.lens:
            return 0, self.base
        n = min(size, self.end) - self.base
        cur = read(n, self.base) if n > 0 else b""
        parts = cur.split(b"\n")
        off = self.base
        count = 0
        for i, (ln, crc) in enumerate(zip(self.lens, self.crcs)):
            if i >= len(parts) - 1 or len(parts[i]) != ln or zlib.crc32(parts[i]) != crc:
                break
            off += ln + 1
            count += 1
        return count, off
