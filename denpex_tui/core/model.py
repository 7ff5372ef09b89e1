"""The domain model shared by scan, follow, watch and the tests.

Everything here is plain data: no I/O, no UI. Text fields hold *safe* text (see
:mod:`denpex_tui.core.text`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .text import safe_str

__all__ = [
    "SourceInfo",
    "Finding",
    "FailureEntry",
    "LastLine",
    "StopMark",
    "Marker",
    "Incident",
    "iso",
    "finding_key",
    "cause_key",
    "incident_key",
]

# How much a copy of a line is trusted to be "the" copy, when the same line reaches Denpex
# twice: a per-rank file beats a --tee console, which beats error.json, which beats the
# agent's failure block.
PRIORITY_RANK_FILE = 3
PRIORITY_CONSOLE = 2
PRIORITY_ERROR_JSON = 1
PRIORITY_FAILURE_BLOCK = 0


def iso(t: datetime | None) -> str | None:
    if t is None:
        return None
    return t.isoformat(timespec="milliseconds")


@dataclass
class SourceInfo:
    """One input stream (a file, a rotated file, error.json, an --exec command)."""

    path: str
    kind: str  # "rank-file" | "console" | "error-json" | "exec" | "fr-dump" | "ras" (evidence, not lines)
    node_key: str | None = None  # sources of one node share it (a folder)
    attempt: int | None = None  # torchrun attempt_N folder
    local_rank: int | None = None  # torchrun attempt_N/<local>/ folder
    file_rank: int | None = None  # global rank from the file name (rank3.log, %j-%t.out)
    exec_rank: int | None = None  # --exec 3='...'
    order: int = 0  # position on the command line, for stable ordering
    history_only: bool = False  # rotated/compressed copies
    size: int = 0  # bytes at discovery
    also_ras: bool = False  # a log that holds an NCCL RAS report: read as lines and as a report

    @property
    def priority(self) -> int:
        if self.kind in ("rank-file", "exec"):
            return PRIORITY_RANK_FILE
        if self.kind == "console":
            return PRIORITY_CONSOLE
        if self.kind == "error-json":
            return PRIORITY_ERROR_JSON
        return PRIORITY_FAILURE_BLOCK


@dataclass(slots=True)
class Finding:
    """One signature seen on one rank (repeats of it are counted, not listed)."""

    signature: str
    title: str
    role: str
    severity: str
    phase: str
    family: str
    path: str
    line: int  # 1-based: first line of the rank's report (traceback start or the line)
    text_line: int  # 1-based: the line that carries the signature
    offset: int  # byte offset of the text line
    text: str  # safe text of the line carrying the signature (prefixes stripped)
    raw_text: str = ""  # safe text of that line as written (with prefixes)
    rank: int | None = None
    local_rank: int | None = None
    node_key: str | None = None
    node: str | None = None
    host: str | None = None
    attempt: int = 0
    time: datetime | None = None
    time_text: str | None = None
    time_approx: bool = False  # time taken from the rank's previous line
    count: int = 1
    priority: int = 3
    source_order: int = 0
    exc_type: str | None = None
    origin_frame: str | None = None
    traceback_start: int | None = None
    chained: list[str] = field(default_factory=list)  # later exceptions of the same chain
    extra: dict[str, Any] = field(default_factory=dict)
    fields: dict[str, Any] = field(default_factory=dict)  # named facts: errno, path, signal, exc_type...
    builtin: bool = True
    spans: tuple = ()

    def sort_key(self) -> tuple:
        t = self.time.timestamp() if self.time is not None and self.time.tzinfo else (
            self.time.replace(tzinfo=None).timestamp() if self.time is not None else float("inf")
        )
        return (t, self.source_order, self.text_line)

    def to_json(self) -> dict[str, Any]:
        return {
            "signature": self.signature,
            "title": self.title,
            "role": self.role,
            "severity": self.severity,
            "phase": self.phase,
            "rank": self.rank,
            "local_rank": self.local_rank,
            "node": self.node,
            "attempt": self.attempt,
            "path": safe_str(self.path),
            "line": self.line,
            "text_line": self.text_line,
            "time": iso(self.time),
            "time_approx": self.time_approx,
            "text": self.text,
            "count": self.count,
            "exception": self.exc_type,
            "origin_frame": self.origin_frame,
            "fields": {k: (safe_str(v) if isinstance(v, str) else v) for k, v in self.fields.items()},
        }


@dataclass
class FailureEntry:
    """One entry of torchelastic's ChildFailedError report (a launcher summary: evidence,
    never trusted as the diagnosis)."""

    rank: int
    local_rank: int | None
    exitcode: int | None
    pid: int | None
    host: str | None
    time: datetime | None
    error_file: str | None
    root_cause: bool
    node_key: str | None
    path: str
    line: int
    attempt: int = 0


@dataclass
class LastLine:
    """The last progress line (one with a timestamp) of a rank's stream."""

    path: str
    line: int
    offset: int
    text: str
    time: datetime | None
    key_local: int | None
    key_rank: int | None
    node_key: str | None
    attempt: int
    priority: int


