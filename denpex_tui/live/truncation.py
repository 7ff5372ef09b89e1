"""Where to read again when a followed file shrank or was rewritten under us.

A truncation (``logrotate copytruncate``, ``> file``), or bytes before our offset that
changed between two polls (truncated and regrown, even to the same size in the same mtime
tick; or rewritten in place), is handled in three steps, each a function here; the
follower (``FileFollower._rewind``) runs them in order:

1. ``resume_point``: the last line boundary before the first changed byte, proven by the
   head, by the recorded last lines (``LineRecords``) or, failing both, by a checkpoint
   (then lines after it may repeat);
2. ``open_copy``: the lines appended after our last read and before the truncation are
   gone from the file; ``<path>.1`` is read for them when it is a copy of what we read;
3. ``reread_from``: the reading state is set back to that boundary, knowing which bytes
   after it were emitted already (the head of a torn line is not emitted twice).

``rewind_event`` says what happened, and how sure we are, in one ``SourceEvent``.
"""

from __future__ import annotations

import os
import stat as stat_mod

from . import sources as _s
from .openfile import OpenFile
from .sources import O_FLAGS, OVERLAP, PollResult, SourceEvent


def common(a: bytes, b: bytes) -> int:
    """Length of the common prefix of ``a`` and ``b``."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def resume_point(f: OpenFile, size: int) -> tuple[int, str, int] | None:
    """Where to read again after the file shrank below our offset or its bytes before
    it changed: ``(offset, how, changed_at)``, or None when nothing changed.

    ``offset`` is a line boundary; the bytes before it are the ones we read.  ``how``:

    * ``"exact"``: proven by the head (compared from offset 0) or by the recorded
      lines (``LineRecords``: a line unchanged at its offset is one we had read);
    * ``"repeat"``: the change is older than the recorded lines (more than 64 KiB
      before our offset, past the head): read again from the last checkpoint that
      still matches; lines after it may repeat.
    """
    pread = _s.os_pread
    t, h = f.tail, f.head
    if h:
        cur = pread(f.fd, len(h), 0)
        if cur != h:
            j = common(cur, h)
            return h.rfind(b"\n", 0, j) + 1, "exact", j
    if size >= f.pos and (not t or pread(f.fd, len(t), f.pos - len(t)) == t):
        return None  # the head and the bytes just before our offset are as we read them
    recs = f.recs
    if recs.end == f.emit_off and (recs or recs.base <= len(h)):
        count, off = recs.matched(lambda n, o: pread(f.fd, n, o), size)
        if count or recs.base <= len(h):
            return off, "exact", off
    m = min(size, recs.base if recs.end == f.emit_off else f.pos)
    for off, sample in reversed(f.ckpts):
        if len(h) <= off <= m and pread(f.fd, len(sample), off - len(sample)) == sample:
            return off, "repeat", m
    return h.rfind(b"\n") + 1, "repeat", m


def open_copy(path: str, f: OpenFile, now: float, r: PollResult) -> OpenFile | None:
    """After copytruncate: open ``<path>.1`` if it is a copy of what we were reading; it
    takes over ``f``'s partial line and is read on from our offset."""
    if not f.head or f.pos == 0:
        return None
    cand = path + ".1"
    try:
        st = _s.os_stat(cand)
        r.calls += 1
        if not stat_mod.S_ISREG(st.st_mode) or st.st_size < f.pos or (st.st_dev, st.st_ino) == (f.dev, f.ino):
            return None
        fd = _s.os_open(cand, O_FLAGS)
        r.calls += 1
    except OSError:
        return None
    try:
        ok = _s.os_pread(fd, len(f.head), 0) == f.head
        if ok and f.tail:
            ok = _s.os_pread(fd, len(f.tail), f.pos - len(f.tail)) == f.tail
    except OSError:
        ok = False
    if not ok:
        os.close(fd)
        return None
    o = OpenFile(fd, st, now, f.sid, f.path)
    o.pos, o.emit_off, o.pending, o.pending_cont = f.pos, f.emit_off, f.pending, f.pending_cont
    o.tail, o.head, o.static = f.tail, f.head, True
    o.note = f"recovered from {cand}"
    f.pending = b""
    f.pending_cont = False
    return o


def reread_from(f: OpenFile, b: int, old_emit: int) -> None:
    """Set ``f``'s reading state back to the line boundary ``b`` (bytes before it are the
    ones we read); bytes from ``b`` that are still the ones emitted up to ``old_emit``
    (the head of a torn line) are not emitted again (``dup_until``)."""
    pread = _s.os_pread
    lo = f.pos - len(f.tail)
    known = f.tail[b - lo :] if b >= lo else f.head[b:]
    # emitted: up to old_emit, and the torn head already known for a line emitted whole (a
    # second cut inside it before it was completed: its head was flushed again otherwise)
    known = known[: max(0, max(old_emit, f.dup_until) - b)]
    f.dup_until = b + common(pread(f.fd, len(known), b), known) if known else 0
    n = min(OVERLAP, b)
    f.tail = pread(f.fd, n, b - n) if n else b""  # bytes before b: ours, by the above
    f.pos = f.emit_off = b
    f.pending, f.pending_cont = b"", False
    f.head = f.head[:b]
    f.ckpts = [(o, s) for o, s in f.ckpts if o <= b]
    f.recs.cut(b)
    f.history_end = -1
    f.skip_nl = False
    f.nul_since = None


def rewind_event(path: str, sid: str, *, size: int, old_pos: int, changed_at: int, b: int, how: str,
                 recovered: bool) -> SourceEvent:
    """The ``truncated`` / ``possibly-lost`` event of a rewind to offset ``b``."""
    shrunk = size < old_pos
    if shrunk:
        state, detail = "truncated", f"size {size} < offset {old_pos} (copytruncate?)"
    else:
        state = "truncated" if recovered else "possibly-lost"
        detail = (f"content before offset {old_pos} changed at offset {changed_at} between two polls "
                  f"(truncated and rewritten, or rewritten in place)")
    if recovered:
        detail += f"; the rest of the old content is read from {path}.1"
    elif not shrunk:
        detail += "; lines appended after our last read and before the truncation may be lost"
    if not b:
        detail += "; reading from the start"
    elif how == "exact":
        detail += f"; unchanged up to offset {b}: reading from there"
    else:
        detail += f"; reading again from offset {b}: lines up to offset {changed_at} may repeat"
    return SourceEvent(path, state, detail, sid)
