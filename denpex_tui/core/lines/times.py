"""A line's own timestamp: one rule, with a fast path for whole chunks.

**The rule.** A line's time is the leftmost timestamp that starts within the first
:data:`HEAD` bytes of the line as written (prefixes included: an NCCL
``[2026-11-29 10:00:00.123] host:pid:tid`` time and a ``[default3]:2026-...`` time are both
found), in one of three shapes:

* ISO (Python logging, DeepSpeed, Megatron, NCCL 2.26+): ``2026-11-29 17:40:16,343``,
  ``2026-11-29T17:40:16.343Z``, ``..._17:40:16+05:30``;
* glog/c10 (``E1129 17:40:18.662000``; the level letter opens the line or follows ``[``,
  ``]``, ``:`` or a space): no year is written, the year of the file's previous full date is
  used, else the caller's hint (the file's mtime);
* accelerate's ``01/02/2024 00:20:14``.

A candidate that is no real moment (month 13, February 30, 25:00, or a year outside
1990-2199 such as Go's zero time ``0001-01-01 00:00:00``) is not a time, and the next
candidate in the head is tried. A time without an offset is local time, as
``datetime.timestamp`` reads it; ``epoch`` is always seconds since the epoch.

**Two ways to run it, one result.** :func:`line_time` applies the rule to one line (regular
expressions); :func:`~.chunktimes.chunk_times` applies it to every line of a chunk of bytes at
once, in numpy, for histories of hundreds of megabytes. Small chunks take the per-line path. A test
holds the two equal on every line of every fixture and on generated lines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from functools import lru_cache


__all__ = ["HEAD", "Stamp", "line_time", "local_offset", "VECTOR_MIN_BYTES"]

HEAD = 200  # bytes of a line's start in which its own timestamp is looked for
YEAR_MIN, YEAR_MAX = 1990, 2199
VECTOR_MIN_BYTES = 64 << 10  # below this, chunk_times runs the per-line rule

_ISO = (rb"(?P<Y>\d{4})-(?P<M>\d\d)-(?P<D>\d\d)[ T_](?P<h>\d\d):(?P<m>\d\d):(?P<s>\d\d)"
        rb"(?:[.,](?P<f>\d{1,9}))?(?P<tz>Z|[+-]\d\d:?\d\d)?")
_GLOG = (rb"(?:(?<=[\[\]: \n])|^)[DIWEF](?P<gM>\d\d)(?P<gD>\d\d) (?P<gh>\d\d):(?P<gm>\d\d):(?P<gs>\d\d)"
         rb"(?:\.(?P<gf>\d{1,9}))?")
_MDY = rb"(?P<xM>\d\d)/(?P<xD>\d\d)/(?P<xY>\d{4}) (?P<xh>\d\d):(?P<xm>\d\d):(?P<xs>\d\d)"
_ANY = re.compile(rb"(?:" + _ISO + rb")|(?:" + _GLOG + rb")|(?:" + _MDY + rb")")
_GROUPS = ("Y", "M", "D", "h", "m", "s", "f", "tz", "gM", "gD", "gh", "gm", "gs", "gf", "xM", "xD", "xY", "xh", "xm", "xs")
if tuple(_ANY.groupindex) != _GROUPS:  # _stamp reads the groups by position
    raise ImportError("times: the timestamp groups moved")

_DAYS = (0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def _leap(y: int) -> bool:
    return y % 4 == 0 and (y % 100 != 0 or y % 400 == 0)


def _days_from_civil(y: int, m: int, d: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm)."""
    y -= m <= 2
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


@lru_cache(maxsize=65536)
def _offset_of_hour(hour: int) -> int:
    """Seconds local time is ahead of UTC in the hour starting at ``hour`` (naive, as UTC)."""
    naive = datetime(1970, 1, 1) + timedelta(hours=hour)
    return int((naive - datetime(1970, 1, 1)).total_seconds() - naive.timestamp())


