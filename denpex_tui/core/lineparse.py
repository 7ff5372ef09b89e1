"""Parsing of one log line: launcher/rank prefixes, timestamp, level.

Only lines that matter are parsed (candidate lines from the prefilter, traceback blocks and
the few lines around them), so clarity wins over micro-speed here.

Rank sources, in the order they are peeled off the front of a line:

* pdsh ``host: `` (only when followed by something that looks like a log line, since
  ``RuntimeError: ...`` must not be taken for a host),
* srun ``--label`` ``  5: `` (a task id, a global rank when srun launched the ranks),
* torchrun ``--tee`` ``[default3]:`` (role name + **local** rank),
* torch's ``[rank3]:`` (global rank, added once the process group exists).

Inside the text: DeepSpeed ``[Rank 3]`` (global; ``-1`` means not yet known).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

__all__ = ["Prefix", "parse_prefix", "parse_time", "parse_level", "strip_prefixes"]

_PDSH = re.compile(
    r"(?P<host>[A-Za-z0-9][A-Za-z0-9._-]{0,62}): (?=\[\d{4}-\d\d-\d\d |\[rank\d+\]|\[[a-z_]+\d+\]:|\[Rank -?\d+\])"
)
_SRUN = re.compile(r" {0,6}(?P<task>\d{1,6}): ")
_ROLE = re.compile(r"\[(?P<role>[A-Za-z_][A-Za-z_-]*?)(?P<n>\d+)\]:")
_RANK_PREFIX = re.compile(r"\[rank(?P<n>\d+)\]: ?")
_DS_RANK = re.compile(r"\[Rank (?P<n>-?\d+)\]")


@dataclass(slots=True)
class Prefix:
    text: str  # the line with every prefix removed
    host: str | None = None
    task: int | None = None  # srun label
    local_rank: int | None = None  # torchrun [defaultN]
    rank: int | None = None  # global rank, when the line itself says so
    role_name: str | None = None


def parse_prefix(line: str) -> Prefix:
    """Peel launcher prefixes off ``line`` (already safe text)."""
    p = Prefix(text=line)
    s = line
    m = _PDSH.match(s)
    if m:
        p.host = m.group("host")
        s = s[m.end() :]
    m = _SRUN.match(s)
    if m and (s[m.end() : m.end() + 1] in ("[", " ") or _ROLE.match(s, m.end())):
        p.task = int(m.group("task"))
        s = s[m.end() :]
    while True:
        m = _RANK_PREFIX.match(s)
        if m:
            p.rank = int(m.group("n"))
            s = s[m.end() :]
            continue
        m = _ROLE.match(s)
        if m and m.group("role") != "rank":
            p.local_rank = int(m.group("n"))
            p.role_name = m.group("role")
            s = s[m.end() :]
            continue
        break
    if p.rank is None:
        m = _DS_RANK.search(s, 0, 160)
        if m and int(m.group("n")) >= 0:
            p.rank = int(m.group("n"))
    p.text = s
    return p


def strip_prefixes(line: str) -> str:
    return parse_prefix(line).text


# --- timestamps -------------------------------------------------------------------------

_TS_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    # Python logging / DeepSpeed / Megatron: 2026-11-29 17:40:16,343  [2026-11-29 17:51:02,788]
    (re.compile(r"\[?(?P<d>\d{4}-\d\d-\d\d)[ T_](?P<t>\d\d:\d\d:\d\d)(?:[.,](?P<f>\d{1,9}))?(?P<tz>Z|[+-]\d\d:?\d\d)?"), "iso"),
    # glog / c10: E1129 17:40:18.662000 or [E1218 20:27:21.426415540
    (re.compile(r"\[?(?P<lvl>[DIWEF])(?P<mo>\d\d)(?P<dd>\d\d) (?P<t>\d\d:\d\d:\d\d)(?:\.(?P<f>\d{1,9}))?\b"), "glog"),
    # accelerate: 01/02/2024 00:20:14
    (re.compile(r"(?P<mo>\d\d)/(?P<dd>\d\d)/(?P<y>\d{4}) (?P<t>\d\d:\d\d:\d\d)"), "mdy"),
]


def _frac(f: str | None) -> int:
    if not f:
        return 0
    return int((f + "000000")[:6])


def parse_time(text: str, year_hint: int | None = None, search_limit: int = 120) -> tuple[datetime | None, str | None]:
    """Find the line's own timestamp near its start.

    Returns ``(datetime, written)``: the datetime (aware when the log gives an offset, naive
    otherwise) and the text as written. glog lines carry no year: ``year_hint`` (from the
    file's neighbours or mtime) supplies it.
    """
    head = text[:search_limit]
    for rx, kind in _TS_PATTERNS:
        m = rx.search(head)
        if not m:
            continue
        try:
            hh, mm, ss = (int(x) for x in m.group("t").split(":"))
            if kind == "iso":
                y, mo, dd = (int(x) for x in m.group("d").split("-"))
                dt = datetime(y, mo, dd, hh, mm, ss, _frac(m.group("f")))
                tz = m.group("tz")
                if tz:
                    if tz == "Z":
                        dt = dt.replace(tzinfo=timezone.utc)
                    else:
                        sign = 1 if tz[0] == "+" else -1
                        tzd = tz[1:].replace(":", "")
                        dt = dt.replace(tzinfo=timezone(sign * timedelta(hours=int(tzd[:2]), minutes=int(tzd[2:]))))
            elif kind == "glog":
                if m.start() > 24:
                    continue
                year = year_hint or datetime.now().year
                dt = datetime(year, int(m.group("mo")), int(m.group("dd")), hh, mm, ss, _frac(m.group("f")))
            else:
                dt = datetime(int(m.group("y")), int(m.group("mo")), int(m.group("dd")), hh, mm, ss)
        except ValueError:
            continue
        return dt, m.group(0).lstrip("[")
    return None, None


_LEVEL_WORD = re.compile(r"\b(CRITICAL|FATAL|ERROR|WARNING|WARN|INFO|DEBUG)\b")
_GLOG_LEVEL = re.compile(r"\[?([DIWEF])\d{4} \d\d:\d\d:\d\d")
_GLOG_MAP = {"D": "debug", "I": "info", "W": "warning", "E": "error", "F": "critical"}
_WORD_MAP = {
    "CRITICAL": "critical",
    "FATAL": "critical",
    "ERROR": "error",
    "WARNING": "warning",
    "WARN": "warning",
    "INFO": "info",
    "DEBUG": "debug",
}


def parse_level(text: str) -> str | None:
    m = _GLOG_LEVEL.match(text)
    if m:
        return _GLOG_MAP[m.group(1)]
    m = _LEVEL_WORD.search(text, 0, 100)
    if m:
        return _WORD_MAP[m.group(1)]
    return None
