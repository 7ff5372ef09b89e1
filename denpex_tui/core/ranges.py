"""One source read as several ranges in parallel, joined into what one sequential read gives.

A big text file is cut at line starts into ranges, each read by its own processor
(:class:`~denpex_tui.core.pipeline.SourceProcessor`) and indexed by its own
:class:`~denpex_tui.core.lines.index.FileIndex`. Joining range ``b`` onto ``a`` (the one
before it) renumbers ``b``'s lines after ``a``'s, shifts ``b``'s attempts by the restarts
``a`` saw, counts a finding seen in both once (the first occurrence, both counts), keeps the
first versions, the first unknown lines, and ``b``'s last lines, and gives an untimed finding at
the start of ``b`` the time its stream had at the end of ``a``. A report that ``a`` left open at
its end (a traceback crossing the cut) is not joined: the caller reads ``b`` again with ``a``'s
processor (:func:`open_at_end`).
"""

from __future__ import annotations

from denpex_tui.core.lines import npy as np

from .hit import finding_agg
from .lines.index import FileIndex
from .pipeline import SourceProcessor

__all__ = ["open_at_end", "absorb", "join_index"]


def open_at_end(p: SourceProcessor) -> bool:
    """``p`` ended inside a report (a traceback, torchelastic's failure report)."""
    return bool(p.blocks or p.fb_active)


def _shift_attempt_key(k: tuple, d: int) -> tuple:
    return (k[0] + d, *k[1:]) if d else k


def absorb(a: SourceProcessor, b: SourceProcessor) -> None:
    """Join ``b`` (the range after ``a``'s, read from a clean start) onto ``a``, in place."""
    lines, d = a.line_no, a.attempt - (b.info.attempt or 0)

    def move(obj, *fields):
        for f in fields:
            v = getattr(obj, f, None)
            if isinstance(v, int):
                setattr(obj, f, v + lines)

    for agg, f in b.findings.items():
        move(f, "line", "text_line", "traceback_start")
        if f.extra.get("tb_end_line"):
            f.extra["tb_end_line"] += lines
        f.attempt += d
        if f.time is None and agg[1] in a.key_time:
            f.time, f.time_approx = a.key_time[agg[1]], True
        key = finding_agg(f.attempt, agg[1], agg[2], agg[3], agg[4], f.exc_type)
        cur = a.findings.get(key)
        if cur is not None:
            cur.count += f.count
        else:
            a.findings[key] = f
    for k, lst in b.markers.items():
        for m in lst:
            m.line += lines
            m.attempt += d
        into = a.markers.setdefault(k, [])
        into.extend(lst)
        if len(into) > 64:
            del into[63:-1]
        a.marker_counts[k] = a.marker_counts.get(k, 0) + b.marker_counts.get(k, 0)
    for k, ll in b.last_lines.items():
        ll.line += lines
        ll.attempt += d
        a.last_lines[_shift_attempt_key(k, d)] = ll
    for k, m in getattr(b, "stop_marks", {}).items():
        m.line += lines
        m.attempt += d
        a.stop_marks[_shift_attempt_key(k, d)] = m
    for fe in b.failure_entries:
        fe.line += lines
        fe.attempt += d
    a.failure_entries.extend(b.failure_entries)
    for att, keys in b.keys_seen.items():
        a.keys_seen.setdefault(att + d, set()).update(keys)
    for k, lst in b.unknown.items():
        into = a.unknown.setdefault(_shift_attempt_key(k, d), [])
        into.extend((ln + lines, t) for ln, t in lst[: max(0, 5 - len(into))])
    for k, v in b.versions.items():
        a.versions.setdefault(k, v)
    for k, v in b.levels.items():
        a.levels[k] = a.levels.get(k, 0) + v
    a.rank_pairs |= b.rank_pairs
    a.errors.extend(b.errors)
    a.key_time.update(b.key_time)
    if a.first_time is None:
        a.first_time = b.first_time
    if a.first_error is None and b.first_error is not None:
        a.first_error = (b.first_error[0] + lines, b.first_error[1])
    a.attempt = b.attempt + d
    a.restarts += b.restarts
    a.line_no += b.line_no
    a.bytes_read = b.bytes_read
    a.year_hint = b.year_hint or a.year_hint
    a.blocks, a.fb_active, a.fb_root, a.fb_entries = b.blocks, b.fb_active, b.fb_root, b.fb_entries
    for blk in a.blocks.values():
        blk.start_line += lines
        blk.end_line += lines if blk.end_line else 0
        for e in blk.exceptions:
            e.line += lines
    for e in a.fb_entries:
        e.line += lines
    a._recent, a._recent_bytes = b._recent, b._recent_bytes


def join_index(a: FileIndex, b: FileIndex) -> None:
    """Append ``b`` (the index of the range after ``a``'s, made with ``continued=True``) to ``a``."""
    base = a.lines
    a.ck_line.extend(x + base for x in b.ck_line)
    a.ck_off.extend(b.ck_off)
    if a.tags is not None and b.tags is not None:
        a.tags.extend(b.tags)
    first, t, _end = b.take_records()
    first = first + base
    if a.last_time is not None and len(t):
        t = np.where(np.isnan(t), t, np.maximum(t, a.last_time))
    pending = len(a.rec_line) > 0
    if len(first) and first[0] == base and np.isnan(t[0]):
        # b's first lines before its first timestamp continue a's last record
        if pending and np.isnan(a.rec_time[-1]) and len(t) > 1:
            a.rec_time[-1] = float(t[1])  # a's untimed lead goes with the first timestamp
            first, t = first[2:], t[2:]
        elif pending or not len(t) > 1:
            first, t = first[1:], t[1:]
    elif pending and np.isnan(a.rec_time[-1]) and len(t):
        a.rec_time[-1] = float(t[0])
        first, t = first[1:], t[1:]
    a.append_records(first, t)
    a.lines += b.lines
    a.end = b.end
    a.timed = a.timed or b.timed
    if b.last_time is not None:
        a.last_time = b.last_time if a.last_time is None else max(a.last_time, b.last_time)
    if b.year_hint is not None:
        a.year_hint = b.year_hint
    a._started = True
