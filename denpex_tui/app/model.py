"""What the watch screen shows, as plain data (no Textual here).

``WatchState`` folds the engine's events into display rows: one row per rank, one row per
(attempt, signature, role) for findings (300 identical collateral findings are one row with
rank ranges), the header's job shape and one-line diagnosis. It holds no parsing or triage of
its own: ranks, roles, incidents and summaries all come from the engine and the core.
"""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from denpex_tui.core.model import Finding, Incident
from denpex_tui.core.story import Story, job_story
from denpex_tui.core.text import safe_str
from denpex_tui.core.words import count, span
from denpex_tui.core.words import ranks as ranks_word

__all__ = ["JobSummary", "RankRow", "FindingGroup", "WatchState", "fmt_age", "STATE_SYMBOLS"]

# Every state has a symbol and a word: colour is never the only signal (NO_COLOR, the
# high-contrast theme, colour-blind users).
STATE_SYMBOLS = {
    "initiating": ("▶", "FAILED FIRST"),
    "error": ("✖", "error"),
    "collateral": ("◆", "collateral"),
    "exited": ("■", "exited"),
    "silent": ("◌", "silent"),
    "warn": ("▲", "warn"),
    "ok": ("●", "ok"),
}
ROLE_SYMBOLS = {"initiating": "▶", "collateral": "◆", "context": "·"}


def fmt_age(seconds: float | None, coarse: bool = False) -> str:
    """``coarse`` (the job is quiet): whole minutes, so a quiet screen changes once a minute."""
    if seconds is None:
        return "-"
    s = max(0.0, seconds)
    if coarse and s < 3600:
        return "<1m" if s < 60 else f"{int(s // 60)}m"
    if s < 60:
        return f"{int(s)}s"
    if s < 3600:
        return f"{int(s // 60)}m{int(s % 60):02d}s" if s < 600 else f"{int(s // 60)}m"
    if s < 86400:
        return f"{s / 3600:.1f}h"
    return f"{s / 86400:.1f}d"


def _ts(t: datetime | None) -> float | None:
    if t is None:
        return None
    try:
        return t.timestamp()
    except (OverflowError, OSError, ValueError):
        return None


@dataclass
class JobSummary:
    """The job as the engine sees it, computed in the engine's parse thread (``Engine.call``)."""

    ranks: list[int] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)
    attempt: int = 0
    rank_node: dict[int, str] = field(default_factory=dict)
    rank_sources: dict[int, list[str]] = field(default_factory=dict)  # per-rank files
    last_log: dict[int, float] = field(default_factory=dict)  # rank -> log time of its last line
    last_any: float | None = None  # log time of the newest timestamped line, with or without a rank
    rank_map: dict[tuple, int] = field(default_factory=dict)  # (node_key, local) -> global rank
    kinds: dict[str, str] = field(default_factory=dict)  # source path -> kind
    sources: int = 0
    lines: int = 0
    markers: list[tuple[str, str, int, int | None, float | None]] = field(default_factory=list)  # new ones
    findings: list[Finding] = field(default_factory=list)  # merged, best copy of each (job.findings())
    incidents: list[Incident] = field(default_factory=list)  # the engine's latest triage
    failure_entries: list = field(default_factory=list)  # torchelastic's failure reports (Root Cause)
    first_errors: dict = field(default_factory=dict)  # rank -> core.firsterror.FirstError (its own first error line)
    attempts: int = 1


@dataclass
class RankRow:
    rank: int
    node: str | None = None
    source: str | None = None
    last_seen: float | None = None  # wall time of its last line (arrival, else the log's time)
    first_error: Finding | None = None
    first_line: Any = None  # core.firsterror.FirstError: its own first error line (time, approx)
    roles: set[str] = field(default_factory=set)
    warnings: int = 0
    exited: bool = False
    stalled: float | None = None  # seconds silent, from the engine's stall detector
    initiating: bool = False

    @property
    def state(self) -> str:
        if self.initiating:
            return "initiating"
        if "initiating" in self.roles:
            return "error"
        if "collateral" in self.roles:
            return "collateral"
        if self.exited:
            return "exited"
        if self.stalled is not None:
            return "silent"
        if self.warnings:
            return "warn"
        return "ok"


