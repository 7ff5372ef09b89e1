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

# A glog/c10 error line's head (``E1205 01:02:03``, ``[rank0]:[E1205 ...``) is spelt with the
# digits each field can hold, as the door's glog format does: with ``\d{4} \d\d:`` Hyperscan
# scanned a rank's chunk at 0.38 ns a byte for this word alone, with the fields' ranges 0.18.
ERROR_LINE_WORDS = (r"\bERROR\b", r"\bCRITICAL\b", r"\bFATAL\b", r"[EF][01]\d[0-3]\d [0-2]\d:[0-5]\d:[0-6]\d",
                    r"Traceback \(most")
# the lines holding one, over a whole chunk (the matcher's prefilter finds them in the same pass
# where it can: Matcher.CHUNK_GROUPS; else Hyperscan here: about 5x RE2's speed on a rank's 8 MB
# chunk with none, the usual case until the failure), then the line's first one (RE2)
_CANDIDATE = re2.compile("|".join(ERROR_LINE_WORDS).encode())
_LINES = LineScan(ERROR_LINE_WORDS, regex=True)
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

    def look_first_error(self, data: bytes, first_line: int, starts: list[int] | None = None) -> None:
        """``starts``: the chunk's lines that hold an error word, when the prefilter's pass found
        them (else they are looked for here)."""
        counted, line = 0, first_line
        for s in (starts if starts is not None else _LINES.line_starts(data)):
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
