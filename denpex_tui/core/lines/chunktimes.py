"""The time rule (:mod:`.times`) on every line of a chunk at once, in numpy.

**Candidates.** A timestamp's ``HH:MM:SS`` has two colons three bytes apart; around each such
pair the bytes say whether an ISO, glog or accelerate time is written there and what it reads
(:func:`_candidates`, every candidate's bytes gathered once). Each line takes its leftmost valid
candidate that starts in its head (:func:`_resolve`); a glog time takes the year of the last full
date before it.

**At the line's start first.** Nearly every line of a training log opens with its time, after a
launcher label at most (``2026-12-04 16:58:13,319 INFO``, ``[default1]:2026-...``,
``[2026-...]``). Lines are grouped by their first bytes (:func:`.heads.openings`); in each distinct opening
the first byte that could start a candidate is found (ISO and accelerate times open with two
digits, glog with one of ``DIWEF`` and a digit: a byte that is neither starts none). An ISO time
that is valid right there is the line's leftmost valid candidate, so the rule's answer: only the
candidates at those places are read, not every colon pair of the chunk. The lines left (no time
at their start: a traceback, a launcher's line, a glog time) take the rule one by one when they
are few, else the chunk takes the whole-chunk pass. Either way the answer is the rule's; a test
holds the three ways equal to the per-line rule on every fixture line and on generated lines.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache

from denpex_tui.core.lines import npy as np

from . import times as _rule
from .heads import openings
from .times import _DAYS, HEAD, YEAR_MAX, YEAR_MIN, _offset_of_hour, line_time

__all__ = ["ChunkTimes", "chunk_times"]

_FEW = 32  # at most 1/_FEW of a chunk's lines taken one by one; more: the whole-chunk pass


@lru_cache(maxsize=1)
def _tables():
    """Byte-class tables, made on the first chunk (numpy is imported when first used)."""
    dig = np.zeros(257, dtype=bool)
    dig[48:58] = True  # index 256 stands for "past the end"
    glog_letter = np.zeros(257, dtype=bool)
    glog_letter[[ord(c) for c in "DIWEF"]] = True
    glog_before = np.zeros(257, dtype=bool)
    glog_before[[ord(c) for c in "[]: \n"]] = True
    return dig, glog_letter, glog_before, np.array(_DAYS, dtype=np.int64)


@dataclass(slots=True)
class ChunkTimes:
    epoch: np.ndarray  # float64 per line, NaN: no time
    year_hint: int | None  # the hint for the next chunk (the year of the last full date)


_PAD = 16  # newlines before the chunk; after it, enough for the longest timestamp


_BUF = threading.local()  # each thread's padded copy of its chunk (kept: no page faults per chunk)


def _padded(data: bytes) -> np.ndarray:
    """``data`` between ``_PAD`` newlines before and 48 after, in a buffer the thread reuses."""
    need = _PAD + len(data) + 48
    buf = getattr(_BUF, "a", None)
    if buf is None or len(buf) < need or len(buf) > 4 * need + (1 << 20):
        buf = _BUF.a = np.empty(need, dtype=np.uint8)
    a = buf[:need]
    a[:_PAD] = 10
    a[_PAD:_PAD + len(data)] = np.frombuffer(data, dtype=np.uint8)
    a[_PAD + len(data):] = 10
    return a


def _scratch(n: int) -> np.ndarray:
    """A bool array of ``n`` the thread reuses (a fresh 8 MB one page-faults on every chunk)."""
    buf = getattr(_BUF, "b", None)
    if buf is None or len(buf) < n or len(buf) > 4 * n + (1 << 20):
        buf = _BUF.b = np.empty(n, dtype=bool)
    return buf[:n]


@dataclass(slots=True)
class _Cands:
    """The candidates that look like a time, each one's reading; ``src``: its index in the
    colons given."""

    src: np.ndarray
    cstart: np.ndarray  # where it starts in the chunk
    valid: np.ndarray
    iso: np.ndarray
    glog: np.ndarray
    full: np.ndarray  # ISO or accelerate: the year is written
    y: np.ndarray
    mo: np.ndarray
    d: np.ndarray
    hh: np.ndarray
    mi: np.ndarray
    ss: np.ndarray
    us: np.ndarray
    t0: np.ndarray  # the byte where an offset would start
    has_tz: np.ndarray
    sign: np.ndarray
    th: np.ndarray
    tm: np.ndarray


def _candidates(a: np.ndarray, col: np.ndarray, iso_only: bool = False) -> _Cands:
    """The candidates at these first colons of ``HH:MM:SS`` (positions in the padded ``a``);
    ``iso_only``: only ISO times are wanted (the others are not read)."""
    dig, glog_letter, glog_before, days = _tables()
    src = np.arange(len(col))
    # Each candidate's bytes around it, gathered once and turned so that one byte of every
    # candidate is contiguous: a gather per byte missed the cache every time (about 0.4 ms per
    # 50,000 candidates). Row j of W is the byte at the hour's first digit + j - 11.
    W = np.lib.stride_tricks.sliding_window_view(a, 35)[col - 13].T.copy()

    def at(k: int) -> np.ndarray:  # the byte k after the hour's first digit, per candidate
        return W[k + 11]

    ok = dig[at(0)] & dig[at(1)] & dig[at(3)] & dig[at(4)] & dig[at(6)] & dig[at(7)]
    W, col, src = W[:, ok], col[ok], src[ok]
    q = col - 2  # where the hour starts
    b1 = at(-1)
    iso = ((b1 == 32) | (b1 == 84) | (b1 == 95)) & (at(-4) == 45) & (at(-7) == 45)
    for k in (11, 10, 9, 8, 6, 5, 3, 2):
        iso &= dig[at(-k)]
    if iso_only:
        mdy = glog = np.zeros(len(iso), dtype=bool)
    else:
        mdy = (b1 == 32) & (at(-9) == 47) & (at(-6) == 47)
        for k in (11, 10, 8, 7, 5, 4, 3, 2):
            mdy &= dig[at(-k)]
        glog = (b1 == 32) & glog_letter[at(-6)] & glog_before[at(-7)]
        for k in (5, 4, 3, 2):
            glog &= dig[at(-k)]
    keep = iso | mdy | glog
    W, q, iso, mdy, glog, src = W[:, keep], q[keep], iso[keep], mdy[keep], glog[keep], src[keep]

    def num(k: int, width: int) -> np.ndarray:  # the number written from byte k on
        out = W[k + 11].astype(np.int64) - 48
        for j in range(1, width):
            out = out * 10 + (W[k + 11 + j].astype(np.int64) - 48)
        return out

    cstart = np.where(glog, q - 6, q - 11) - _PAD
    hh, mi, ss = num(0, 2), num(3, 2), num(6, 2)
    if iso_only:
        y, mo, d = num(-11, 4), num(-6, 2), num(-3, 2)
    else:
        y = np.where(iso, num(-11, 4), np.where(mdy, num(-5, 4), 0))
        mo = np.where(iso, num(-6, 2), np.where(mdy, num(-11, 2), num(-5, 2)))
        d = np.where(iso, num(-3, 2), np.where(mdy, num(-8, 2), num(-3, 2)))
    # fraction (from byte 8): iso '.' or ',', glog '.', accelerate none; up to 9 digits,
    # microseconds from 6
    sep = at(8)
    has_f = ((iso & ((sep == 46) | (sep == 44))) | (glog & (sep == 46))) & dig[at(9)]
    nf = np.zeros(len(q), dtype=np.int64)
    us = np.zeros(len(q), dtype=np.int64)
    run = has_f.copy()
    for k in range(1, 10):  # the k-th digit of the fraction, while the digits run on
        run &= dig[at(8 + k)]
        nf += run
        if k <= 6:
            us += run * ((W[19 + k].astype(np.int64) - 48) * 10 ** (6 - k))
    tz = np.where(has_f, 9 + nf, 8) + 11  # the row of W where an offset would start
    t0 = W[tz, np.arange(len(q))]
    # offset (iso only): Z | [+-]HH:?MM, read where one may be (most logs write none)
    sign = np.zeros(len(q), dtype=np.int64)
    th = np.zeros(len(q), dtype=np.int64)
    tm = np.zeros(len(q), dtype=np.int64)
    has_tz = t0 == 90
    has_tz &= iso
    r = np.flatnonzero(iso & ((t0 == 43) | (t0 == 45)))
    if len(r):
        zr = tz[r]

        def tz_at(k: int) -> np.ndarray:
            return W[zr + k, r]

        def tz_num(k: int) -> np.ndarray:
            return (tz_at(k).astype(np.int64) - 48) * 10 + (tz_at(k + 1).astype(np.int64) - 48)

        sign[r] = np.where(t0[r] == 43, 1, -1)
        th_ok = dig[tz_at(1)] & dig[tz_at(2)]
        colon = th_ok & (tz_at(3) == 58) & dig[tz_at(4)] & dig[tz_at(5)]
        plain = th_ok & ~colon & dig[tz_at(3)] & dig[tz_at(4)]
        has_tz[r] = colon | plain
        th[r] = np.where(colon | plain, tz_num(1), 0)
        tm[r] = np.where(colon, tz_num(4), np.where(plain, tz_num(3), 0))
    # validity (the year of glog candidates is checked once it is known: _resolve)
    valid = (mo >= 1) & (mo <= 12) & (d >= 1) & (hh <= 23) & (mi <= 59) & (ss <= 59)
    valid &= d <= days[np.clip(mo, 0, 12)]
    full = iso | mdy
    valid &= ~full | ((y >= YEAR_MIN) & (y <= YEAR_MAX) & ~((mo == 2) & (d == 29) & ~_leap_np(y)))
    valid &= ~has_tz | (t0 == 90) | ((th <= 23) & (tm <= 59))
    return _Cands(src, cstart, valid, iso, glog, full, y, mo, d, hh, mi, ss, us, t0, has_tz, sign, th, tm)


def _epochs(cd: _Cands, ci: np.ndarray, year: np.ndarray) -> np.ndarray:
    """Seconds since the epoch of candidates ``ci`` read in years ``year``."""
    naive = _days_np(year, cd.mo[ci], cd.d[ci]) * 86400 + cd.hh[ci] * 3600 + cd.mi[ci] * 60 + cd.ss[ci]
    tzs = np.where(cd.t0[ci] == 90, 0, cd.sign[ci] * (cd.th[ci] * 3600 + cd.tm[ci] * 60))
    hours = naive // 3600
    uh, inv = np.distinct_inverse(hours)
    loc = np.array([_offset_of_hour(int(h)) for h in uh], dtype=np.int64)[inv]
    off = np.where(cd.has_tz[ci], tzs, loc)
    return (naive - off).astype(np.float64) + cd.us[ci] / 1_000_000


def _resolve(cd: _Cands, starts: np.ndarray, size: int, year_hint: int | None) -> ChunkTimes:
    """Each line's leftmost valid candidate starting in its head, and its time."""
    n_lines = len(starts)
    sel = np.flatnonzero(cd.valid)
    cs = cd.cstart[sel]
    order = np.argsort(cs, kind="stable")
    sel, cs = sel[order], cs[order]
    line_end = np.empty(n_lines, dtype=np.int64)
    line_end[:-1] = starts[1:]
    line_end[-1] = size
    k = np.searchsorted(cs, starts, side="left")
    kk = np.minimum(k, max(len(cs) - 1, 0))
    has = (k < len(cs)) & (len(cs) > 0)
    if len(cs):
        has &= (cs[kk] < np.minimum(starts + HEAD, line_end))
    c = sel[kk] if len(cs) else np.zeros(n_lines, dtype=np.int64)
    # glog years: the year of the last full date before the line (this chunk's or the hint's)
    lfull = has & (cd.full[c] if len(cs) else False)
    lyear = np.where(lfull, cd.y[c] if len(cs) else 0, 0)
    idx = np.where(lfull, np.arange(n_lines), -1)
    np.maximum.accumulate(idx, out=idx)
    prev = np.empty(n_lines, dtype=np.int64)
    prev[0] = -1
    prev[1:] = idx[:-1]
    hint = year_hint if year_hint is not None else datetime.now().year
    gyear = np.where(prev >= 0, lyear[np.maximum(prev, 0)], hint)
    year = np.where(lfull, lyear, gyear)
    if len(cs):
        gl = has & cd.glog[c]
        bad = gl & ((year < YEAR_MIN) | (year > YEAR_MAX) | ((cd.mo[c] == 2) & (cd.d[c] == 29) & ~_leap_np(year)))
        has &= ~bad
    epoch = np.full(n_lines, np.nan)
    if len(cs) and has.any():
        li = np.flatnonzero(has)
        epoch[li] = _epochs(cd, c[li], year[li])
    if lfull.any():
        out_hint = int(lyear[np.flatnonzero(lfull)[-1]])
    else:
        out_hint = year_hint
    return ChunkTimes(epoch, out_hint)