@dataclass
class FindingGroup:
    key: tuple
    signature: str
    title: str
    role: str
    severity: str
    attempt: int
    ranks: set[int] = field(default_factory=set)
    unranked: int = 0
    count: int = 0
    first: Finding | None = None  # the earliest (the one shown in the fix panel)

    @property
    def rank_text(self) -> str:
        return ranks_word(self.ranks, "no rank")

    @property
    def is_error(self) -> bool:
        return self.severity == "error"


class WatchState:
    """Display state; updated only by the app's message handlers."""

    def __init__(self) -> None:
        self.findings: dict[tuple, Finding] = {}
        self.groups: dict[tuple, FindingGroup] = {}
        self.incidents: list[Incident] = []
        self.ranks: dict[int, RankRow] = {}
        self.summary = JobSummary()
        self.root: str | None = None  # common folder of the sources (for short paths)
        self.last_line: float | None = None  # wall time of the newest line, ranked or not (arrival, else log time)
        self.version = 0  # bumped on every change the screen must show
        self.history: tuple[int, int] | None = None  # (bytes read, total) while the history is read
        self.history_complete = False
        self.history_sources: int | None = None  # files found so far (0: still finding them)

    # -- events -----------------------------------------------------------------------------

    @staticmethod
    def finding_key(f: Finding) -> tuple:
        return (f.attempt, f.rank if f.rank is not None else (f.path, f.local_rank), f.signature,
                f.exc_type if f.signature == "python.uncaught-exception" else None)

    def add_findings(self, fs: list[Finding]) -> None:
        changed = False
        for f in fs:
            k = self.finding_key(f)
            cur = self.findings.get(k)
            if cur is not None and cur.priority >= f.priority:
                continue
            self.findings[k] = f
            changed = True
        if changed:
            self._regroup()
            self.version += 1

    def set_incidents(self, incidents: list[Incident]) -> None:
        self.incidents = list(incidents)
        for inc in incidents:  # the incident's copies are the best ones (per-rank file)
            for f in ([inc.initiating] if inc.initiating else []) + inc.same_cause + inc.collateral:
                k = self.finding_key(f)
                cur = self.findings.get(k)
                if cur is None or f.priority >= cur.priority:
                    self.findings[k] = f
        self._regroup()
        self.version += 1

    def _regroup(self) -> None:
        groups: dict[tuple, FindingGroup] = {}
        for f in sorted(self.findings.values(), key=lambda f: f.sort_key()):
            gk = (f.attempt, f.signature, f.role)
            g = groups.get(gk)
            if g is None:
                g = groups[gk] = FindingGroup(gk, f.signature, f.title, f.role, f.severity, f.attempt, first=f)
            if f.rank is not None:
                g.ranks.add(f.rank)
            else:
                g.unranked += 1
            g.count += f.count
        self.groups = groups
        for row in self.ranks.values():
            row.roles.clear()
            row.first_error = None
            row.warnings = 0
            row.initiating = False
        for f in self.findings.values():
            if f.rank is None:
                continue
            row = self.rank(f.rank)
            if f.severity == "error" and f.role in ("initiating", "collateral"):
                row.roles.add(f.role)
                if row.first_error is None or f.sort_key() < row.first_error.sort_key():
                    row.first_error = f
            elif f.severity == "warning":
                row.warnings += 1
        inc = self.incident
        if inc is not None:
            for f in ([inc.initiating] if inc.initiating else []):
                if f.rank is not None:
                    self.rank(f.rank).initiating = True

    def rank(self, r: int) -> RankRow:
        row = self.ranks.get(r)
        if row is None:
            row = self.ranks[r] = RankRow(r)
        return row

    def set_summary(self, s: JobSummary, now: float) -> None:
        self.summary = s
        if s.last_any is not None:
            t = min(s.last_any, now)
            self.last_line = t if self.last_line is None else max(self.last_line, t)
        if s.findings:  # the job's merged view replaces the first-arrived copies of the events
            self.findings = {self.finding_key(f): f for f in s.findings}
        if s.incidents:
            self.incidents = list(s.incidents)
        self._regroup()
        for r in s.ranks:
            row = self.rank(r)
            node = s.rank_node.get(r)
            if node is not None:
                row.node = safe_str(node)  # a folder or host name: shown, so made safe here
            srcs = s.rank_sources.get(r)
            if srcs:
                row.source = self.short_source(srcs)
            t = s.last_log.get(r)
            if t is not None and (row.last_seen is None or t > row.last_seen):
                row.last_seen = min(t, now)
        for r, fe in s.first_errors.items():
            self.rank(r).first_line = fe
        self.version += 1

    def saw_lines(self, ranks_seen: dict[int, float], now: float | None = None) -> None:
        """Ranks that just spoke (live lines): their age counts from now, whatever their clock.
        ``now``: when lines arrived at all (a log without ranks has an age too)."""
        if now is not None:
            self.last_line = max(now, self.last_line or now)
        for r, t in ranks_seen.items():
            row = self.rank(r)
            if row.last_seen is None or t > row.last_seen:
                row.last_seen = t
        self.version += 1

    def reading(self, read: int, total: int, sources: int | None = None) -> None:
        self.history = (read, total)
        self.history_sources = sources
        self.version += 1

    def read_all(self, read: int, total: int) -> None:
        self.history = (read, total)
        self.history_complete = True
        self.version += 1

    @property
    def reading_history(self) -> bool:
        return self.history is not None and not self.history_complete

    def history_text(self) -> str:
        """``reading history 43 % · 84 of 196 MB`` until every file's history is read."""
        if not self.reading_history:
            return ""
        read, total = self.history
        if not total and self.history_sources == 0:
            # the files are still being found (2,000 rank folders): nothing is read yet, not 100 %
            return "finding the log files"
        pct = int(100 * read / total) if total else 100
        return f"reading history {pct} % · {_mb(read)} of {_mb(total)}"

    def process(self, rank: int | None, state: str) -> None:
        if rank is None:
            return
        self.rank(rank).exited = state == "exited"
        self.version += 1

    def stall(self, rank: Any, silent_s: float | None) -> None:
        if isinstance(rank, int):
            self.rank(rank).stalled = silent_s
            self.version += 1

    # -- views ------------------------------------------------------------------------------

    @property
    def story(self) -> Story | None:
        """The job's story across attempts (the same one ``scan`` tells)."""
        return job_story(self.incidents, self.summary.failure_entries, self.summary.attempts)

    @property
    def incident(self) -> Incident | None:
        """The job's root cause: the first attempt's initiating failure (a later attempt's
        generic error does not bury it)."""
        st = self.story
        return st.root if st is not None else None

    def ordered_groups(self) -> list[FindingGroup]:
        inc = self.incident
        init_key = (inc.attempt, inc.initiating.signature, inc.initiating.role) if inc and inc.initiating else None
        order = {"initiating": 0, "collateral": 2, "context": 3}

        def key(g: FindingGroup):
            first = g.first.sort_key() if g.first else (float("inf"),)
            return (g.key != init_key, g.attempt, not g.is_error, order.get(g.role, 1), first)

        return sorted(self.groups.values(), key=key)

    def short_source(self, paths: list[str]) -> str:
        if len(paths) == 1:
            p = paths[0]
        else:
            p = os.path.commonpath(paths).rstrip("/") + "/"
        if self.root and p.startswith(self.root.rstrip("/") + "/"):
            p = p[len(self.root.rstrip("/")) + 1:]
        p = safe_str(p)
        return p if len(p) <= 28 else "…" + p[-27:]

    def ages(self, now: float) -> dict[int, float | None]:
        return {r: (now - row.last_seen) if row.last_seen is not None else None for r, row in self.ranks.items()}

    def stands_out(self, now: float) -> set[int]:
        """Ranks whose silence stands out: the engine says so, or far behind their peers."""
        # a rank that already failed (or exited) is expected to be quiet: only a live one stands out
        out = {r for r, row in self.ranks.items() if row.stalled is not None and row.state == "silent"}
        ages = {r: a for r, a in self.ages(now).items() if a is not None}
        if len(ages) >= 2:
            med = statistics.median(ages.values())
            for r, a in ages.items():
                if a >= 30 and a >= med + 30 and self.ranks[r].state in ("ok", "warn"):
                    out.add(r)
        return out

    def shape_text(self) -> str:
        s = self.summary
        ranks = sorted(set(s.ranks) | set(self.ranks))
        if ranks:  # the ranges only while they are short: 2,000 ranks never fill the header
            parts = [count(len(ranks), "rank") + f" ({span(ranks)})"]
        else:
            parts = ["no rank in the lines" if s.lines else count(0, "rank")]
        if s.nodes:
            parts.append(count(len(s.nodes), "node"))
        parts.append(f"attempt {s.attempt}")
        found = self.history_sources
        if self.reading_history and found and s.sources < found:
            # the files found, while the reading is told beside it ("reading history 43 %"): the
            # sources finished so far lag the ranks counted so far (a 2,000-rank job said
            # "159 ranks (0-158) · 117 sources"; the 186 MB job "0 sources" at 60 %)
            parts.append(count(found, "source"))
        else:
            parts.append(count(s.sources, "source"))
        return " · ".join(parts)

    def story_lines(self) -> list[str]:
        """What goes under the headline: the restarts, and the launcher's other opinion."""
        st = self.story
        return [x for x in ((st.beneath, st.launcher_note) if st else ()) if x]

    def diagnosis(self, now: float) -> tuple[str, str]:
        """(level, one line): level is 'initiating', 'error', 'warn' or 'ok'."""
        st = self.story
        if st is not None:
            return ("initiating" if st.root.initiating else "error"), safe_str(st.headline)
        errors = [g for g in self.groups.values() if g.is_error]
        if errors:
            g = min(errors, key=lambda g: g.first.sort_key() if g.first else (float("inf"),))
            so_far = "so far: " if self.reading_history else ""
            return "error", safe_str(f"{so_far}{g.rank_text}: {g.title} (no incident yet)")
        if self.reading_history:
            return "ok", "no failure signature so far (the history is still being read)"
        if not self.ranks:
            if not self.summary.lines:
                return "ok", "waiting for log lines"
            age = f" · last line {fmt_age(now - self.last_line)} ago" if self.last_line is not None else ""
            return "ok", (f"healthy · no failure signature in {count(self.summary.lines, 'line')} "
                          f"(no rank in them){age}")
        ages = self.ages(now)
        known = {r: a for r, a in ages.items() if a is not None}
        silent = sorted(self.stands_out(now))
        if silent:
            r = silent[0]
            return "warn", f"rank {r} silent for {fmt_age(known.get(r))} while others log · {count(len(self.ranks), 'rank')}"
        if not known:
            return "ok", f"healthy · {count(len(self.ranks), 'rank')}"
        newest = min(known.values())
        oldest_r = max(known, key=lambda r: known[r])
        return "ok", (f"healthy · {count(len(self.ranks), 'rank')}, no failure signature · last line {fmt_age(newest)} ago"
                      + (f", quietest rank {oldest_r} {fmt_age(known[oldest_r])}" if len(known) > 1 else ""))


def _mb(n: int) -> str:
    return f"{n / 1e6:.0f} MB" if n >= 10e6 else f"{n / 1e6:.1f} MB"
