"""The facts of every line of a chunk at once, in compiled code (the index's input).

For a chunk of whole lines (:mod:`.reader`), :func:`chunk_lines` gives each line's start, its
time (the rule of :mod:`.times`, run in numpy) and, for a console (a file that interleaves
ranks), its rank *tag*: the global and local rank the door (:mod:`.facts`) gives the line,
packed in one int. Tags are made without parsing every line in Python: a console's lines start
with a few distinct launcher labels (``[default3]:``, ``[rank3]:``, ``  3: ``,
``[1,3]<stderr>:``, ``host: ``...), so each line's head is found for the whole chunk at once
(:mod:`.heads`) and the door is asked once per distinct head; the few
lines whose rank the door would read elsewhere (an in-text ``[Rank 3]``/``[rank3/8]``, a
launcher's own line relayed through a label, a user's prefix template) are given to the door
whole. A test holds this equal to the door, line by line, on every fixture.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from denpex_tui.core.lines import npy as np

from .facts import LAUNCHER_LINES, line_facts
from .formats import FORMATS, TEXT_RANK, active_formats
from .heads import line_heads, starts_of
from .rows import distinct_rows, line_starts, windows
from .chunktimes import chunk_times

__all__ = ["ChunkLines", "chunk_lines", "line_starts", "newlines", "console_tags", "console_streams", "tag_of", "untag",
           "text_ranks"]


@dataclass(slots=True)
class ChunkLines:
    offset: int  # file offset of the chunk
    starts: np.ndarray  # int64 line starts, relative to the chunk
    epoch: np.ndarray  # float64 per line, NaN: no time
    tags: np.ndarray | None  # int32 per line (consoles), see tag_of
    year_hint: int | None  # for the next chunk of the file

    def __len__(self) -> int:
        return len(self.starts)


# shorter spans: bytes.count (numpy's set-up, ~4 us, costs more than it saves). 8 KB: 3.3 us
# counted, 4.0 in numpy; 12 KB: 5.1 / 4.5; 24 KB (the gap between a checkpoint line and the next
# in the 1 GiB bench): 8.7 / 5.2
_NP_SPAN = 12 << 10
_NP_BLOCK = 1 << 18  # numpy compares a block that stays in the cache


def newlines(data: bytes, lo: int = 0, hi: int | None = None) -> int:
    """``data.count(b"\n", lo, hi)``, three times faster on a long span: ``bytes.count`` tests
    byte by byte, numpy compares 32 at a time (every chunk's lines are counted, 8 MB at once)."""
    n = len(data)
    hi = n if hi is None else max(0, min(hi, n))
    lo = max(0, lo)
    if hi - lo < _NP_SPAN:
        return data.count(b"\n", lo, hi)
    a = np.frombuffer(data, dtype=np.uint8)
    total = 0
    for i in range(lo, hi, _NP_BLOCK):
        total += int(np.count_nonzero(a[i:min(i + _NP_BLOCK, hi)] == 10))
    return total


def tag_of(rank: int | None, local: int | None) -> int:
    """(global, local) rank as one int: (local + 1) << 16 | (rank + 1); 0 for neither."""
    lo = 0 if rank is None else min(rank, 0xFFFE) + 1
    hi = 0 if local is None else min(local, 0x7FFE) + 1
    return (hi << 16) | lo


def untag(tag: int) -> tuple[int | None, int | None]:
    r, loc = (tag & 0xFFFF) - 1, (tag >> 16) - 1
    return (r if r >= 0 else None), (loc if loc >= 0 else None)


# A rank the text names (read when the labels give none), and a launcher's own line: the door
# reads these from more of the line than its label.
_TEXT_RANK = re.compile(TEXT_RANK.pattern.encode())  # the door's own rule, on bytes
_MARK_MAX = 21  # the longest in-text tag: '[rank1234567/1234567]'


def _text_marks(data: bytes) -> tuple[np.ndarray, np.ndarray, list[bytes]]:
    """Where in ``data`` an in-text rank tag (the door's ``TEXT_RANK``) starts, and its code
    (1 + its index in the list of distinct tags), as ``_TEXT_RANK.finditer`` finds them: every
    '[' followed by 'r'/'R' is a candidate, cut after its first ']' (a tag has one, at its end,
    and no '[' inside, so tags never overlap); the regular expression is asked once per
    distinct cut, not once per line."""
    a = np.frombuffer(data, dtype=np.uint8)
    cand = np.flatnonzero(a[:-1] == 91)  # every '[' (a few per line), then those before r/R
    nxt = a[cand + 1]
    cand = cand[(nxt == 114) | (nxt == 82)]
    none = (np.empty(0, np.int64), np.empty(0, np.int64), [])
    if not len(cand):
        return none
    win = windows(a, cand, _MARK_MAX)
    close = win == 93
    end = close.argmax(axis=1)  # the first ']' (0 where there is none: no tag)
    has = end > 0
    if not has.all():
        cand, win, end = cand[has], win[has], end[has]
        if not len(cand):
            return none
    win *= np.arange(_MARK_MAX, dtype=np.int64)[None, :] <= end[:, None]  # what follows the ']' is no part of the tag
    rows, inv = distinct_rows(win)
    code_of = np.zeros(len(rows), dtype=np.int64)
    seen: dict[bytes, int] = {}
    for j, u in enumerate(rows):
        m = _TEXT_RANK.match(u.rstrip(b"\0"))
        if m is not None:
            code_of[j] = seen.setdefault(m.group(0), len(seen) + 1)
    tags = list(seen)
    codes = code_of[inv]
    ok = codes > 0
    return cand[ok], codes[ok], tags


def _launcher_at(data: bytes) -> list[int]:
    """Where the lines that hold a launcher's own words start, in one multi-literal scan (a
    ``bytes.find`` per word took a quarter of a big console's tags)."""
    global _LAUNCHER
    if _LAUNCHER is None:
        from ..patterns import LineScan

        _LAUNCHER = LineScan(LAUNCHER_LINES)
    return _LAUNCHER.line_starts(data)


_LAUNCHER = None


def text_ranks(data: bytes) -> set[int]:
    """The ranks in-text tags name in ``data`` ('[rank1/2]', DeepSpeed's '[Rank 0]'), found in C:
    a console without labels holds one stream per rank its lines name."""
    out = set()
    # each distinct tag once (a rank's log has a million): the chunk's marks, not a regex pass
    tags = _text_marks(data)[2] if len(data) >= 1 << 16 else set(m.group(0) for m in _TEXT_RANK.finditer(data))
    for tag in tags:
        m = _TEXT_RANK.match(tag)
        n = m.group("n") or m.group("s")
        if n and not n.startswith(b"-") and len(n) <= 7:
            out.add(int(n))
    return out


def console_tags(data: bytes, starts: np.ndarray, src=None) -> np.ndarray:
    """The door's (global, local) rank of every line of a console chunk, as tags."""
    return _through_door(data, starts, lambda line: tag_of(*line_facts(line).ranks(src)))


def console_streams(data: bytes, starts: np.ndarray) -> tuple[np.ndarray, list]:
    """The door's stream of every line of a console chunk (``LineFacts.stream_key``): each
    line's number in the list of the streams, in order of first sight."""
    ids: dict = {}

    def stream(line: bytes) -> int:
        return ids.setdefault(line_facts(line).stream_key(), len(ids))

    return _through_door(data, starts, stream), list(ids)


def _through_door(data: bytes, starts: np.ndarray, value) -> np.ndarray:
    """``value`` of every line of a console chunk, asked of the door once per distinct head
    (labels, the first rank the text names, whether anything follows), not once per line."""
    n = len(starts)
    tags = np.zeros(n, dtype=np.int32)
    if not n:
        return tags
    if active_formats() != FORMATS:  # a user's prefix template: no label shortcut
        return _door_values(data, starts, range(n), tags, value)
    hc, hcode = line_heads(data, starts)
    hlen = np.array([len(h) for h in hcode], dtype=np.int64)[hc]
    # the first rank a line's text names (within the part of the line the door looks at)
    pos, codes, mcode = _text_marks(data)
    mc = np.zeros(n, dtype=np.int64)  # 0: none
    if len(pos):
        li = np.searchsorted(starts, pos, side="right") - 1
        near = pos - starts[li] < 200 + hlen[li]
        li, codes = li[near], codes[near]
        first = np.first_of_runs(li)  # the first mark of each line (li is sorted)
        mc[li[first]] = codes[first]
    lens = np.diff(np.append(starts, len(data))) - 1
    whole = (hlen >= lens).astype(np.int64)  # the line is its label: nothing follows it
    key = (hc * (len(mcode) + 1) + mc) * 2 + whole
    uniq, inv = np.distinct_inverse(key)
    heads_by = list(hcode)
    marks_by = [b""] + list(mcode)
    vals = np.empty(len(uniq), dtype=np.int32)
    for j, k in enumerate(uniq.tolist()):
        w, rest = k & 1, k >> 1
        h, mk = heads_by[rest // (len(mcode) + 1)], marks_by[rest % (len(mcode) + 1)]
        line = h if w else h + b"x"  # what follows a label matters only as "something"
        vals[j] = value(line + b" " + mk if mk else line)
    tags[:] = vals[inv]
    special = _launcher_at(data)
    lines = np.distinct(np.searchsorted(starts, np.array(special, dtype=np.int64), side="right") - 1) \
        if special else np.empty(0, dtype=np.int64)
    lines = np.distinct(lines, _blank_tails(data, starts, whole))
    if len(lines):
        _door_values(data, starts, lines.tolist(), tags, value)
    return tags


@lru_cache(maxsize=1)
def _space_end():
    out = np.zeros(256, dtype=bool)
    out[[9, 11, 12, 13, 28, 29, 30, 31, 32]] = True
    out[128:] = True  # the last byte of a multi-byte character: maybe a Unicode space
    return out


def _blank_tails(data: bytes, starts: np.ndarray, whole: np.ndarray) -> np.ndarray:
    """The lines a head stands for wrongly: after their labels only whitespace follows (the
    door strips it: 'node-b:   ' is no host's line), which ``head + "x"`` would not show. Such
    a line ends with whitespace (before a '\\r'); those few go through the door themselves."""
    a = np.frombuffer(data, dtype=np.uint8)
    ends = np.append(starts[1:] - 1, len(data) - 1 if data.endswith(b"\n") else len(data))
    last = ends - 1
    cr = (last >= starts) & (a[np.maximum(last, 0)] == 13)
    last = last - cr
    some = (last >= starts) & (whole == 0)
    return np.flatnonzero(some & _space_end()[a[np.maximum(last, 0)]])


def _door_values(data: bytes, starts: np.ndarray, which, tags: np.ndarray, value) -> np.ndarray:
    n = len(starts)
    for i in which:
        s = int(starts[i])
        e = int(starts[i + 1]) - 1 if i + 1 < n else len(data) - 1
        tags[i] = value(data[s:min(e, s + 512)])
    return tags


def chunk_lines(offset: int, data: bytes, *, console: bool, year_hint: int | None = None,
                src=None, times: bool = True) -> ChunkLines:
    """``times=False``: a job of one source is merged with nothing: its lines need no time."""
    starts = starts_of(data)  # (kept from the pipeline's look at a console chunk's labels)
    if times:
        ct = chunk_times(data, starts, year_hint)
        epoch, hint = ct.epoch, ct.year_hint
    else:
        epoch, hint = np.full(len(starts), np.nan), year_hint
    tags = console_tags(data, starts, src) if console else None
    return ChunkLines(offset, starts, epoch, tags, hint)