def _first_live(row: bytes) -> int:
    """Where in a line's opening a candidate could first start (-1: not within it): ISO and
    accelerate times open with two digits, glog with one of DIWEF and a digit."""
    for i in range(len(row) - 1):
        c = row[i]
        if c == 10:
            return -1
        if (48 <= c <= 57 or c in b"DIWEF") and 48 <= row[i + 1] <= 57:
            return i
    return -1


def _at_line_starts(a: np.ndarray, data: bytes, starts: np.ndarray, year_hint: int | None) -> ChunkTimes | None:
    """The lines whose ISO time opens them (after bytes that start no candidate) read there;
    the few others by the rule one by one. None: too many others (the whole-chunk pass)."""
    n = len(starts)
    size = len(data)
    o = openings(data, starts)  # (a console's: made already for its labels and heads)
    off = np.array([_first_live(r) for r in o.rows], dtype=np.int64)[o.inv]
    line_end = np.empty(n, dtype=np.int64)
    line_end[:-1] = starts[1:]
    line_end[-1] = size
    at = starts + off
    li = np.flatnonzero((off >= 0) & (at + 19 < line_end))  # room for YYYY-MM-DD HH:MM:SS
    col = at[li] + (_PAD + 13)  # the first colon, in the padded array
    pair = (a[col] == 58) & (a[col + 3] == 58)
    li, col = li[pair], col[pair]
    decided = np.zeros(n, dtype=bool)
    epoch = np.full(n, np.nan)
    year_of = np.zeros(n, dtype=np.int64)  # the year a decided line writes (ISO: always)
    if len(li):
        cd = _candidates(a, col, iso_only=True)
        lines = li[cd.src]
        good = np.flatnonzero(cd.valid & cd.iso & (cd.cstart == at[lines]))
        if len(good):
            epoch[lines[good]] = _epochs(cd, good, cd.y[good])
            decided[lines[good]] = True
            year_of[lines[good]] = cd.y[good]
    left = np.flatnonzero(~decided)
    if len(left) * _FEW > n:
        return None
    # the others, in order: a glog time takes the year of the last full date before it
    full_at = np.where(decided, np.arange(n), -1)
    np.maximum.accumulate(full_at, out=full_at)
    slow = (-1, year_hint)  # the last line read one by one that wrote its year, and the year

    def year_before(fast: int) -> int | None:  # the year of the latest full date: fast or slow
        return slow[1] if slow[0] > fast else int(year_of[fast]) if fast >= 0 else year_hint

    for i in left.tolist():
        s = int(starts[i])
        st = line_time(data[s:min(int(line_end[i]), s + HEAD + 40)], year_before(int(full_at[i - 1]) if i else -1))
        if st is not None:
            epoch[i] = st.epoch
            if st.full_date:
                slow = (i, st.dt.year)
    return ChunkTimes(epoch, year_before(int(full_at[-1])))


