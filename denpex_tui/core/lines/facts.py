"""The one door for line facts: everything Denpex knows about one log line, computed once.

:func:`line_facts` takes a line as written (bytes) and gives a :class:`LineFacts`: its safe
text without prefixes (and the colour spans of the text), the launcher and log prefixes it
carries (the registry in :mod:`~denpex_tui.core.lines.formats`), its time (the rule in
:mod:`~denpex_tui.core.lines.times`), its level, which stream of a shared file it belongs to,
whether it is a launcher's own line relayed through a rank's label, and, with the file it came
from, its rank as far as the line and the file tell (:meth:`LineFacts.ranks`). A local rank
becomes a global one in one place only: :class:`~denpex_tui.core.lines.ranks.RankResolver`.

Every consumer (scan's pipeline, the live engine, the view's index and rows, first-error and
first-warning search, the probes' path extraction, evidence, the control comparison) reads these
facts from here and computes none of them itself. The progress counter a line shows (a tqdm bar
as last drawn, a step line: :func:`line_progress`) is one more such fact, read only where it is
asked for.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from ..text import safe_line
from .formats import LEADING, MAX_PREFIX_ROUNDS, TEXT_RANK, active_formats, apply_groups, first_format, small_int
from .progress import PROGRESS_NEEDLES, Progress, line_progress, shown_segment
from .times import line_time

if TYPE_CHECKING:
    from ..model import SourceInfo

__all__ = ["LineFacts", "line_facts", "parse_line", "parse_level", "LAUNCHER_LINES", "is_launcher_text",
           "line_progress", "shown_segment", "Progress", "PROGRESS_NEEDLES"]

# A launcher's own lines, relayed through a task's label (srun relays slurmstepd's through task
# 0): they are the launcher's, not that rank's.
LAUNCHER_LINES = ("slurmstepd", "srun: ", "pdsh@", "mpirun ",
                  "--------------------------------------------------------------------------")


def is_launcher_text(text: str) -> bool:
    return text.startswith(LAUNCHER_LINES)


@dataclass(slots=True)
class LineFacts:
    """One line as Denpex understands it. ``text`` is the safe text with every prefix removed."""

    text: str
    host: str | None = None  # node name a prefix gives (pdsh, NCCL, kubectl pod)
    task: int | None = None  # srun --label task id
    local_rank: int | None = None  # torchrun [defaultN]
    rank: int | None = None  # global rank, when the line itself says so
    role_name: str | None = None
    device: int | None = None  # NCCL [dev]
    pid: int | None = None  # NCCL host:pid:tid, glog pid
    time: datetime | None = None
    epoch: float | None = None  # the time as seconds since the epoch
    time_text: str | None = None
    precision: float | None = None  # seconds the written time can be off by
    full_date: bool = False  # the line wrote its year (a glog time takes the file's)
    level: str | None = None
    formats: tuple[str, ...] = ()
    raw_text: str = ""  # the safe text as written, prefixes included
    spans: tuple = ()  # colour spans of raw_text (SGR codes the log carried)

    @property
    def node(self) -> str | None:
        return self.host

    @property
    def launcher(self) -> bool:
        """A launcher's own line (slurmstepd, srun, pdsh, mpirun), whatever label relayed it."""
        return is_launcher_text(self.text)

    def stream_key(self) -> tuple | None:
        """Which stream of a shared file (a console) the line belongs to."""
        if self.local_rank is not None:
            return ("l", self.local_rank)
        if self.task is not None:
            return ("t", self.task)
        if self.rank is not None and ("mpirun" in self.formats or "torch-rank" in self.formats):
            return ("g", self.rank)
        if self.host is not None:
            return ("h", self.host)
        return None

    def ranks(self, src: "SourceInfo | None" = None) -> tuple[int | None, int | None]:
        """(global rank, local rank) of the line as far as the line and its file tell, before a
        local rank is mapped to a global one: the line's own rank, else its srun task, else the
        file's rank (``rank3.log``, ``--exec 3=...``); its local rank, else the file's
        (``attempt_0/3/``). A launcher's own line has no rank."""
        if self.launcher:
            return None, None
        local = self.local_rank if self.local_rank is not None else (src.local_rank if src else None)
        if self.rank is not None:
            return self.rank, local
        if self.task is not None:
            return self.task, local
        if src is not None:
            if src.file_rank is not None:
                return src.file_rank, local
            if src.exec_rank is not None:
                return src.exec_rank, local
        return None, local


def _prefixes(p: LineFacts, s: str) -> str:
    used: list[str] = []
    fmts = active_formats()
    joined = first_format()
    for rnd in range(MAX_PREFIX_ROUNDS):
        start = 0
        if joined is not None:
            m = joined.match(s)
            if m is None:
                break  # no format applies here (one match for all of them)
            start = int(m.lastgroup[1:])  # those before it do not match here
        hit = False
        for f in fmts[start:]:
            if (f.once and f.name in used) or (f.first_only and rnd > 0):
                continue
            if f.name in ("pdsh", "srun-label") and not LEADING.issuperset(used):
                continue  # host and task labels lead the line (after a pod prefix at most)
            m = f.rx.match(s)
            if m is None or (f.guard is not None and not f.guard(p, m)):
                continue
            apply_groups(p, m)
            used.append(f.name)
            if f.strip:
                s = s[m.end():]
                hit = True
            break
        if not hit:
            break
    if p.rank is None:
        m = TEXT_RANK.search(s, 0, 200)
        if m:
            n = m.group("n") if m.group("n") is not None else m.group("s")
            p.rank = None if n.startswith("-") else small_int(n)
            used.append("ds-rank" if m.group("n") is not None else "rank-of-world")
    p.formats = tuple(used)
    return s


def _facts(text: str, spans: tuple, written: bytes, year_hint: int | None) -> LineFacts:
    p = LineFacts(text=text, raw_text=text, spans=spans)
    p.text = _prefixes(p, text)
    st = line_time(written, year_hint)
    if st is not None:
        p.time, p.epoch, p.time_text, p.precision, p.full_date = st.dt, st.epoch, st.written, st.precision, \
            st.full_date
    if p.level is None:
        p.level = parse_level(p.text)
    return p


def line_facts(raw: bytes, year_hint: int | None = None) -> LineFacts:
    """The facts of one line as written (its bytes, without the newline)."""
    st = safe_line(raw)
    return _facts(st.text, st.spans, raw, year_hint)


def parse_line(line: str, year_hint: int | None = None) -> LineFacts:
    """The facts of a line given as (already safe) text: a pasted excerpt, a test."""
    return _facts(line, (), line.encode("utf-8", "surrogateescape"), year_hint)


_LEVEL_WORD = re.compile(r"\b(CRITICAL|FATAL|ERROR|WARNING|WARN|INFO|DEBUG)\b")
_GLOG_LEVEL_RX = re.compile(r"\[?([DIWEF])\d{4} \d\d:\d\d:\d\d")
_GLOG_LEVEL = {"D": "debug", "I": "info", "W": "warning", "E": "error", "F": "critical"}
_WORD_MAP = {"CRITICAL": "critical", "FATAL": "critical", "ERROR": "error", "WARNING": "warning",
             "WARN": "warning", "INFO": "info", "DEBUG": "debug"}


def parse_level(text: str) -> str | None:
    """The level a line's text (prefixes removed) says: a glog letter, else the first level
    word in its first 100 characters."""
    m = _GLOG_LEVEL_RX.match(text)
    if m:
        return _GLOG_LEVEL[m.group(1)]
    m = _LEVEL_WORD.search(text, 0, 100)
    if m:
        return _WORD_MAP[m.group(1)]
    return None