def local_offset(naive_utc_seconds: int) -> int:
    """The local clock's offset from UTC for a naive time (given as if it were UTC)."""
    return _offset_of_hour(naive_utc_seconds // 3600)


@dataclass(frozen=True, slots=True)
class Stamp:
    epoch: float  # seconds since the epoch
    written: str  # the timestamp as the line writes it
    precision: float  # seconds the written time can be off by (1.0 without a fraction)
    dt: datetime  # naive, or aware when the line gives an offset
    full_date: bool  # the line wrote its year (ISO, accelerate), not a glog month-day
    start: int  # byte offset of the timestamp in the line


def _stamp(m: re.Match[bytes], year_hint: int | None) -> Stamp | bool:
    """The candidate as a time; False: not a moment (try the next one); True: a glog time that
    is no moment in the year it must be read in (the line then has no time)."""
    (Y, M, D, h, mi_, s_, f_, tz_, gM, gD, gh, gm, gs, gf, xM, xD, xY, xh, xm, xs) = m.groups()
    tzs = None
    if Y is not None:
        y, mo, d, hh, mi, ss, f, tzs, full = int(Y), int(M), int(D), int(h), int(mi_), int(s_), f_, tz_, True
    elif gM is not None:
        y = year_hint if year_hint is not None else datetime.now().year
        mo, d, hh, mi, ss, f, full = int(gM), int(gD), int(gh), int(gm), int(gs), gf, False
    else:
        y, mo, d, hh, mi, ss, f, full = int(xY), int(xM), int(xD), int(xh), int(xm), int(xs), None, True
    if not (1 <= mo <= 12 and 1 <= d <= _DAYS[mo] and hh <= 23 and mi <= 59 and ss <= 59):
        return False
    if not YEAR_MIN <= y <= YEAR_MAX or (mo == 2 and d == 29 and not _leap(y)):
        return not full
    tz_s = None
    if tzs is not None:
        if tzs == b"Z":
            tz_s = 0
        else:
            th, tm = int(tzs[1:3]), int(tzs[-2:])
            if th > 23 or tm > 59:
                return False
            tz_s = (th * 3600 + tm * 60) * (1 if tzs[:1] == b"+" else -1)
    us = int((f.decode() + "000000")[:6]) if f else 0
    naive = _days_from_civil(y, mo, d) * 86400 + hh * 3600 + mi * 60 + ss
    epoch = float(naive - (tz_s if tz_s is not None else local_offset(naive))) + us / 1_000_000
    tzinfo = None if tz_s is None else timezone(timedelta(seconds=tz_s))
    dt = datetime(y, mo, d, hh, mi, ss, us, tzinfo=tzinfo)
    return Stamp(epoch, m.group(0).decode("ascii"), 10.0 ** -len(f) if f else 1.0, dt, full, m.start())


# Every shape writes ':mm:ss': a head without it has no time, found at C speed (the three
# shapes tried at every byte of an untimed head cost 20 times more).
_HAS_CLOCK = re.compile(rb":\d\d:\d\d")
_last: tuple = (None, None, None)  # the last line asked, its year hint, its answer


def line_time(raw: bytes | str, year_hint: int | None = None) -> Stamp | None:
    """The rule on one line (bytes as written; a str is encoded as UTF-8). The same line object
    asked again (a walk asks for the time, then for the line's facts) gets the same answer."""
    global _last
    last = _last
    if last[0] is raw and last[1] == year_hint:
        return last[2]
    got = _line_time(raw, year_hint)
    if type(raw) is bytes:  # (immutable: the same object is the same line)
        _last = (raw, year_hint, got)
    return got


def _line_time(raw: bytes | str, year_hint: int | None) -> Stamp | None:
    if isinstance(raw, str):
        raw = raw[: HEAD + 64].encode("utf-8", "surrogateescape")
    head = raw[: HEAD + 40]  # the longest timestamp is 35 bytes: one starting before HEAD fits
    if _HAS_CLOCK.search(head) is None:
        return None
    for m in _ANY.finditer(head):
        if m.start() >= HEAD:
            return None
        st = _stamp(m, year_hint)
        if st is True:
            return None
        if st is not False:
            return st
    return None
