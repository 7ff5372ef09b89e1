"""Search over the whole merged timeline, as lnav does (no Textual here).

A query is plain text or an RE2 regular expression (linear time, so a pattern from the
keyboard can never hang the screen on a long line), case-insensitive unless asked otherwise.
The files are scanned in large reads (C-speed); each matching line is one match, kept as its
merged row, at most ``MAX_MATCHES`` of them (the count then says "more than").
"""

from __future__ import annotations

import re
from array import array
from dataclasses import dataclass, field
from typing import Callable

import re2

from .timeline import Timeline

__all__ = ["SearchQuery", "Matches", "find_all", "compile_query", "MAX_MATCHES"]

MAX_MATCHES = 1_000_000
READ = 4 << 20


@dataclass(frozen=True)
class SearchQuery:
    text: str
    regex: bool = False
    case: bool = False  # case-sensitive

    def describe(self) -> str:
        return f"{'/' if self.regex else ''}{self.text}{'/' if self.regex else ''}" + (" (case)" if self.case else "")


@dataclass
class Matches:
    seqs: array = field(default_factory=lambda: array("I"))
    complete: bool = True  # False: more than MAX_MATCHES, or cancelled
    error: str | None = None


def compile_query(q: SearchQuery, *, text: bool = False):
    """The query as an RE2 pattern over bytes (or over str with ``text``); raises ValueError
    with a one-line reason for a bad pattern."""
    opts = re2.Options()
    opts.log_errors = False  # RE2 would print its reason on stderr, under the screen
    opts.case_sensitive = q.case
    pattern = q.text if q.regex else re.escape(q.text)
    try:
        return re2.compile(pattern if text else pattern.encode("utf-8"), options=opts)
    except Exception as exc:
        msg = exc.args[0] if exc.args else exc
        if isinstance(msg, bytes):
            msg = msg.decode("utf-8", "replace")
        raise ValueError(f"not a valid RE2 pattern: {msg}") from None


def find_all(tl: Timeline, q: SearchQuery, cancelled: Callable[[], bool] = lambda: False) -> Matches:
    """Every merged row whose line matches, ascending."""
    try:
        rx = compile_query(q)
    except ValueError as exc:
        return Matches(complete=True, error=str(exc))
    out: list[int] = []
    complete = True
    for sid, meta in enumerate(tl.sources):
        merged = tl.counts[sid]
        if not merged:
            continue
        idx = meta.index
        stop = idx.end if merged >= idx.lines else (idx.offset_of(merged) or idx.end)
        pos, line0 = (idx.ck_off[0] if idx.ck_off else 0), 0
        while pos < stop:
            if cancelled():
                return Matches(array("I", sorted(out)), complete=False)
            data = idx._read(min(READ, stop - pos), pos)
            if not data:
                break
            cut = data.rfind(b"\n") + 1 if pos + len(data) < stop else len(data)
            if cut <= 0:  # one line longer than a read: searched in its first READ bytes
                cut = len(data)
            i, counted = 0, 0
            while True:
                m = rx.search(data, i, cut)
                if m is None:
                    break
                s = m.start()
                line0 += data.count(b"\n", counted, s)
                counted = s
                if line0 < merged:
                    seq = tl.seq_of_line(sid, line0)
                    if seq is not None:
                        out.append(seq)
                if len(out) >= MAX_MATCHES:
                    complete = False
                    break
                nl = data.find(b"\n", s, cut)
                if nl < 0:
                    break
                i = nl + 1
            if not complete:
                break
            line0 += data.count(b"\n", counted, cut)
            if cut == len(data) and pos + cut < stop and not data.endswith(b"\n"):
                nl = data_end = pos + cut  # skip the rest of the long line
                while True:
                    more = idx._read(READ, data_end)
                    if not more:
                        break
                    k = more.find(b"\n")
                    if k >= 0:
                        nl = data_end + k
                        break
                    data_end += len(more)
                line0 += 1
                pos = nl + 1
                continue
            pos += cut
        if not complete:
            break
    out.sort()
    return Matches(array("I", out), complete=complete)
