"""What the live engine yields, besides the tailer's ``SourceEvent``/``ProcessEvent`` and the
silence detector's ``StallEvent``/``StallCleared``: its output vocabulary, one place.

* ``FindingEvent``     a new finding, as soon as its line (or its traceback) is complete;
* ``IncidentEvent``    each time the diagnosis changes (bounded ``to_dict``);
* ``LinesEvent``       new lines for a log view (``LogLine`` each; only with ``keep_lines``);
* ``HistoryProgress``  how far the history pass is; ``HistoryDone`` when it has read every
  file found at start (the diagnosis is no longer provisional).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from denpex_tui.core.lines.index import FileIndex
from denpex_tui.core.model import Finding, Incident, SourceInfo
from denpex_tui.core.ranks import rank_ranges

__all__ = ["FindingEvent", "IncidentEvent", "LinesEvent", "LogLine", "HistoryProgress", "HistoryDone"]

_MAX_EVENT_COLLATERAL = 20


@dataclass(slots=True)
class FindingEvent:
    finding: Finding

    def to_dict(self) -> dict[str, Any]:
        return {"event": "finding", **self.finding.to_json()}


@dataclass(slots=True)
class IncidentEvent:
    incident: Incident
    incidents: list[Incident]

    def to_dict(self) -> dict[str, Any]:
        """A bounded incident: the first collateral entries in full, all of them folded into
        rank ranges per signature (10 000 collateral ranks stay a few lines of JSON).
        ``provisional``: decided before the history was read to its end."""
        d = self.incident.to_json()
        for key, lst in (("collateral", self.incident.collateral), ("same_cause", self.incident.same_cause)):
            if len(lst) > _MAX_EVENT_COLLATERAL:
                folded: dict[str, list] = {}
                for c in lst:
                    folded.setdefault(c.signature, []).append(c.rank)
                d[key] = d[key][:_MAX_EVENT_COLLATERAL]
                d[f"{key}_folded"] = [{"signature": k, "ranks": rank_ranges(v), "count": len(v)}
                                      for k, v in folded.items()]
                d[f"{key}_total"] = len(lst)
        return {"event": "incident", **d}


@dataclass(slots=True)
class LogLine:
    source: str
    line: int
    text: str
    spans: tuple
    rank: int | None
    local: int | None
    node_key: str | None
    arrival: float


@dataclass(slots=True)
class LinesEvent:
    lines: list[LogLine]
    history: bool = False  # lines that were in the files before following began


@dataclass(slots=True)
class HistoryProgress:
    """How far the history is read (bytes of the files found at start)."""

    read: int
    total: int
    sources_done: int
    sources: int

    def to_dict(self) -> dict[str, Any]:
        return {"event": "history", "read": self.read, "total": self.total, "sources_done": self.sources_done,
                "sources": self.sources, "complete": False}


@dataclass
class HistoryDone:
    """Every file found at start is read to its end: the diagnosis is no longer provisional."""

    read: int
    total: int
    since_start: float  # wall seconds from the process start to the end of the pass
    indexes: dict[str, FileIndex] = field(default_factory=dict)  # path -> line index (the view's)
    infos: dict[str, SourceInfo] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"event": "history", "read": self.read, "total": self.total, "complete": True,
                "since_start_s": round(self.since_start, 3)}