def chunk_times(data: bytes, starts: np.ndarray, year_hint: int | None = None) -> ChunkTimes:
    """The rule on every line of ``data``: ``starts`` are the lines' start offsets (ascending),
    each line ending at the next start (the last at ``len(data)``). Returns each line's epoch
    (NaN: none) and the year hint for what follows."""
    if len(data) < _rule.VECTOR_MIN_BYTES or len(starts) < 64:
        return _per_line(data, starts, year_hint)
    a = _padded(data)  # reads off the ends see newlines
    fast = _at_line_starts(a, data, starts, year_hint)
    if fast is not None:
        return fast
    # HH:MM:SS has two colons three apart: few other places do (found over the chunk at once)
    pair = np.equal(a[:-3], 58, out=_scratch(len(a) - 3))
    col = np.flatnonzero(pair)
    col = col[a[col + 3] == 58]  # the first colon of each, as a position in `a` (the chunk's is _PAD less)
    return _resolve(_candidates(a, col), starts, len(data), year_hint)


def _leap_np(y: np.ndarray) -> np.ndarray:
    return (y % 4 == 0) & ((y % 100 != 0) | (y % 400 == 0))


def _days_np(y: np.ndarray, m: np.ndarray, d: np.ndarray) -> np.ndarray:
    y = y - (m <= 2)
    era = np.floor_divide(y, 400)
    yoe = y - era * 400
    doy = (153 * (m + np.where(m > 2, -3, 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def _per_line(data: bytes, starts: np.ndarray, year_hint: int | None) -> ChunkTimes:
    n = len(starts)
    out = np.full(n, np.nan)
    size = len(data)
    for i in range(n):
        s = int(starts[i])
        e = int(starts[i + 1]) if i + 1 < n else size
        st = line_time(data[s:min(e, s + HEAD + 40)], year_hint)
        if st is not None:
            out[i] = st.epoch
            if st.full_date:
                year_hint = st.dt.year
    return ChunkTimes(out, year_hint)
