"""The per-source incremental pipeline: bytes in, findings out.

The same :class:`SourceProcessor` serves ``scan`` (history: big chunks from offset 0) and
``follow``/``watch`` (live: small chunks as lines complete). For each chunk of whole lines:

1. the prefilter finds the few lines holding a signature or anchor literal;
2. only those lines are decoded, made safe, stripped of launcher prefixes and matched;
3. a ``Traceback`` header switches the source into *walk mode*: every following line of that
   stream is read until the traceback (with its chained exceptions) is complete, so the
   original exception of a chain decides the signature and the traceback's first line
   becomes the finding's ``line``;
4. torchelastic's ChildFailedError report is parsed as structured evidence (rank, local
   rank, exit code, time), never trusted as the diagnosis;
5. at the end of each chunk, the last timestamped line of each rank's stream is recorded
   (the evidence for hangs: which rank went silent first).

Memory is bounded: findings are aggregated per (attempt, stream, signature) with a count,
traceback blocks are capped, markers keep first and last occurrences.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Callable

from .catalog import Signature
from .lineparse import ParsedLine, parse_line, stream_labels
from .matcher import ANCHORS, ERROR_WORDS, VERSION_RULES, Detection, Matcher
from .model import (
    PRIORITY_ERROR_JSON,
    PRIORITY_FAILURE_BLOCK,
    FailureEntry,
    Finding,
    LastLine,
    Marker,
    SourceInfo,
)
from .text import safe_line

__all__ = ["SourceProcessor", "StreamKey"]

StreamKey = tuple  # ("l", local) | ("t", task) | ("h", host) | ("fb", idx) | None

_TB = ANCHORS["traceback"]
_ORIG_TB = "Original Traceback (most recent call last):"
_CHAIN = (ANCHORS["chain-during"], ANCHORS["chain-cause"])
_EXC_LINE = re.compile(r"^(?P<type>[A-Za-z_][\w.]*)(?::(?: |$)|$)")
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]*)", line (?P<line>\d+), in (?P<func>.+)$')
_FB_FIELD = re.compile(r"^  (time|host|rank|exitcode|error_file|traceback)\s*: ?(.*)$")
_FB_ENTRY = re.compile(r"^\[(\d+)\]:\s*$")
_FB_RANK = re.compile(r"^(-?\d+)(?: \(local_rank: (\d+)\))?")
_FB_EXIT = re.compile(r"^(-?\d+)(?: \(pid: (\d+)\))?")
_RANK_MAP = re.compile(r"global_rank_mapping=(\{.*\})")
_FB_START = ("Failures:", ANCHORS["root-cause"])
_MAX_BLOCK_LINES = 400
_MAX_CONTINUATION = 30
_BACKSCAN_LINES = 400
_LASTLINE_BYTES = 1 << 20
_MAX_MARKERS_PER_KEY = 64
_MAX_UNKNOWN = 5
_ERROR_WORD = re.compile(r"(?i)\b(?:" + "|".join(re.escape(w) for w in ERROR_WORDS) + r")")
_NOT_ERROR_LEVELS = ("info", "debug", "warning")


def _small_int(v) -> int | None:
    if isinstance(v, int):
        return v
    if isinstance(v, str) and v.isdigit() and len(v) <= 7:
        return int(v)
    return None


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


@dataclass
class _FBEntry:
    idx: int
    root: bool
    line: int
    rank: int | None = None
    local: int | None = None
    exitcode: int | None = None
    pid: int | None = None
    host: str | None = None
    time: datetime | None = None
    error_file: str | None = None
    in_traceback: bool = False


class SourceProcessor:
    """Incremental processing of one source. Feed whole-line chunks in order."""

    def __init__(
        self,
        info: SourceInfo,
        matcher: Matcher,
        *,
        year_hint: int | None = None,
        on_finding: Callable[[Finding], None] | None = None,
    ):
        self.info = info
        self.matcher = matcher
        self.catalog = matcher.catalog
        self.year_hint = year_hint
        self.on_finding = on_finding
        self.line_no = 0  # lines consumed so far
        self.bytes_read = 0
        self.attempt = info.attempt or 0
        self.blocks: dict[StreamKey, _Block] = {}
        self.fb_entries: list[_FBEntry] = []
        self.fb_active = False
        self.fb_root = False
        self.findings: dict[tuple, Finding] = {}
        self.failure_entries: list[FailureEntry] = []
        self.markers: dict[tuple, list[Marker]] = {}
        self.marker_counts: dict[tuple, int] = {}
        self.last_lines: dict[tuple, LastLine] = {}
        self.key_time: dict[StreamKey, datetime] = {}
        self.rank_pairs: set[tuple[int, int]] = set()  # (local, global) on this node
        self.keys_seen: dict[int, set[tuple[str, int]]] = {}  # attempt -> {("r"|"l", n)}
        self.versions: dict[str, str] = {}
        self.levels: dict[str, int] = {}
        self.errors: list[str] = []
        # Error-looking lines no detector knows: (attempt, rank, local) -> [(line, text)], first 5.
        self.unknown: dict[tuple, list[tuple[int, str]]] = {}
        self.first_time: datetime | None = None  # the source's first timestamp (clock-skew evidence)

    # -- public ---------------------------------------------------------------------------

    def feed(self, data: bytes, offset: int) -> None:
        """Process ``data`` (whole lines, ending with a newline) found at byte ``offset``."""
        if not data:
            return
        starts = self.matcher.prefilter.line_starts(data)
        cand = set(starts)
        n = len(data)
        pos = 0
        cur = self.line_no  # lines before `pos`
        i = 0
        ns = len(starts)
        while pos < n:
            if self.blocks or self.fb_active:
                nl = data.find(b"\n", pos)
                if nl < 0:
                    nl = n
                self._line(data, pos, nl, cur + 1, offset + pos, pos in cand)
                pos = nl + 1
                cur += 1
                continue
            while i < ns and starts[i] < pos:
                i += 1
            if i >= ns:
                break
            s = starts[i]
            cur += data.count(b"\n", pos, s)
            pos = s
            nl = data.find(b"\n", pos)
            if nl < 0:
                nl = n
            self._line(data, pos, nl, cur + 1, offset + pos, True)
            pos = nl + 1
            cur += 1
        if self.first_time is None and self.info.kind != "error-json":
            self._find_first_time(data)
        self.line_no += data.count(b"\n")
        self.bytes_read = offset + n
        if self.info.kind != "console":
            info = self.info
            g = info.file_rank if info.file_rank is not None else info.exec_rank
            self._note_key(g, info.local_rank if g is None else None)
        if self.info.kind != "error-json":
            self._record_last_lines(data, offset)

    def _find_first_time(self, data: bytes) -> None:
        pos = 0
        for _ in range(64):
            nl = data.find(b"\n", pos)
            if nl < 0:
                return
            pl = parse_line(safe_line(data[pos:nl]).text, self.year_hint)
            pos = nl + 1
            if pl.time is not None:
                self.first_time = pl.time
                return

    def close(self) -> None:
        """End of the source (or a quiet period in live mode): close open tracebacks and an
        unterminated failure report (an excerpt that stops before its closing border)."""
        for key in list(self.blocks):
            self._close_block(key)
        if self.fb_active:
            self._fb_finish()
        self.fb_active = False

    def close_stale(self) -> None:
        self.close()

    # -- lines ----------------------------------------------------------------------------

    def _stream_key(self, pre: ParsedLine) -> StreamKey:
        # A per-rank file is one stream; a console interleaves the streams its prefixes name.
        if self.info.kind != "console":
            return None
        return pre.stream_key()

    def _rank_of(self, pre) -> tuple[int | None, int | None]:
        """(global rank, local rank) of a line, as far as the line and its file tell."""
        info = self.info
        local = pre.local_rank if pre.local_rank is not None else info.local_rank
        if pre.rank is not None:
            g = pre.rank
        elif pre.task is not None:
            g = pre.task
        elif info.file_rank is not None:
            g = info.file_rank
        elif info.exec_rank is not None:
            g = info.exec_rank
        else:
            g = None
        if g is not None and local is not None:
            self.rank_pairs.add((local, g))
        return g, local

    def _note_key(self, g: int | None, local: int | None) -> None:
        ks = self.keys_seen.setdefault(self.attempt, set())
        if g is not None:
            ks.add(("r", g))
        elif local is not None:
            ks.add(("l", local))

    def _line(self, data: bytes, s: int, e: int, lineno: int, off: int, candidate: bool) -> None:
        st = safe_line(data[s:e])
        pre = parse_line(st.text, self.year_hint)
        text = pre.text
        key = self._stream_key(pre)
        if self.info.kind == "console" and key is None:
            if self.fb_active:
                self._fb_line(text, st.text, lineno, off)
                return
            if candidate and text.strip() in _FB_START:
                # torchelastic's failure report (it follows the agent's own traceback,
                # whose ChildFailedError message it is): parse it as structured evidence.
                self._close_block(None)
                self.fb_active = True
                self.fb_root = text.strip() != "Failures:"
                return
        g, local = self._rank_of(pre)
        if key is not None or self.info.kind != "console" or g is not None:
            self._note_key(g, local)
        t, t_text = pre.time, pre.time_text
        if t is not None:
            self.key_time[key] = t
            if t_text and len(t_text) >= 10 and t_text[:4].isdigit():
                self.year_hint = t.year
        block = self.blocks.get(key)
        if block is not None:
            if self._block_line(block, text, st.text, lineno, off, t, candidate):
                return
            block = None
        if candidate:
            if text.startswith(_TB) or text.startswith(_ORIG_TB):
                self._open_block(key, data, s, lineno, off, g, local, pre.host, t)
                return
            self._anchors(text, key, lineno, off, g, local)
            det = self.matcher.detect(text)
            if det is not None:
                self._emit(det.sig, text, st.text, lineno, lineno, off, g, local, pre.host, t, t_text, data, s, key,
                           fields=det.fields)
            elif pre.level not in _NOT_ERROR_LEVELS and _ERROR_WORD.search(text):
                lst = self.unknown.setdefault((self.attempt, g, local), [])
                if len(lst) < _MAX_UNKNOWN:
                    lst.append((lineno, text.strip()[:500]))

    def _anchors(self, text: str, key: StreamKey, lineno: int, off: int, g, local) -> None:
        if ANCHORS["restart"] in text and self.info.kind == "console":
            # "[default] Worker group FAILED. 2/3 attempts left; will restart worker group"
            self.attempt += 1
        for pkg, rx in VERSION_RULES:
            m = rx.search(text)
            if m and pkg not in self.versions:
                self.versions[pkg] = m.group(1)
        if ANCHORS["rank-mapping"] in text:
            m = _RANK_MAP.search(text)
            if m:
                self._rank_mapping(m.group(1))

    def _rank_mapping(self, blob: str) -> None:
        # DeepSpeed launcher: global_rank_mapping={'node-1': [0, 1], 'node-2': [2, 3]}
        try:
            import ast

            mapping = ast.literal_eval(blob)
        except Exception:
            return
        if isinstance(mapping, dict) and len(mapping) == 1:
            ranks = next(iter(mapping.values()))
            if isinstance(ranks, list):
                for local, g in enumerate(ranks):
                    if isinstance(g, int):
                        self.rank_pairs.add((local, g))

    # -- findings -------------------------------------------------------------------------

    def _emit(
        self,
        sig: Signature,
        text: str,
        raw_text: str,
        line: int,
        text_line: int,
        off: int,
        g: int | None,
        local: int | None,
        host: str | None,
        t: datetime | None,
        t_text: str | None,
        data: bytes | None,
        s: int,
        key: StreamKey,
        *,
        exc_type: str | None = None,
        origin: str | None = None,
        tb_start: int | None = None,
        chained: list[str] | None = None,
        time_approx: bool = False,
        priority: int | None = None,
        extra: dict | None = None,
        fields: dict | None = None,
    ) -> None:
        if sig.severity == "info" or sig.role == "context" and sig.severity != "error":
            self._marker(sig, text, line, g, local, t)
            if sig.severity == "info":
                return
        if t is None and data is not None:
            t = self._prev_time(data, s, key)
            time_approx = t is not None
        if t is None and key in self.key_time:
            t = self.key_time[key]
            time_approx = True
        fields = dict(fields or {})
        if g is None and local is None:
            # A launcher line names the rank it reports on (local_rank: 4, srun's task 3).
            local = _small_int(fields.get("local_rank"))
            g = _small_int(fields.get("rank"))
            tasks = fields.get("tasks")
            if g is None and isinstance(tasks, str) and tasks.isdigit():
                g = _small_int(tasks)
        if exc_type is None:
            exc_type = fields.get("exc_type")
        elif sig.id == "python.uncaught-exception":
            fields["exc_type"] = exc_type
        agg = (self.attempt, key, g, local, sig.id, exc_type if sig.id == "python.uncaught-exception" else None)
        f = self.findings.get(agg)
        if f is not None:
            f.count += 1
            return
        f = Finding(
            signature=sig.id,
            title=sig.title if sig.id != "python.uncaught-exception" or not exc_type else f"Uncaught {exc_type}",
            role=sig.role,
            severity=sig.severity,
            phase=sig.phase,
            family=sig.family,
            path=self.info.path,
            line=1 if self.info.kind == "error-json" else line,
            text_line=1 if self.info.kind == "error-json" else text_line,
            offset=off,
            text=text.strip(),
            raw_text=raw_text,
            rank=g,
            local_rank=local,
            node_key=self.info.node_key,
            host=host,
            attempt=self.attempt,
            time=t,
            time_text=t_text,
            time_approx=time_approx,
            priority=priority if priority is not None else self.info.priority,
            source_order=self.info.order,
            exc_type=exc_type,
            origin_frame=origin,
            traceback_start=tb_start,
            chained=chained or [],
            extra=extra or {},
            fields=fields,
            builtin=sig.builtin,
        )
        self.findings[agg] = f
        if self.on_finding is not None:
            self.on_finding(f)

    def _marker(self, sig: Signature, text: str, line: int, g, local, t) -> None:
        k = (sig.id, g, local)
        self.marker_counts[k] = self.marker_counts.get(k, 0) + 1
        lst = self.markers.setdefault(k, [])
        m = Marker(sig.id, self.info.path, line, text.strip(), g, local, self.info.node_key, self.attempt, t)
        if len(lst) < _MAX_MARKERS_PER_KEY:
            lst.append(m)
        else:
            lst[-1] = m  # keep the first ones and the latest

    def _prev_time(self, data: bytes, s: int, key: StreamKey) -> datetime | None:
        """Timestamp of the nearest earlier line of the same stream in this chunk, else of the
        nearest earlier line of any stream."""
        pos = s
        fallback: datetime | None = None
        for _ in range(_BACKSCAN_LINES):
            if pos <= 0:
                return None
            prev = data.rfind(b"\n", 0, pos - 1) + 1
            raw = data[prev : pos - 1]
            pos = prev
            if not raw:
                continue
            pre = parse_line(safe_line(raw).text, self.year_hint)
            if pre.time is None:
                continue
            if self._stream_key(pre) == key:
                return pre.time
            if fallback is None:
                # A console is written in arrival order: any earlier timestamp bounds this line.
                fallback = pre.time
        return fallback

    # -- tracebacks -----------------------------------------------------------------------

    def _open_block(self, key, data, s, lineno, off, g, local, host, t, *, rank_override=None, priority=None, time=None) -> None:
        approx = False
        if time is not None:
            t = time
        if t is None and data is not None:
            t = self._prev_time(data, s, key)
            approx = t is not None
        if t is None and key in self.key_time:
            t, approx = self.key_time[key], True
        self.blocks[key] = _Block(
            key=key,
            start_line=lineno,
            start_offset=off,
            rank=rank_override if rank_override is not None else g,
            local=local,
            host=host,
            time=t,
            time_approx=approx,
            rank_override=rank_override,
            priority=priority,
        )

    def _block_line(self, b: _Block, text: str, raw_text: str, lineno: int, off: int, t, candidate: bool) -> bool:
        """Feed one line of the block's stream; False when the line is not part of it."""
        b.nlines += 1
        if b.nlines > _MAX_BLOCK_LINES:
            self._close_block(b.key)
            return False
        if b.rank is None and b.rank_override is None:
            pass
        stripped = text.strip()
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
            if not stripped or text.startswith("    ") or set(stripped) <= set("^~ "):
                return True
            mexc = _EXC_LINE.match(stripped)
            exc_type = mexc.group("type") if mexc else stripped.split(":", 1)[0][:80]
            det = self.matcher.detect(text) if candidate else None
            b.exceptions.append(_Exc(exc_type, stripped, raw_text, lineno, off, det, original=b.pending_original,
                                     origin=b.origin_frame))
            b.origin_frame = None
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
        chained = [e.text for e in b.exceptions if e is not cause][:8]
        g = b.rank_override if b.rank_override is not None else b.rank
        self._emit(
            sig,
            text,
            cause.raw,
            b.start_line,
            tline,
            toff,
            g,
            b.local,
            b.host,
            b.time,
            None,
            None,
            0,
            key,
            exc_type=cause.type,
            origin=cause.origin,
            tb_start=b.start_line,
            chained=chained,
            time_approx=b.time_approx,
            priority=b.priority,
            extra={"tb_end_line": b.end_line or tline},
            fields=fields,
        )
        # Later exceptions of the chain with their own signature are context, kept for the view.
        for e in b.exceptions:
            if e is not cause and e.sig is not None and e.sig.id != sig.id:
                self._marker(e.sig, e.text, e.line, g, b.local, b.time)

    # -- torchelastic failure report ------------------------------------------------------

    def _fb_line(self, text: str, raw_text: str, lineno: int, off: int) -> None:
        stripped = text.strip()
        if stripped.startswith("=" * 20):
            self._fb_finish()
            self.fb_active = False
            return
        if stripped.startswith("-" * 20):
            self._fb_close_tb()
            return
        if stripped == ANCHORS["root-cause"]:
            self._fb_close_tb()
            self.fb_root = True
            return
        m = _FB_ENTRY.match(text)
        if m:
            self._fb_close_tb()
            self.fb_entries.append(_FBEntry(idx=len(self.fb_entries), root=self.fb_root, line=lineno))
            return
        if not self.fb_entries:
            return
        e = self.fb_entries[-1]
        m = _FB_FIELD.match(text)
        if m and not e.in_traceback:
            name, value = m.group(1), m.group(2).strip()
            if name == "time":
                try:
                    e.time = datetime.strptime(value, "%Y-%m-%d_%H:%M:%S")
                except ValueError:
                    e.time = None
            elif name == "host":
                e.host = value or None
            elif name == "rank":
                mr = _FB_RANK.match(value)
                if mr:
                    e.rank = int(mr.group(1))
                    e.local = int(mr.group(2)) if mr.group(2) else None
                    if e.local is not None and e.rank >= 0:
                        self.rank_pairs.add((e.local, e.rank))
            elif name == "exitcode":
                mx = _FB_EXIT.match(value)
                if mx:
                    e.exitcode = int(mx.group(1))
                    e.pid = int(mx.group(2)) if mx.group(2) else None
            elif name == "error_file":
                e.error_file = None if value in ("<N/A>", "") else value
            elif name == "traceback":
                e.in_traceback = True
                self._fb_tb_text(e, value, raw_text, lineno, off)
            return
        if e.in_traceback and text.startswith("  "):
            self._fb_tb_text(e, text[2:], raw_text, lineno, off)

    def _fb_tb_text(self, e: _FBEntry, text: str, raw_text: str, lineno: int, off: int) -> None:
        key = ("fb", e.idx)
        b = self.blocks.get(key)
        t = e.time
        if b is not None:
            if self._block_line(b, text, raw_text, lineno, off, None, True):
                return
        if text.startswith(_TB):
            self._open_block(key, None, 0, lineno, off, e.rank, e.local, e.host, None,
                             rank_override=e.rank, priority=PRIORITY_FAILURE_BLOCK, time=t)
            return
        det = self.matcher.detect(text)
        if det is not None:
            self._emit(det.sig, text, raw_text, lineno, lineno, off, e.rank, e.local, e.host, t, None, None, 0, key,
                       priority=PRIORITY_FAILURE_BLOCK, time_approx=False, fields=det.fields)

    def _fb_close_tb(self) -> None:
        if self.fb_entries:
            e = self.fb_entries[-1]
            if e.in_traceback:
                self._close_block(("fb", e.idx))
                e.in_traceback = False

    def _fb_finish(self) -> None:
        self._fb_close_tb()
        for e in self.fb_entries:
            if e.rank is None:
                continue
            self.failure_entries.append(
                FailureEntry(
                    rank=e.rank,
                    local_rank=e.local,
                    exitcode=e.exitcode,
                    pid=e.pid,
                    host=e.host,
                    time=e.time,
                    error_file=e.error_file,
                    root_cause=e.root,
                    node_key=self.info.node_key,
                    path=self.info.path,
                    line=e.line,
                    attempt=self.attempt,
                )
            )
        self.fb_entries = []
        self.fb_root = False

    # -- last lines -----------------------------------------------------------------------

    def _record_last_lines(self, data: bytes, offset: int) -> None:
        """The last timestamped line of each rank stream in this chunk (bounded backward scan,
        stopping as soon as every stream present in the chunk has been found)."""
        if self.info.kind == "console":
            want = len(stream_labels(data)) + (1 if b"[rank" in data or b"[Rank" in data else 0)
        else:
            want = 1
        end = len(data)
        limit = max(0, end - _LASTLINE_BYTES)
        pos = end - 1  # the final newline
        found: set = set()
        lines_after = 0
        budget = 4000
        while pos > limit and budget > 0:
            budget -= 1
            start = data.rfind(b"\n", 0, pos) + 1
            raw = data[start:pos]
            pos = start - 1
            lines_after += 1
            if not raw:
                continue
            pre = parse_line(safe_line(raw).text, self.year_hint)
            key = self._stream_key(pre)
            if key is None and pre.rank is not None:
                key = ("g", pre.rank)  # a rank named in the text ([rank3]:, DeepSpeed's [Rank 3])
            if key in found:
                continue
            if self.info.kind == "console" and key is None:
                continue
            t = pre.time
            if t is None:
                continue
            found.add(key)
            g, local = self._rank_of(pre)
            self._note_key(g, local)
            if len(found) >= want:
                budget = 0  # recorded below; nothing older can be the last line of a stream
            lineno = self.line_no - lines_after + 1
            lk = (self.attempt, key)
            self.last_lines[lk] = LastLine(
                path=self.info.path,
                line=lineno,
                offset=offset + start,
                text=pre.text.strip(),
                time=t,
                key_local=local,
                key_rank=g,
                node_key=self.info.node_key,
                attempt=self.attempt,
                priority=self.info.priority,
            )

    # -- error.json -----------------------------------------------------------------------

    def feed_error_json(self, blob: bytes) -> None:
        """torchelastic's error.json: the worker's exception and its 1 s timestamp."""
        try:
            doc = json.loads(blob.decode("utf-8", "replace"))
        except (ValueError, RecursionError):
            self.errors.append(f"{self.info.path}: not valid JSON: skipped")
            return
        msg = doc.get("message") if isinstance(doc, dict) else None
        stack = ""
        ts = None
        if isinstance(msg, dict):
            extra = msg.get("extraInfo") or {}
            if isinstance(extra, dict):
                stack = extra.get("py_callstack") or ""
                ts = extra.get("timestamp")
            text = msg.get("message") or ""
        elif isinstance(msg, str):
            text = msg
            ts = doc.get("timestamp") if isinstance(doc, dict) else None
        else:
            self.errors.append(f"{self.info.path}: not a torchelastic error file: skipped")
            return
        when = None
        try:
            when = datetime.fromtimestamp(int(ts)) if ts is not None else None
        except (TypeError, ValueError, OverflowError, OSError):
            when = None
        body = stack if isinstance(stack, str) and stack.strip() else str(text)
        body_bytes = body.encode("utf-8", "replace")
        if not body_bytes.endswith(b"\n"):
            body_bytes += b"\n"
        if when is not None:
            self.key_time[None] = when
        self.feed(body_bytes, 0)
        self.close()
        for f in self.findings.values():
            f.priority = PRIORITY_ERROR_JSON
            if when is not None:
                f.time, f.time_approx = when, False
