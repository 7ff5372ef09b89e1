"""Python tracebacks as a stream of lines: the walk mode of a source.

A ``Traceback (most recent call last):`` header opens a block on its stream (a rank's lines in a
console stay apart); frames, the exception line, its continuation lines and chained
exceptions (``During handling ...``, ``The above exception was the direct cause ...``,
DataLoader's ``Original Traceback``) follow until the block is complete. The original exception
of a chain decides the signature unless a later one is more specific (an errno or a known
signature explaining a bare exception); the block's first line becomes the finding's ``line``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime

from .catalog import Signature
from .hit import Hit
from .matcher import ANCHORS, Detection
from .where import where_hits

__all__ = ["TracebackMixin", "TB_HEADER", "ORIG_TB_HEADER"]

_TB = ANCHORS["traceback"]
_ORIG_TB = "Original Traceback (most recent call last):"
_CHAIN = (ANCHORS["chain-during"], ANCHORS["chain-cause"])
# CPython folds a recursion's frames: "  [Previous line repeated 996 more times]" is a frame line
# (traceback.py _RECURSIVE_CUTOFF), not the exception.
_REPEATED = re.compile(r"^\s*\[Previous line repeated \d+ more times?\]\s*$")
_EXC_LINE = re.compile(r"^(?P<type>[A-Za-z_][\w.]*)(?::(?: |$)|$)")
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]*)", line (?P<line>\d+), in (?P<func>.+)$')
QUIET_LINES = 20_000  # a rank's traceback lines, however interleaved with a big job's others, are nearer
_MAX_BLOCK_LINES = 400
_MAX_CONTINUATION = 30
TB_HEADER, ORIG_TB_HEADER = _TB, _ORIG_TB

StreamKey = tuple


@dataclass
class _Exc:
    type: str
    text: str
    raw: str
    line: int
    offset: int
    det: Detection | None
    original: bool = False
    origin: str | None = None  # the last frame printed before this exception
    detail_sigs: list[tuple[Detection, str, int, int]] = field(default_factory=list)
    where: list[str] = field(default_factory=list)  # core/where.py entries its frames match, innermost first

    @property
    def sig(self) -> Signature | None:
        return self.det.sig if self.det is not None else None


@dataclass
class _Block:
    key: StreamKey
    start_line: int
    start_offset: int
    rank: int | None
    local: int | None
    host: str | None
    time: datetime | None
    time_approx: bool
    state: str = "frames"  # frames | after | chain
    exceptions: list[_Exc] = field(default_factory=list)
    origin_frame: str | None = None
    nlines: int = 0
    blanks: int = 0
    continuation: int = 0
    pending_original: bool = False
    rank_override: int | None = None
    priority: int | None = None
    end_line: int = 0  # last line of the block that belongs to it (exception or its message)
    where: list[str] = field(default_factory=list)  # entries the frames since the last exception match
    last_line: int = 0  # the last line of its stream it was fed


class TracebackMixin:
    """The traceback state machine of :class:`~denpex_tui.core.pipeline.SourceProcessor`."""

    def _open_block(self, b: _Block, data: bytes | None = None, s: int = 0) -> None:
        """Open the traceback block ``b`` (``data[s:]`` is its header line, when it came from
        bytes). A header with no time of its own takes the time of the line before it in its
        stream, else the stream's last known time (both marked approximate)."""
        if b.time is None and data is not None:
            b.time = self.prev_time(data, s, b.key)
            b.time_approx = b.time is not None
        if b.time is None and b.key in self.key_time:
            b.time, b.time_approx = self.key_time[b.key], True
        self.blocks[b.key] = b

    def _block_line(self, b: _Block, text: str, raw_text: str, lineno: int, off: int, t, candidate: bool) -> bool:
        """Feed one line of the block's stream; False when the line is not part of it."""
        b.nlines += 1
        b.last_line = lineno
        if b.nlines > _MAX_BLOCK_LINES:
            self._close_block(b.key)
            return False
        if b.rank is None and b.rank_override is None:
            pass
        stripped = text.strip()
        if stripped and len(b.where) < 64:
            b.where.extend(where_hits(stripped))
        if b.state == "frames":
            if text.startswith(_TB):
                return True
            if text.startswith(_ORIG_TB):
                b.pending_original = True
                return True
            m = _FRAME.match(text)
            if m:
                b.origin_frame = stripped
                return True
            if not stripped or text.startswith("    ") or set(stripped) <= set("^~ ") or _REPEATED.match(text):
                return True
            mexc = _EXC_LINE.match(stripped)
            exc_type = mexc.group("type") if mexc else stripped.split(":", 1)[0][:80]
            det = self.matcher.detect(text) if candidate else None
            b.exceptions.append(_Exc(exc_type, stripped, raw_text, lineno, off, det, original=b.pending_original,
                                     origin=b.origin_frame, where=list(dict.fromkeys(reversed(b.where)))))
            b.origin_frame = None
            b.where = []
            b.end_line = lineno
            b.pending_original = False
            b.state = "after"
            b.blanks = 0
            b.continuation = 0
            return True
        if b.state == "chain":
            if not stripped:
                return True
            if text.startswith(_TB):
                b.state = "frames"
                return True
            self._close_block(b.key)
            return False
        # after an exception line
        if not stripped:
            b.blanks += 1
            if b.blanks > 3:
                self._close_block(b.key)
            return True
        if any(stripped.startswith(c) for c in _CHAIN):
            b.state = "chain"
            return True
        if text.startswith(_ORIG_TB):
            b.pending_original = True
            b.state = "frames"
            return True
        if text.startswith(_TB):
            # A new, unrelated traceback on the same stream.
            self._close_block(b.key)
            return False
        if t is not None or b.continuation >= _MAX_CONTINUATION:
            self._close_block(b.key)
            return False
        # Continuation of a multi-line exception message (NCCL "Last error:" lines...).
        b.continuation += 1
        b.end_line = lineno
        if candidate and b.exceptions:
            det = self.matcher.detect(text)
            if det is not None:
                b.exceptions[-1].detail_sigs.append((det, stripped, lineno, off))
        return True

    def close_quiet_blocks(self, lineno: int) -> None:
        """Close the tracebacks whose stream has said nothing for :data:`QUIET_LINES` lines (a
        console's rank whose traceback was its last word, in a file that goes on with other
        streams): what follows cannot belong to them, and while any is open every line is read
        one by one."""
        for key, b in list(self.blocks.items()):
            if lineno - max(b.last_line, b.start_line) > QUIET_LINES:
                self._close_block(key)

    def _close_block(self, key: StreamKey) -> None:
        b = self.blocks.pop(key, None)
        if b is None or not b.exceptions:
            return
        # The original exception of a chain is the cause; a later one replaces it only when it
        # is more specific (a bare exception explained by an errno or a known signature).
        first = next((e for e in b.exceptions if e.original), b.exceptions[0])
        picks = []
        for e in [first] + [x for x in b.exceptions if x is not first]:
            if e.det is not None:
                picks.append((e.det.tier, e.det, e, e.text, e.line, e.offset))
            for det, dtext, dline, doff in e.detail_sigs:
                picks.append((det.tier, det, e, dtext, dline, doff))
        fields: dict = {}
        for _, det, *_rest in picks:
            for k, v in det.fields.items():
                fields.setdefault(k, v)
        own = [p for p in picks if p[2] is first and p[0] < 2]
        best = own[0] if own else (min(picks, key=lambda p: p[0]) if picks else None)  # earliest on ties
        if best is not None and (best[0] < 2 or best[2] is first):
            _, det, cause, text, tline, toff = best
            sig = det.sig if det.tier < 2 else self.catalog.get("python.uncaught-exception")
            fields = {**fields, **det.fields}
        else:
            cause, text, tline, toff = first, first.text, first.line, first.offset
            sig = self.catalog.get("python.uncaught-exception")
        if sig is None:
            return
        if sig.id == "python.uncaught-exception":
            fields["exc_type"] = cause.type
        where = list(dict.fromkeys(cause.where + [h for e in b.exceptions if e is not cause for h in e.where]
                                   + list(reversed(b.where))))
        if where:
            fields["where"] = where[:16]
        chained = [e.text for e in b.exceptions if e is not cause][:8]
        g = b.rank_override if b.rank_override is not None else b.rank
        self._emit(sig, Hit(text, cause.raw, b.start_line, tline, toff, g, b.local, b.host, b.time, None, key,
                            time_approx=b.time_approx,
                            extras={"exc_type": cause.type, "origin": cause.origin, "tb_start": b.start_line,
                                    "chained": chained, "extra": {"tb_end_line": b.end_line or tline}}),
                   priority=b.priority, fields=fields)
        # Later exceptions of the chain with their own signature are context, kept for the view.
        for e in b.exceptions:
            if e is not cause and e.sig is not None and e.sig.id != sig.id:
                self._marker(e.sig, e.text, e.line, g, b.local, b.time)

