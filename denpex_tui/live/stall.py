"""Silence is a signal: detect the rank that stopped logging while its peers did not.

Pure logic, times injected (no clock, no I/O): feed ``observe(rank, node, t)`` for
each live line (or chunk) of a rank, call ``check(now)`` about once a second, get
``StallEvent`` / ``StallCleared`` back.  Use arrival times (``time.monotonic()``) of
live lines; do not feed the start-up history.

The rule
--------
*Cadence.*  Lines closer than ``burst_gap_s`` (1 s) to the previous one belong to the
same burst (a step log often prints several lines at once).  A rank's cadence is the
median of its last ``window`` (16) gaps of at least ``burst_gap_s``, once it has
``min_gaps`` (3) of them.  A rank that logs continuously (``continuous_lines`` lines
over ``continuous_span_s`` seconds without such gaps) has cadence ``burst_gap_s``.  A
rank whose own cadence is not known yet borrows the median cadence of its peers (so a
rank that hangs at start-up, after two lines, is still caught); ``register()`` adds a
rank that has not logged at all.

*Threshold.*  ``max(floor_s, k * cadence)``: ``k`` = 5 intervals, at least 10 s.

*Stall of one rank.*  Rank r is stalled when it has been silent for at least its
threshold **and** at least ``peer_quorum`` (half) of the other ranks logged at least
``max(cadence_r, min_lead_s)`` after r's last line.  So r is named when its peers go on
without it (reason ``"peers-continue"``: some peer logged within about two of its own
intervals), and also when they stopped shortly after it, waiting for it in a
collective (reason ``"first-to-stop"``): the first to stop is the suspect.
Ranks that stop together (within the lead) are not told apart: no rank is named.

*Job-wide stall.*  When every rank with a known cadence is past its threshold, one
``StallEvent(rank=None, reason="all-silent")`` is raised (``job_wide=True``); it
clears when any rank logs again.  This also fires at the end of a job or during a
long checkpoint/eval pause: the consumer should cross-check with process exits.

*Clearing.*  A stalled rank that logs again gives ``StallCleared(rank)`` at the next
``check``.
"""

from __future__ import annotations

import bisect
import statistics
from collections import deque
from dataclasses import dataclass
from typing import Any, Hashable

__all__ = ["StallDetector", "StallEvent", "StallCleared"]


@dataclass(slots=True)
class StallEvent:
    rank: Any  # None for a job-wide stall
    node: str | None
    silent_s: float
    reason: str  # "peers-continue" | "first-to-stop" | "all-silent"
    cadence_s: float | None = None
    time: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"event": "stall", "rank": self.rank, "node": self.node, "silent_s": round(self.silent_s, 1),
                "reason": self.reason}


@dataclass(slots=True)
class StallCleared:
    rank: Any
    node: str | None = None
    silent_s: float = 0.0  # how long it had been silent when it logged again
    time: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"event": "stall-cleared", "rank": self.rank}


class _Rank:
    __slots__ = ("node", "first", "last", "lines", "gaps", "stalled", "cleared_silent")

    def __init__(self, node: str | None, t: float, window: int) -> None:
        self.node = node
        self.first = t
        self.last = t
        self.lines = 0
        self.gaps: deque[float] = deque(maxlen=window)
        self.stalled = False
        self.cleared_silent: float | None = None


