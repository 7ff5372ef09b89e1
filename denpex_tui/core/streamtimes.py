"""Times a source's streams tell beyond its findings: the nearest earlier time of an untimed
line, the source's first time, and the last timestamped line of each rank's stream.

All three are the same however the source's bytes were cut into chunks (an 8 MiB history chunk
or a live line at a time), so ``scan`` and the live engine agree:

* **Earlier time** (an untimestamped traceback header or NCCL WARN line takes the time of the
  line before it): the nearest earlier timestamped line of the same stream among the
  :data:`WINDOW_LINES` lines before it (at most :data:`WINDOW_BYTES`, across chunk boundaries),
  else the nearest timestamped line of any stream there. Each line is read at most once per
  chunk, whatever the number of untimed lines: the work is linear in lines.
* **First time**: the first timestamped line among the source's first :data:`FIRST_LINES` lines.
* **Last lines**: per chunk, every stream present in it has its last timestamped line recorded
  (a backward walk of the chunk's end, then the chunk's line facts in numpy when a stream is
  not found near the end).
"""

from __future__ import annotations

from collections import deque
from datetime import datetime

from denpex_tui.core.lines import npy as np

from .lines.chunk import console_tags, line_starts, newlines, text_ranks
from .lines.heads import stream_labels
from .lines.facts import LineFacts, line_facts
from .lines.chunktimes import chunk_times
from .lines.times import line_time
from .model import LastLine
from .streamjump import JUMP_MIN_BYTES, StreamLines, covers

__all__ = ["StreamTimesMixin", "WINDOW_LINES", "WINDOW_BYTES", "FIRST_LINES"]

WINDOW_LINES = 400
WINDOW_BYTES = 256 << 10
HANDOFF_BYTES = 64 << 10  # the end of the history the follower checks its file against (live/backlog.py)
FIRST_LINES = 1000
_WALK = 2000  # lines walked back from a chunk's end before the numpy pass
# A console's walk reads each timed line through the door (~80 us): past this many lines the
# numpy pass over the chunk is cheaper (a stream silent for the chunk's last lines, or a label that
# is no stream, like the `[1]:` of torchrun's failure summary, would walk all _WALK lines first).
_WALK_CONSOLE = 256
# A console whose streams have labels needs only a short walk: a label's last line is found by
# jumping to it (bytes.rfind), a line or two through the door per label, where ranks written in
# bursts (torchrun's tee: a pipe's worth of one rank at a time) took ~200 lines of walk a chunk.
_WALK_LABELLED = 32
_JUMPS = 64  # untimed lines of one label tried from the chunk's end before the numpy pass decides


class _Ctx:
    """One chunk's view for earlier-time lookups: the recent bytes before it, then the chunk."""

    __slots__ = ("buf", "base", "cursor", "by_key", "any")

    def __init__(self, recent: bytes, data: bytes) -> None:
        self.buf = recent + data if recent else data
        self.base = len(recent)
        self.cursor = 0  # lines before this position were read
        self.by_key: dict = {}  # stream -> (time, line start)
        self.any: tuple[datetime, int] | None = None


