"""The one place where ``watch`` asks the core what a log line says about itself.

Everything in ``app/`` that needs the rank, the local rank or the time of a line calls
:func:`line_facts`; when the core's line parser changes, this function is the only one to
change.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from denpex_tui.core.lineparse import parse_level, parse_prefix, parse_time

__all__ = ["LineFacts", "line_facts"]


@dataclass(slots=True)
class LineFacts:
    rank: int | None  # global rank the line itself names ([rankN], an srun label, DeepSpeed [Rank N])
    local: int | None  # torchrun's [defaultN] local rank
    time: float | None  # the line's own timestamp (epoch seconds), None when it has none
    level: str | None = None  # "error", "warning", ... when the line says (with ``level=True``)


def _epoch(dt: datetime | None) -> float | None:
    if dt is None:
        return None
    try:
        return dt.timestamp()
    except (OverflowError, OSError, ValueError):
        return None


def line_facts(text: str, year_hint: int | None = None, *, level: bool = False) -> LineFacts:
    """Rank, local rank, time (and with ``level`` the level) of one (already safe) line,
    through the core's parser."""
    p = parse_prefix(text)
    rank = p.rank if p.rank is not None else p.task
    return LineFacts(rank, p.local_rank, _epoch(parse_time(p.text, year_hint)[0]),
                     parse_level(p.text) if level else None)