class StallDetector:
    def __init__(
        self,
        *,
        k: float = 5.0,
        floor_s: float = 10.0,
        burst_gap_s: float = 1.0,
        min_gaps: int = 3,
        window: int = 16,
        continuous_lines: int = 20,
        continuous_span_s: float = 5.0,
        min_lead_s: float = 1.0,
        peer_quorum: float = 0.5,
        job_wide: bool = True,
    ) -> None:
        self.k = k
        self.floor_s = floor_s
        self.burst_gap_s = burst_gap_s
        self.min_gaps = min_gaps
        self.window = window
        self.continuous_lines = continuous_lines
        self.continuous_span_s = continuous_span_s
        self.min_lead_s = min_lead_s
        self.peer_quorum = peer_quorum
        self.job_wide = job_wide
        self._ranks: dict[Hashable, _Rank] = {}
        self._job_stalled = False
        self._job_cleared: float | None = None
        self._job_since = 0.0

    # -- input -------------------------------------------------------------------
    def register(self, rank: Hashable, node: str | None, t: float) -> None:
        """Declare a rank (e.g. from its log file) before it logs: silent since ``t``."""
        if rank not in self._ranks:
            self._ranks[rank] = _Rank(node, t, self.window)

    def observe(self, rank: Hashable, node: str | None, t: float) -> None:
        s = self._ranks.get(rank)
        if s is None:
            s = self._ranks[rank] = _Rank(node, t, self.window)
            s.lines = 1
        else:
            gap = t - s.last
            if gap >= self.burst_gap_s and s.lines > 0:
                s.gaps.append(gap)
            if s.stalled and s.cleared_silent is None:
                s.cleared_silent = gap
            if t > s.last:
                s.last = t
            s.lines += 1
            if node is not None:
                s.node = node
        if self._job_stalled and self._job_cleared is None:
            self._job_cleared = t - self._job_since

    # -- cadence -------------------------------------------------------------------
    def cadence(self, rank: Hashable) -> float | None:
        s = self._ranks.get(rank)
        return None if s is None else self._own_cadence(s)

    def _own_cadence(self, s: _Rank) -> float | None:
        if len(s.gaps) >= self.min_gaps:
            return max(self.burst_gap_s, statistics.median(s.gaps))
        if s.lines >= self.continuous_lines and s.last - s.first >= self.continuous_span_s:
            return self.burst_gap_s
        return None

    def threshold(self, cadence: float) -> float:
        return max(self.floor_s, self.k * cadence)

    # -- output --------------------------------------------------------------------
    def check(self, now: float) -> list[StallEvent | StallCleared]:
        out: list[StallEvent | StallCleared] = []
        for r, s in self._ranks.items():
            if s.stalled and s.cleared_silent is not None:
                out.append(StallCleared(r, s.node, s.cleared_silent, now))
                s.stalled = False
                s.cleared_silent = None
        if self._job_stalled and self._job_cleared is not None:
            out.append(StallCleared(None, None, self._job_cleared, now))
            self._job_stalled = False
            self._job_cleared = None
        if len(self._ranks) < 2:
            return out
        own = {r: self._own_cadence(s) for r, s in self._ranks.items()}
        known = [c for c in own.values() if c is not None]
        if not known:
            return out
        peer_cad = statistics.median(known)
        lasts = sorted(s.last for s in self._ranks.values())
        n_others = len(lasts) - 1
        all_silent = True
        for r, s in self._ranks.items():
            cad = own[r] if own[r] is not None else peer_cad
            silent = now - s.last
            if silent < self.threshold(cad):
                all_silent = False
                continue
            if s.stalled:
                continue
            lead = max(cad, self.min_lead_s)
            after = len(lasts) - bisect.bisect_left(lasts, s.last + lead)
            if after >= max(1, self.peer_quorum * n_others):
                # a peer still "goes on" if it logged within about two of its intervals
                active = any(
                    now - o.last <= 2 * (own[q] if own[q] is not None else peer_cad) + self.burst_gap_s
                    for q, o in self._ranks.items() if q != r
                )
                s.stalled = True
                s.cleared_silent = None
                out.append(StallEvent(r, s.node, silent, "peers-continue" if active else "first-to-stop", cad, now))
        if self.job_wide and all_silent and not self._job_stalled:
            self._job_stalled = True
            self._job_cleared = None
            self._job_since = lasts[-1]
            out.append(StallEvent(None, None, now - lasts[-1], "all-silent", peer_cad, now))
        return out

    @property
    def stalled(self) -> list[Hashable]:
        return [r for r, s in self._ranks.items() if s.stalled]
