"""``scan --control PATH...``: what the failing run printed that a healthy run of the same job did not.

"The decisive evidence is the first log line that precedes the error and differs from a healthy
run" (the founding NVMe entry). Per rank, every line of the failing run is normalised and looked
up among the control's lines of the same rank:

* numbers (steps, losses, times, sizes, pids, ports) become ``N``;
* UUIDs, ``0x`` hex and long hex ids become ``H``, and so do torchrun's random run-folder
  suffixes and ``mkdtemp`` names;
* the run folders themselves (the paths given on the command line) become ``<run>``;
* whitespace is collapsed.

Reported per rank: the first line with no counterpart in the control (``first_new``), and, walking
back from the rank's first error, the nearest line before it with no counterpart
(``new_before_error``): the line that precedes the error and differs. Ranks are matched by
global rank; when the control has other ranks or nodes, the job shapes differ and that is said.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from .lines.reader import SourceError, read_lines
from .text import safe_line, safe_str
from .words import count, ranks

__all__ = ["normalise", "ControlReport", "compare_with_control"]

_MAX_LINE = 4096
_MAX_SET = 2_000_000
_UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}(?:_[a-z0-9_]{4,12})?", re.I)
_RUNDIR = re.compile(r"\bnone_[a-z0-9_]{8}\b|(?<=/)tmp[a-z0-9_]{8}\b", re.I)  # torchrun's log dir, mkdtemp
_HEX = re.compile(r"\b0x[0-9a-f]+\b|\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{8,}\b", re.I)
_NUM = re.compile(r"[-+]?\d+(?:[.,:]\d+)*(?:e[-+]?\d+)?", re.I)
_WS = re.compile(r"\s+")


_CR = "\\x0d"  # a carriage return, as the door shows it: what follows overwrote what came before
_BAR = re.compile(r"\s*\d{1,3}%\|[^|]{0,200}\|.*$")  # tqdm: 'label:  40%|████  | 4/10 [00:01<00:02, 3.1it/s]'
_TMP = re.compile(r"(?<=/tmp/)[^/\s'\"]+|(?<=/var/tmp/)[^/\s'\"]+")  # mkstemp/mkdtemp/gcc temp names
_HEAD = re.compile(r"^(?:\[[^\]]{0,80}\]:?\s*)+(?:N(?:\s*N)*\s*)?(?:>>\s*)?")  # '[WARNING|x.py:N] N N >> ', '[transformers] '


def normalise(text: str, roots: list[str]) -> str:
    """A line as two runs of the same job print it alike: prefixes, the run's folders, ids,
    temp names, numbers and times, a logger's header, and progress bars (only the last of a
    line's \\r-overwritten states, its label) made the same."""
    from .lines.facts import parse_line

    text = parse_line(text).text
    if _CR in text:  # a terminal shows the last state; a progress bar is its label
        text = next((seg for seg in reversed(text.split(_CR)) if seg.strip()), "")
    text = _BAR.sub(" <progress>", text)
    for r in roots:
        if r:
            text = text.replace(r, "<run>")
    text = _TMP.sub("T", text)
    text = _UUID.sub("H", text)
    text = _RUNDIR.sub("H", text)
    text = _HEX.sub("H", text)
    text = _NUM.sub("N", text)
    text = _HEAD.sub("", _WS.sub(" ", text).strip())
    return text


@dataclass
class LineRef:
    path: str
    line: int
    text: str

    def to_json(self) -> dict[str, Any]:
        return {"path": safe_str(self.path), "line": self.line, "text": self.text}


@dataclass
class RankDiff:
    rank: int
    first_new: LineRef | None
    new_before_error: LineRef | None
    error: LineRef | None
    lines: int
    new_lines: int

    def to_json(self) -> dict[str, Any]:
        return {"rank": self.rank, "first_new": self.first_new.to_json() if self.first_new else None,
                "new_before_error": self.new_before_error.to_json() if self.new_before_error else None,
                "error": self.error.to_json() if self.error else None,
                "lines": self.lines, "new_lines": self.new_lines}


@dataclass
class ControlReport:
    control: list[str]
    ranks: list[RankDiff] = field(default_factory=list)
    shape: list[str] = field(default_factory=list)  # how the job shapes differ (empty: same)

    def to_json(self) -> dict[str, Any]:
        return {"paths": [safe_str(p) for p in self.control], "same_shape": not self.shape,
                "shape_differences": list(self.shape), "ranks": [r.to_json() for r in self.ranks]}


def _rank_files(result, like=None) -> dict[int, list[str]]:
    """Rank -> its own files (per-rank files; a console only for a rank without one). A file
    whose global rank the logs do not say is matched through ``like`` (the other run) by node
    name and local rank."""
    byrank: dict[int, list] = {}
    unmapped = []
    results = getattr(result.job, "results", {})
    for s in result.job.sources():
        if s.error or s.kind == "error-json" or not os.path.isfile(s.path):
            continue
        info = results[s.path].info if s.path in results else None
        if len(s.ranks) == 1:
            byrank.setdefault(s.ranks[0], []).append(s)
        elif len(s.ranks) > 1 and s.kind == "console":  # a console without per-rank files: its lines
            for r in s.ranks:                           # of each rank, by the ranks they name
                byrank.setdefault(r, []).append(s)
        elif not s.ranks and info is not None and s.kind == "rank-file":
            unmapped.append((s.node, info.local_rank, s))
    if like is not None and unmapped:
        lres = getattr(like.job, "results", {})
        key = {}
        for s in like.job.sources():
            if len(s.ranks) == 1 and s.path in lres and s.kind == "rank-file":
                key[(s.node, lres[s.path].info.local_rank)] = s.ranks[0]
        for node, local, s in unmapped:
            r = key.get((node, local))
            if r is not None and node:
                byrank.setdefault(r, []).append(s)
    out: dict[int, list] = {}
    for r, srcs in byrank.items():
        own = [x.path for x in srcs if x.kind != "console"]
        out[r] = own or [x.path if len(x.ranks) == 1 else (x.path, r) for x in srcs]
    return out