class StreamTimesMixin:
    def init_streams(self) -> None:
        self._recent: deque[bytes] = deque()
        self._recent_bytes = 0
        self._ctx: _Ctx | None = None
        self._chunk: bytes | None = None
        self._streams: tuple[bytes, StreamLines] | None = None  # the chunk's lines by stream, once made
        self._first_left = FIRST_LINES

    def chunk_begin(self, data: bytes, offset: int) -> None:
        self._ctx = None
        self._chunk = data
        self._streams = None

    def chunk_streams(self, data: bytes) -> StreamLines:
        """The lines of this console chunk by stream (made once a chunk: the jump over lines
        that cannot touch an open traceback and the earlier-time lookups share it)."""
        got = self._streams
        if got is None or got[0] is not data:
            got = self._streams = (data, StreamLines(data))
        return got[1]

    def chunk_end(self, data: bytes) -> None:
        """Keep the whole lines the next chunks' look-backs can reach: the last WINDOW_LINES
        lines within WINDOW_BYTES, and at least the follower's HANDOFF_BYTES. (All of the last
        WINDOW_BYTES were kept: 256 KB a source carried back from the history's workers and
        held, 64 MB for a 256-file job, 512 MB for 1024 ranks' stdout and stderr.)"""
        self._ctx = None
        self._chunk = None
        self._streams = None
        n = len(data)
        if n >= WINDOW_BYTES:
            cut = data.find(b"\n", n - WINDOW_BYTES) + 1
            if 0 < cut < n:
                # the start of the WINDOW_LINES-th line from the end (a bytes.rfind per line was
                # 0.6 ms a chunk, 6 % of a folder's scan): the newlines before the last one
                nl = np.flatnonzero(np.frombuffer(data, dtype=np.uint8, count=n - 1 - cut, offset=cut) == 10)
                lines_from = cut + int(nl[-WINDOW_LINES]) + 1 if len(nl) >= WINDOW_LINES > 0 else cut
                handoff = data.rfind(b"\n", cut, n - HANDOFF_BYTES) + 1 or cut
                cut = max(cut, min(lines_from, handoff))
            self._recent.clear()
            self._recent.append(data[cut:] if 0 < cut < n else data[-WINDOW_BYTES:])
            self._recent_bytes = len(self._recent[0])
            return
        self._recent.append(data)
        self._recent_bytes += len(data)
        while len(self._recent) > 1 and self._recent_bytes - len(self._recent[0]) >= WINDOW_BYTES:
            self._recent_bytes -= len(self._recent.popleft())

    # -- the nearest earlier time ------------------------------------------------------------

    def prev_time(self, data: bytes, s: int, key) -> datetime | None:
        if self.info.kind == "console" and len(data) >= JUMP_MIN_BYTES and covers((key,)):
            got = self._prev_time_by_stream(self.chunk_streams(data), data, s, key)
            if got is not None:
                return got[0]
        ctx = self._ctx
        if ctx is None or self._chunk is not data:
            ctx = self._ctx = _Ctx(b"".join(self._recent), data)
            self._chunk = data
        buf = ctx.buf
        p = ctx.base + s
        # the start of the WINDOW_LINES-th line before p (p is a line start), or of the buffer,
        # walked back newline by newline: a line index of the whole chunk (numpy over 8 MB for
        # each chunk with an untimed traceback) cost more than the 400 steps it answers
        floor = max(0, p - WINDOW_BYTES)
        lo = p
        for _ in range(WINDOW_LINES):
            if lo <= floor:
                break
            lo = buf.rfind(b"\n", floor, lo - 1) + 1
        lo = max(lo, floor)
        pos = max(ctx.cursor, lo)
        if pos > ctx.cursor and pos > 0 and buf[pos - 1:pos] != b"\n":
            pos = buf.find(b"\n", pos) + 1 or p
        while pos < p:
            nl = buf.find(b"\n", pos, p)
            if nl < 0:
                nl = p
            raw = buf[pos:nl]
            if raw and line_time(raw, self.year_hint) is not None:  # the time first: cheap
                pre = line_facts(raw, self.year_hint)  # (the same line: its time is not read again)
                if pre.time is not None:
                    ctx.by_key[self.stream_of(pre)] = (pre.time, pos)
                    ctx.any = (pre.time, pos)
            pos = nl + 1
        ctx.cursor = max(ctx.cursor, p)
        hit = ctx.by_key.get(key)
        if hit is not None and hit[1] >= lo:
            return hit[0]
        if ctx.any is not None and ctx.any[1] >= lo:
            return ctx.any[0]  # a console is written in arrival order: any earlier time bounds it
        return None

    def _prev_time_by_stream(self, streams: StreamLines, data: bytes, s: int, key) -> tuple | None:
        """The same rule from the chunk's lines by stream: the stream's own lines back from
        ``s`` until a timed one, else the lines just before ``s`` until a timed one, never
        before the window, and each line's time only (the forward read takes every line of the
        window through the door: 400 lines, 4-8 ms a traceback). ``(time or None,)``; None
        when the window reaches before the chunk (the forward read has those bytes)."""
        starts = streams.starts
        i = int(np.searchsorted(starts, s))  # s is a line start: the line's index
        first = i - WINDOW_LINES
        if first < 0:
            return None
        floor = s - WINDOW_BYTES
        if floor > 0:
            first = max(first, int(np.searchsorted(starts, floor)))  # (a line starting before it: out)
        lo = int(starts[first])
        own = streams.lines_of(key)
        j = int(np.searchsorted(own, s)) - 1
        while j >= 0 and own[j] >= lo:
            b = int(own[j])
            stamp = line_time(data[b:data.find(b"\n", b)], self.year_hint)
            if stamp is not None:
                return (stamp.dt,)
            j -= 1
        for k in range(i - 1, first - 1, -1):  # a console is written in arrival order
            b = int(starts[k])
            stamp = line_time(data[b:int(starts[k + 1]) - 1], self.year_hint)
            if stamp is not None:
                return (stamp.dt,)
        return (None,)

    # -- the first time -------------------------------------------------------------------------

    def first_time_done(self) -> None:
        """This processor reads a range inside the file: the file's first time is not in it."""
        self._first_left = 0

    def find_first_time(self, data: bytes) -> None:
        pos = 0
        while self._first_left > 0:
            nl = data.find(b"\n", pos)
            if nl < 0:
                return
            self._first_left -= 1
            stamp = line_time(data[pos:nl], self.year_hint)  # the door's time rule, without the rest
            pos = nl + 1
            if stamp is not None:
                self.first_time = stamp.dt
                self._first_left = 0
                return

    # -- last lines -----------------------------------------------------------------------------

    def _last_key(self, pre: LineFacts):
        key = self.stream_of(pre)
        if key is None and pre.rank is not None:
            key = ("g", pre.rank)  # a rank named in the text ([rank3]:, DeepSpeed's [Rank 3])
        return key

    def record_last_lines(self, data: bytes, offset: int) -> None:
        """The last timestamped line of each rank stream present in this chunk."""
        console = self.info.kind == "console"
        end = len(data)
        pos = end - 1  # the final newline
        lines_after = 0
        found: set = set()
        done_lines: list[tuple[LineFacts, int, int]] = []  # (facts, start, lines after it)
        walked_all = True
        want = 1
        labels: list[bytes] = []
        if console:  # the streams the chunk's labels name (C speed), else those its lines' own tags name
            labels = sorted(stream_labels(data))
            want = len(labels) or max(1, len(text_ranks(data)))  # (a DeepSpeed console: [rank1/2])
        for _ in range((_WALK_LABELLED if labels else _WALK_CONSOLE) if console else _WALK):
            if pos <= 0:
                break
            start = data.rfind(b"\n", 0, pos) + 1
            raw = data[start:pos]
            pos = start - 1
            lines_after += 1
            got = self._stream_line(raw, console)
            if got is None:
                continue
            pre, key = got
            if key in found:
                continue
            found.add(key)
            done_lines.append((pre, start, lines_after))
            if len(found) >= want:
                break
        else:
            walked_all = pos <= 0
        if len(found) < want and not walked_all and labels:
            if self._last_by_label(data, labels, found, done_lines):
                walked_all = True
        if len(found) < want and not walked_all:
            done_lines += self._last_lines_numpy(data, found, end)
        for pre, start, after in done_lines:
            self._record_last(pre, offset + start, self.line_no - after + 1)

    def _stream_line(self, raw: bytes, console: bool):
        """(facts, stream key) of a timed line of a stream, else None (untimed, the launcher's
        own, or a console line of no stream)."""
        if not raw or line_time(raw, self.year_hint) is None:  # the time first: cheap
            return None
        pre = line_facts(raw, self.year_hint)
        if pre.time is None or pre.launcher:
            return None
        key = self._last_key(pre)
        if console and key is None:
            return None
        return pre, key

    def _last_by_label(self, data: bytes, labels: list[bytes], found: set, done_lines: list) -> bool:
        """The last timed line of each label's stream, found by jumping (``bytes.rfind``, in C)
        from the chunk's end to the label's last lines, where the walk back did not reach it (a
        rank quiet for the chunk's last few hundred lines). True when every label is accounted
        for: its stream's last line found (or a later line of the same stream already was), or
        none of its lines is timed (``[1]:`` of torchrun's failure summary is no stream). False
        when a label has more untimed lines than :data:`_JUMPS` at the end: the numpy pass
        decides."""
        lasts = []  # each label's last timed line
        whole = True
        for lab in labels:
            needle = b"\n" + lab
            p = len(data)
            for _ in range(_JUMPS):
                i = data.rfind(needle, 0, p)
                s = i + 1 if i >= 0 else 0 if p > 0 and data.startswith(lab) else -1
                if s < 0:
                    break  # no timed line carries this label: no stream
                p = max(s - 1, 0)
                e = data.find(b"\n", s)
                got = self._stream_line(data[s:e if e >= 0 else len(data)], True)
                if got is not None:
                    lasts.append((s, got))
                    break
            else:
                whole = False
        # latest first: two labels of one stream give it their later line
        for s, (pre, key) in sorted(lasts, key=lambda x: -x[0]):
            if key not in found:  # else a later line of its stream was found already
                found.add(key)
                done_lines.append((pre, s, newlines(data, s)))
        return whole

    def _last_lines_numpy(self, data: bytes, found: set, end: int) -> list:
        starts = line_starts(data)
        n = len(starts)
        epoch = chunk_times(data, starts, self.year_hint).epoch
        timed = ~np.isnan(epoch)
        out = []
        if self.info.kind != "console":
            idx = np.flatnonzero(timed)
            if len(idx):
                i = int(idx[-1])
                out.append((self._facts_at(data, starts, i), int(starts[i]), n - i))
            return out
        tags = console_tags(data, starts, self.info)
        sel = np.flatnonzero(timed)
        if not len(sel):
            return out
        # the last timed line of each tag; untagged lines (host streams) walked back, bounded
        t = tags[sel]
        order = np.lexsort((sel, t))
        last_of = np.flatnonzero(np.append(t[order][1:] != t[order][:-1], True))
        cands = sorted((int(sel[order][j]) for j in last_of), reverse=True)
        zero = sel[t == 0][::-1][:_WALK]
        for i in cands + [int(i) for i in zero]:
            pre = self._facts_at(data, starts, i)
            if pre.launcher:
                continue
            key = self._last_key(pre)
            if key is None or key in found:
                continue
            found.add(key)
            out.append((pre, int(starts[i]), n - i))
        return out

    def _facts_at(self, data: bytes, starts: np.ndarray, i: int) -> LineFacts:
        s = int(starts[i])
        e = int(starts[i + 1]) - 1 if i + 1 < len(starts) else len(data) - 1
        return line_facts(data[s:e], self.year_hint)

    def _record_last(self, pre: LineFacts, off: int, lineno: int) -> None:
        g, local = self._ranks(pre)
        self._note_key(g, local)
        key = self._last_key(pre)
        self.last_lines[(self.attempt, key)] = LastLine(
            path=self.info.path, line=lineno, offset=off, text=pre.text.strip(), time=pre.time,
            key_local=local, key_rank=g, node_key=self.info.node_key, attempt=self.attempt,
            priority=self.info.priority)
