"""Where a signature was seen (the pipeline's context object) and a finding's identity in a
source."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

__all__ = ["Hit", "StreamKey", "finding_agg"]

StreamKey = tuple  # ("l", local) | ("t", task) | ("h", host) | ("g", rank) | ("fb", idx) | None


@dataclass(slots=True)
class Hit:
    """Where a signature was seen: the line carrying it and its report's first line."""

    text: str  # safe text, prefixes removed
    raw_text: str  # safe text as written
    line: int  # the report's first line (traceback header, or the line itself)
    text_line: int  # the line carrying the signature
    offset: int  # byte offset of the text line
    rank: int | None
    local: int | None
    host: str | None
    time: datetime | None
    time_text: str | None
    key: StreamKey
    time_approx: bool = False
    extras: dict[str, Any] = field(default_factory=dict)  # exc_type, origin, tb_start, chained, extra


def finding_agg(attempt: int, key: StreamKey, rank, local, signature: str, exc_type: str | None) -> tuple:
    """A processor's identity of a finding (one per stream): repeats of it are counted."""
    return (attempt, key, rank, local, signature, exc_type if signature == "python.uncaught-exception" else None)