def _lines(src, shared: bool = False):
    """(line number, text) of a file, or, for ``(path, rank)``, of the lines of that rank in a
    console that holds several (``shared``: and the lines that name no rank, which may be any
    rank's: what a control's console shows for every rank)."""
    path, rank = src if isinstance(src, tuple) else (src, None)
    from .lines.facts import parse_line

    try:
        for n, _off, raw in read_lines(path):  # the one reader: a line without end costs no memory
            text = safe_line(raw.rstrip(b"\r")[:_MAX_LINE]).text
            if rank is None or parse_line(text).rank in ((rank, None) if shared else (rank,)):
                yield n, text
    except SourceError as exc:
        raise OSError(str(exc)) from None


def _path(src) -> str:
    return src[0] if isinstance(src, tuple) else src


def _roots(paths: list[str]) -> list[str]:
    out = []
    for p in paths:
        a = os.path.abspath(p)
        out.append(a if os.path.isdir(a) else os.path.dirname(a))
    return sorted(set(out), key=len, reverse=True)


def _time(text: str):
    from .lines.facts import parse_line

    t = parse_line(text).time
    return t.replace(tzinfo=None) if t is not None else None


def _earliest(items, prefer: str | None = None):
    """The earliest (time, ref): timed lines by time; among untimed files only, the one of the
    rank's error (``prefer``) first, since their order cannot be known."""
    if not items:
        return None
    timed = [x for x in items if x[0] is not None]
    if timed:
        return min(timed, key=lambda x: x[0])[1]
    return next((x[1] for x in items if x[1].path == prefer), items[0][1])


def _latest(items):
    if not items:
        return None
    timed = [x for x in items if x[0] is not None]
    return max(timed, key=lambda x: x[0])[1] if timed else items[-1][1]


def _nodes(result) -> set[str]:
    return {s.node for s in result.job.sources() if s.node}


def compare_with_control(failing, control, failing_paths: list[str], control_paths: list[str]) -> ControlReport:
    """``failing`` and ``control``: ScanResults of the two runs."""
    from .lines.facts import parse_line

    rep = ControlReport(list(control_paths))
    fr = _rank_files(failing)
    cr = _rank_files(control, like=failing)
    if set(fr) != set(cr):
        rep.shape.append(f"ranks differ: the failing run has {ranks(fr, 'no rank')}, the control {ranks(cr, 'no rank')}")
    fn, cn = _nodes(failing), _nodes(control)
    if fn and cn and len(fn) != len(cn):
        rep.shape.append(f"nodes differ: {count(len(fn), 'node')} in the failing run, {len(cn)} in the control")
    roots = _roots(failing_paths) + _roots(control_paths)
    errors: dict[int, Any] = {}
    for own in (True, False):  # the rank's first error in its own files, else anywhere (a console)
        for f in failing.findings:
            if f.severity == "error" and f.rank is not None and f.rank not in errors \
                    and (f.path in [_path(x) for x in fr.get(f.rank, ())] or not own):
                errors[f.rank] = f
    for rank in sorted(fr):
        if rank not in cr:
            continue
        seen: set[str] = set()
        for p in cr[rank]:
            for _, t in _lines(p, shared=True):
                if len(seen) < _MAX_SET:
                    seen.add(normalise(t, roots))
        err = errors.get(rank)
        et = err.time.replace(tzinfo=None) if err is not None and err.time is not None else None
        et0 = et
        if et is not None and et.microsecond == 0:  # a whole-second time (error.json): the second it names
            et = et + timedelta(seconds=1)
        firsts, befores = [], []
        total = new = 0
        for src in fr[rank]:
            p = _path(src)
            stop = err.line if err is not None and p == err.path else None  # the start of its report
            first = last_before = None
            for n, t in _lines(src):
                total += 1
                if not t.strip() or normalise(t, roots) in seen:
                    continue
                new += 1
                when = _time(t)
                if first is None:
                    first = (when, LineRef(p, n, t))
                if stop is not None:
                    if n < stop:
                        last_before = (when, LineRef(p, n, t))
                elif err is not None and when is not None and et is not None and when < et:
                    if when >= et0 and parse_line(t).level == "error":
                        continue  # inside the error's second: the rank's own report of it
                    last_before = (when, LineRef(p, n, t))
            if first:
                firsts.append(first)
            if last_before:
                befores.append(last_before)
        first_new = _earliest(firsts, err.path if err is not None else None)
        before = _latest(befores)
        err_ref = LineRef(err.path, err.text_line, err.text) if err is not None else None
        rep.ranks.append(RankDiff(rank, first_new, before, err_ref, total, new))
    if rep.ranks and all(r.lines and r.new_lines > 0.5 * r.lines for r in rep.ranks):
        rep.shape.append("most lines of every rank have no counterpart in the control: it may not be a run of the same job")
    return rep
