"""Each rank's own first error line, found while the history is read (no second read).

A rank's "first error" (the ranks pane) is the first line of its own files at ERROR (or
CRITICAL/FATAL) level with its own timestamp: an ``ERROR ... Checkpoint save failed`` line is
exact, even when the traceback after it has no timestamp. When the first error-looking line of a
file is an untimestamped traceback (torch's stderr), the rank's first error is known only to be
after its last timestamped line elsewhere: *approximate* (``≥`` on screen). Candidates are found
by one regular-expression search per chunk (C speed), and only they go through the door.
"""

from __future__ import annotations

from dataclasses import dataclass

import re2

from .lines.chunk import newlines
from .lines.facts import line_facts
from .patterns import LineScan

__all__ = ["FirstError", "FirstErrorMixin"]

_WORDS = (r"\bERROR\b", r"\bCRITICAL\b", r"\bFATAL\b", r"[EF]\d{4} \d\d:\d\d:\d\d", r"Traceback \(most")
# the lines holding one, over a whole chunk (Hyperscan: about 5x RE2's speed on a rank's 8 MB
# chunk with none, the usual case until the failure), then the line's first one (RE2)
_CANDIDATE = re2.compile("|".join(_WORDS).encode())
_LINES = LineScan(_WORDS, regex=True)
_HEAD = 160  # a level word further into its line is text, not the line's level


@dataclass(frozen=True)
class FirstError:
    rank: int
    time: float
    approx: bool
    source: str
    line: int  # 1-based


class FirstErrorMixin:
    """``first_error``: (line, epoch or None for an untimed traceback) of the source's first error."""

    def look_first_error(self, data: bytes, first_line: int) -> None:
        counted, line = 0, first_line
        for s in _LINES.line_starts(data):
            e = data.find(b"\n", s)
            raw = data[s:e if e >= 0 else len(data)]
            m = _CANDIDATE.search(raw)  # the line's first (a match never spans a newline)
            if m is None or m.start() > _HEAD:
                continue
            line += newlines(data, counted, s)
            counted = s
            f = line_facts(raw[:512], self.year_hint)
            if f.text.startswith("Traceback (most") and f.time is None:
                self.first_error = (line, None)
                return
            if f.level in ("error", "critical") and f.epoch is not None:
                self.first_error = (line, f.epoch)
                return
