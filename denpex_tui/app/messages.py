"""Messages from the workers (engine feed, probes, explain, fix panel) to the app.

Workers only post these; the app's handlers own every state change.
"""

from __future__ import annotations

from typing import Any

from textual.message import Message

__all__ = ["EngineBatch", "EngineDone", "ProbeUpdate", "Measured", "FixReady", "ExplainReady", "TimelineChanged",
           "ViewReady", "SearchDone", "LevelsDone"]


class EngineBatch(Message):
    """Engine events of the last ~100 ms, and the job summary when it changed."""

    def __init__(self, events: list[Any], summary: Any | None) -> None:
        super().__init__()
        self.events = events
        self.summary = summary


class EngineDone(Message):
    def __init__(self, error: str | None) -> None:
        super().__init__()
        self.error = error


class ProbeUpdate(Message):
    """The latest probe snapshot and trends: latest value wins (a queued one is replaced)."""

    def __init__(self, snapshot: Any, path_trends: dict[str, Any], proc_trends: dict[int, Any], *,
                 ties: dict[int, str] | None = None, others: list | None = None) -> None:
        super().__init__()
        self.snapshot = snapshot
        self.path_trends = path_trends
        self.proc_trends = proc_trends
        self.ties = ties  # pid -> how the process was tied to the job (None: not discovered)
        self.others = others or []  # training processes here that are not the job's

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, ProbeUpdate)


class Measured(Message):
    """Checklist metrics (and the ENOSPC/EMFILE differential) for one finding."""

    def __init__(self, key: Any, metrics: dict[str, float | None], differential: Any | None) -> None:
        super().__init__()
        self.key = key
        self.metrics = metrics
        self.differential = differential


class FixReady(Message):
    def __init__(self, key: Any, finding: Any, panel: Any, differential: Any | None, origin: str) -> None:
        super().__init__()
        self.key = key
        self.finding = finding
        self.panel = panel
        self.differential = differential
        self.origin = origin  # "incident" | "finding" | "explain"


class ExplainReady(Message):
    def __init__(self, anchor: int, explanation: Any, source: str, first_line: int, last_line: int) -> None:
        super().__init__()
        self.anchor = anchor  # sequence number of the log line the explanation goes under
        self.explanation = explanation
        self.source = source
        self.first_line = first_line
        self.last_line = last_line


class TimelineChanged(Message):
    """The merged timeline has ``rows`` lines (latest value wins)."""

    def __init__(self, rows: int, built: bool, error: str | None = None, retag: bool = False) -> None:
        super().__init__()
        self.rows = rows
        self.built = built
        self.error = error
        self.retag = retag  # the ranks rows show changed: drawn rows are drawn again

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, TimelineChanged) and message.error is None


class ViewReady(Message):
    def __init__(self, view: Any, rank: int | None, hide_copies: bool) -> None:
        super().__init__()
        self.view = view
        self.rank = rank
        self.hide_copies = hide_copies


class SearchDone(Message):
    def __init__(self, gen: int, query: Any, matches: Any) -> None:
        super().__init__()
        self.gen = gen
        self.query = query
        self.matches = matches  # sorted merged rows (seqs) that match, and whether the list is whole


class LevelsDone(Message):
    """The rows of every error (or warning) line of the timeline when it had ``rows`` rows."""

    def __init__(self, kind: str, rows: int, matches: Any) -> None:
        super().__init__()
        self.kind = kind
        self.rows = rows
        self.matches = matches