@dataclass
class StopMark:
    """Where a rank's stream last showed its progress: the last line with a progress counter
    (a tqdm bar as last drawn, a step line), with the counter (:mod:`.lines.progress`)."""

    path: str
    line: int
    offset: int
    text: str
    step: int
    total: int | None
    kind: str  # "bar" | "step"
    time: datetime | None
    key_local: int | None
    key_rank: int | None
    node_key: str | None
    attempt: int
    priority: int

    def progress(self):
        from .lines.progress import Progress

        return Progress(self.step, self.total, self.kind)


@dataclass
class Marker:
    """A context line the engine cares about (versions, checkpoint saves, paths)."""

    signature: str
    path: str
    line: int
    text: str
    rank: int | None
    local_rank: int | None
    node_key: str | None
    attempt: int
    time: datetime | None


@dataclass
class Incident:
    attempt: int
    initiating: Finding | None
    collateral: list[Finding]
    same_cause: list[Finding]
    first_warning: dict[str, Any] | None
    confidence: str
    evidence: list[str]
    summary: str
    unmapped: list[str] = field(default_factory=list)
    # Runner-up candidates and the rule that ranked each lower ("a nearby failure remains a
    # competing hypothesis until a control separates them").
    hypotheses: list[dict[str, Any]] = field(default_factory=list)
    # Decided before every source's history was read: "so far", never of high confidence.
    provisional: bool = False
    # What the logs alone said, when other evidence (Flight Recorder dumps, NCCL RAS) changed it
    logs_alone: str | None = None
    # The collective table from the dumps (core/frtrace.FRReport.to_json), when there are dumps
    collectives: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        def fj(f: Finding) -> dict[str, Any]:
            return {
                "signature": f.signature,
                "title": f.title,
                "role": f.role,
                "rank": f.rank,
                "node": f.node,
                "path": safe_str(f.path),
                "line": f.line,
                "time": iso(f.time),
                "time_approx": f.time_approx,
                "text": f.text,
                "count": f.count,
                "fields": {k: (safe_str(v) if isinstance(v, str) else v) for k, v in f.fields.items()},
            }

        def hj(h: dict[str, Any]) -> dict[str, Any]:
            return {k: (safe_str(v) if isinstance(v, str) else v) for k, v in h.items()}

        return {
            "attempt": self.attempt,
            "initiating": fj(self.initiating) if self.initiating else None,
            "collateral": [fj(f) for f in self.collateral],
            "same_cause": [fj(f) for f in self.same_cause],
            "first_warning": self.first_warning,
            "confidence": self.confidence,
            "evidence": list(self.evidence),
            "summary": self.summary,
            "hypotheses": [hj(h) for h in self.hypotheses],
            "provisional": self.provisional,
            **({"logs_alone": self.logs_alone} if self.logs_alone else {}),
            **({"collectives": self.collectives} if self.collectives else {}),
        }


def finding_key(f: Finding) -> tuple:
    """A finding's identity in the job: one per attempt, rank and signature (and exception type,
    for an uncaught exception); without a global rank, per file and local rank. Every copy of
    the same line (a console's, a per-rank file's, error.json's) has the same key."""
    return (f.attempt, f.rank if f.rank is not None else (f.path, f.local_rank), f.signature,
            f.exc_type if f.signature == "python.uncaught-exception" else None)


def cause_key(i: Incident) -> tuple:
    """What an incident says failed first: its initiating finding's copy included (the console's
    line replaced by the per-rank file's is a change, so every screen points at the same line)."""
    init = i.initiating
    if init is None:
        return (i.attempt, None, None, None, None)
    return (i.attempt, init.signature, init.rank, init.path, init.line)


def incident_key(i: Incident) -> tuple:
    """The diagnosis's whole identity: its cause, its collateral, its confidence and whether it
    is still provisional (the history not read to its end)."""
    return (
        *cause_key(i),
        tuple(sorted((c.rank if c.rank is not None else -1, c.signature) for c in i.collateral)),
        tuple(sorted(s.rank if s.rank is not None else -1 for s in i.same_cause)),
        i.confidence,
        i.provisional,
    )
