"""The per-source incremental pipeline: whole-line chunks in, findings out.

The same :class:`SourceProcessor` serves ``scan`` (history: big chunks from offset 0, or one
range of a big file) and ``follow``/``watch`` (the same history, then small live chunks as lines
complete). Its results do not depend on how the bytes were cut into chunks. For each chunk:

1. the prefilter finds the few lines holding a signature or anchor literal;
2. only those lines go through the door (:func:`~denpex_tui.core.lines.facts.line_facts`) and
   the detectors (:meth:`~denpex_tui.core.matcher.Matcher.detect`);
3. a ``Traceback`` header switches the stream into *walk mode* (:mod:`denpex_tui.core.tracebacks`),
   and so does a fatal report, for the native backtrace after it (:mod:`denpex_tui.core.where`:
   the frames say where the failure happened);
4. torchelastic's failure report and error.json are launcher evidence
   (:mod:`denpex_tui.core.failreport`), never trusted as the diagnosis;
5. the last timestamped line of each rank's stream is recorded (the evidence for hangs: which
   rank went silent first): :mod:`denpex_tui.core.streamtimes`; and its last progress line (how
   far it got, with or without timestamps): :mod:`denpex_tui.core.stopmarks`.

Memory is bounded: findings are aggregated per (attempt, stream, signature) with a count,
traceback blocks are capped, markers keep first and last occurrences.
"""

from __future__ import annotations

import re

import re2
from datetime import datetime
from typing import Callable

from .catalog import Signature
from .failreport import FB_START as _FB_START
from .failreport import FailureReportMixin, _FBEntry
from .firsterror import FirstErrorMixin
from .hit import Hit, StreamKey, finding_agg
from .lines.chunk import newlines
from .lines.facts import LineFacts, line_facts
from .lines.formats import small_int
from .lines.reader import drop_continued
from .matcher import ANCHORS, ERROR_WORDS, VERSION_RULES, Matcher
from .model import FailureEntry, Finding, LastLine, Marker, SourceInfo, StopMark
from .stopmarks import WINDOW as STOP_WINDOW, StopMarksMixin
from .streamjump import JUMP_MIN_BYTES, covers
from .streamtimes import StreamTimesMixin
from .tracebacks import ORIG_TB_HEADER as _ORIG_TB
from .tracebacks import TB_HEADER as _TB
from .tracebacks import TracebackMixin, _Block
from .where import WhereMixin, frames_before

__all__ = ["SourceProcessor"]

_RANK_MAP = re.compile(r"global_rank_mapping=(\{.*\})")
_MAX_MARKERS_PER_KEY = 64
_MAX_UNKNOWN = 5
_ERROR_WORD = re.compile(r"(?i)\b(?:" + "|".join(re.escape(w) for w in ERROR_WORDS) + r")")
# the same words over a whole chunk, in RE2 (C speed), for scan's pass over a job nothing known failed in
_ERROR_WORD_BYTES = re2.compile(rb"(?i)\b(?:" + b"|".join(re.escape(w).encode() for w in ERROR_WORDS) + rb")")
_UNKNOWN_SATURATED = 2000  # error-looking lines in a row that add nothing new: the rest is more of the same
_NOT_ERROR_LEVELS = ("info", "debug", "warning")


class SourceProcessor(StreamTimesMixin, StopMarksMixin, WhereMixin, FirstErrorMixin, TracebackMixin,
                      FailureReportMixin):
    """Incremental processing of one source. Feed whole-line chunks in order."""

    def __init__(self, info: SourceInfo, matcher: Matcher, *, year_hint: int | None = None,
                 on_finding: Callable[[Finding], None] | None = None):
        self.info = info
        self.attach(matcher, on_finding)
        self.year_hint = year_hint
        self.line_no = 0  # lines consumed so far
        self.bytes_read = 0
        self.attempt = info.attempt or 0
        self.blocks: dict[StreamKey, _Block] = {}
        self.windows: dict = {}  # stream -> the fatal report whose backtrace follows (core/where.py)
        self.fb_entries: list[_FBEntry] = []
        self.fb_active = False
        self.fb_root = False
        self.findings: dict[tuple, Finding] = {}
        self.failure_entries: list[FailureEntry] = []
        self.markers: dict[tuple, list[Marker]] = {}
        self.marker_counts: dict[tuple, int] = {}
        self.last_lines: dict[tuple, LastLine] = {}
        self.stop_marks: dict[tuple, StopMark] = {}  # where each rank stream last showed progress
        self.key_time: dict[StreamKey, datetime] = {}
        self.rank_pairs: set[tuple[int, int]] = set()  # (local, global) on this node
        self.keys_seen: dict[int, set[tuple[str, int]]] = {}  # attempt -> {("r"|"l", n)}
        self.versions: dict[str, str] = {}
        self.levels: dict[str, int] = {}
        self.errors: list[str] = []
        # Error-looking lines no detector knows: (attempt, rank, local) -> [(line, text)], first 5.
        self.unknown: dict[tuple, list[tuple[int, str]]] = {}
        self.first_time: datetime | None = None  # the source's first timestamp (clock-skew evidence)
        self.restarts = 0  # "will restart worker group" lines seen (a range's attempts are shifted by them)
        self.first_error: tuple[int, float | None] | None = None  # (line, epoch): a rank file's first error
        # the other searches' lines in the chunk fed last, by group (Matcher.CHUNK_GROUPS), where
        # the prefilter's one pass found them; a group not here is searched by its own reader
        self.chunk_groups: dict[str, list[int]] = {}
        self.chunk_lines: int | None = 0  # the lines of the chunk fed last (None: not all of it was read)
        self.init_streams()

    def attach(self, matcher: Matcher, on_finding: Callable[[Finding], None] | None = None) -> None:
        """(Re)attach what does not travel between processes: the compiled matcher, the callback."""
        self.matcher = matcher
        self.catalog = matcher.catalog
        self.on_finding = on_finding

    def __getstate__(self) -> dict:
        d = dict(self.__dict__)
        for k in ("matcher", "catalog", "on_finding"):
            d.pop(k, None)
        d["_ctx"] = d["_chunk"] = d["_streams"] = None  # a chunk's look-back buffer does not travel
        d["chunk_groups"] = {}
        return d

    def __setstate__(self, d: dict) -> None:
        self.__dict__.update(d)
        self.matcher = self.catalog = self.on_finding = None  # type: ignore[assignment]

    # -- public ---------------------------------------------------------------------------

    def feed(self, data: bytes, offset: int, *, continues: bool = False, more: int = 0) -> None:
        """Process ``data`` (whole lines, ending with a newline) found at byte ``offset``.
        ``continues``: its first line is the rest of a line already fed (a follower's piece of
        an over-long or timed-out line): dropped, as the reader drops it. ``more``: bytes the
        caller will feed next for certain (a history read knows its range's size)."""
        self.chunk_groups = {}
        self.chunk_lines = None if continues else 0
        if continues:
            kept = drop_continued(data, True)
            offset += len(data) - len(kept)
            data = kept
        if not data:
            return
        starts, self.chunk_groups = self.matcher.prefilter.scan(data)
        cand = set(starts)
        n = len(data)
        pos = 0
        cur = self.line_no  # lines before `pos`
        i = 0
        ns = len(starts)
        self.chunk_begin(data, offset)
        jump = None  # the chunk's lines by stream, made when a console's traceback is open in it
        while pos < n:
            if self.blocks or self.fb_active or self.windows:
                if not (self.fb_active or self.windows) and self.info.kind == "console" and n >= JUMP_MIN_BYTES \
                        and covers(self.blocks):
                    # only the open tracebacks' streams and the candidates can change anything
                    if jump is None:
                        jump = self.chunk_streams(data)
                    nxt = jump.next_of(self.blocks.keys(), pos)
                    while i < ns and starts[i] < pos:
                        i += 1
                    if i < ns and (nxt < 0 or starts[i] < nxt):
                        nxt = starts[i]
                    if nxt != pos:
                        before = cur
                        cur += newlines(data, pos, n if nxt < 0 else nxt)
                        if cur >> 10 != before >> 10:
                            self.close_quiet_blocks(cur)
                        if nxt < 0:
                            pos = n
                            break
                        pos = nxt
                        continue
                nl = data.find(b"\n", pos)
                if nl < 0:
                    nl = n
                self._line(data, pos, nl, cur + 1, offset + pos, pos in cand)
                pos = nl + 1
                cur += 1
                if not cur & 1023 and self.blocks:
                    self.close_quiet_blocks(cur)
                continue
            while i < ns and starts[i] < pos:
                i += 1
            if i >= ns:
                break
            s = starts[i]
            cur += newlines(data, pos, s)
            pos = s
            nl = data.find(b"\n", pos)
            if nl < 0:
                nl = n
            self._line(data, pos, nl, cur + 1, offset + pos, True)
            pos = nl + 1
            cur += 1
        if pos < n:
            cur += newlines(data, pos)  # the lines after the last candidate, counted once
        elif pos > n:
            cur -= 1  # a last line without its newline: not counted, as ever
        if self.first_time is None and self.info.kind != "error-json":
            self.find_first_time(data)
        if self.first_error is None and self.info.kind in ("rank-file", "exec"):
            self.look_first_error(data, self.line_no + 1, self.chunk_groups.get("errors"))
        if self.chunk_lines is not None:
            self.chunk_lines = cur - self.line_no
        self.line_no = cur
        self.bytes_read = offset + n
        if self.info.kind != "console":
            info = self.info
            g = info.file_rank if info.file_rank is not None else info.exec_rank
            self._note_key(g, info.local_rank if g is None else None)
        if self.info.kind != "error-json":
            self.record_last_lines(data, offset)
            if more < STOP_WINDOW:  # else the next chunks drop every mark this one would make
                self.record_stop_marks(data, offset)
        self.chunk_end(data)

    def feed_unknown(self, data: bytes, offset: int) -> None:
        """Scan's second pass over a job in which nothing known failed: only the error-looking
        lines no detector knows (the first :data:`_MAX_UNKNOWN` of each rank). The prefilter
        hides no line a detector knows, so lines it did not flag need no detector: each
        error-word line goes through the door for its level and rank, nothing more; a source
        whose error lines stopped adding anything new for a while is left (more of the same)."""
        if getattr(self, "_unknown_quiet", 0) >= _UNKNOWN_SATURATED:
            self.line_no += newlines(data)
            self.bytes_read = offset + len(data)
            return
        counted, line = 0, self.line_no
        last_s = -1
        for m in _ERROR_WORD_BYTES.finditer(data):
            s = data.rfind(b"\n", 0, m.start()) + 1
            if s == last_s:
                continue
            last_s = s
            line += newlines(data, counted, s)
            counted = s
            e = data.find(b"\n", s)
            pre = line_facts(data[s:e if e >= 0 else len(data)], self.year_hint)
            if pre.level in _NOT_ERROR_LEVELS or not _ERROR_WORD.search(pre.text):
                continue
            g, local = self._ranks(pre)
            lst = self.unknown.setdefault((self.attempt, g, local), [])
            if len(lst) < _MAX_UNKNOWN:
                lst.append((line + 1, pre.text.strip()[:500]))
                self._unknown_quiet = 0
            else:
                self._unknown_quiet = getattr(self, "_unknown_quiet", 0) + 1
                if self._unknown_quiet >= _UNKNOWN_SATURATED:
                    break
        self.line_no += newlines(data)
        self.bytes_read = offset + len(data)

    def close(self) -> None:
        """End of the source (or a quiet period in live mode): close open tracebacks and an
        unterminated failure report (an excerpt that stops before its closing border)."""
        for key in list(self.blocks):
            self._close_block(key)
        if self.fb_active:
            self._fb_finish()
        self.fb_active = False

    # -- lines ----------------------------------------------------------------------------

    def stream_of(self, pre: LineFacts) -> StreamKey:
        """A per-rank file is one stream; a console interleaves the streams its prefixes name."""
        if self.info.kind != "console":
            return None
        return pre.stream_key()

    def _ranks(self, pre: LineFacts) -> tuple[int | None, int | None]:
        g, local = pre.ranks(self.info)
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
        pre = line_facts(data[s:e], self.year_hint)
        text = pre.text
        key = self.stream_of(pre)
        if self.windows:
            self.where_window_line(key, text)
        if self.info.kind == "console" and (key is None or key[0] == "h"):
            # torchelastic's failure report is the agent's (through pdsh, with its host label)
            if self.fb_active:
                self._fb_line(text, pre.raw_text, lineno, off)
                return
            if candidate and text.strip() in _FB_START:
                # torchelastic's failure report (it follows the agent's own traceback,
                # whose ChildFailedError message it is): parse it as structured evidence.
                self._close_block(None)
                self.fb_active = True
                self.fb_root = text.strip() != "Failures:"
                return
        g, local = self._ranks(pre)
        if key is not None or self.info.kind != "console" or g is not None:
            self._note_key(g, local)
        t = pre.time
        if t is not None:
            self.key_time[key] = t
            if pre.full_date:
                self.year_hint = t.year
        block = self.blocks.get(key)
        if block is not None:
            if self._block_line(block, text, pre.raw_text, lineno, off, t, candidate):
                return
        if not candidate:
            return
        if text.startswith(_TB) or text.startswith(_ORIG_TB):
            self._open_block(_Block(key, lineno, off, g, local, pre.host, t, False), data, s)
            return
        self._anchors(text)
        det = self.matcher.detect(text)
        if det is not None:
            self._emit(det.sig, Hit(text, pre.raw_text, lineno, lineno, off, g, local, pre.host, t, pre.time_text,
                                    key), data=data, at=s, fields=det.fields)
        elif pre.level not in _NOT_ERROR_LEVELS and _ERROR_WORD.search(text):
            lst = self.unknown.setdefault((self.attempt, g, local), [])
            if len(lst) < _MAX_UNKNOWN:
                lst.append((lineno, text.strip()[:500]))

    def _anchors(self, text: str) -> None:
        if ANCHORS["restart"] in text and self.info.kind == "console":
            # "[default] Worker group FAILED. 2/3 attempts left; will restart worker group"
            self.attempt += 1
            self.restarts += 1
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

            mapping = ast.literal_eval(blob[:100_000])
        except Exception:
            return
        if isinstance(mapping, dict) and len(mapping) == 1:
            ranks = next(iter(mapping.values()))
            if isinstance(ranks, list):
                for local, g in enumerate(ranks):
                    if isinstance(g, int):
                        self.rank_pairs.add((local, g))

    # -- findings -------------------------------------------------------------------------

    def _emit(self, sig: Signature, hit: Hit, *, data: bytes | None = None, at: int = 0,
              priority: int | None = None, fields: dict | None = None) -> None:
        """A signature seen: a marker for context/info signatures, else a finding (counted when
        the same one was seen before on the same stream)."""
        if sig.severity == "info" or sig.role == "context" and sig.severity != "error":
            self._marker(sig, hit.text, hit.line, hit.rank, hit.local, hit.time)
            if sig.severity == "info":
                return
        fields = dict(fields or {})
        g, local = hit.rank, hit.local
        if g is None and local is None:
            # A launcher line names the rank it reports on (local_rank: 4, srun's task 3).
            local = _small(fields.get("local_rank"))
            g = _small(fields.get("rank"))
            tasks = fields.get("tasks")
            if g is None and isinstance(tasks, str) and tasks.isdigit():
                g = _small(tasks)
        x = hit.extras
        exc_type = x.get("exc_type")
        if exc_type is None:
            exc_type = fields.get("exc_type")
        elif sig.id == "python.uncaught-exception":
            fields["exc_type"] = exc_type
        agg = finding_agg(self.attempt, hit.key, g, local, sig.id, exc_type)
        f = self.findings.get(agg)
        if f is not None:
            f.count += 1
            return
        t, approx = hit.time, hit.time_approx
        if t is None and data is not None:
            t = self.prev_time(data, at, hit.key)
            approx = t is not None
        if t is None and hit.key in self.key_time:
            t, approx = self.key_time[hit.key], True
        ej = self.info.kind == "error-json"
        f = Finding(
            signature=sig.id,
            title=sig.title if sig.id != "python.uncaught-exception" or not exc_type else f"Uncaught {exc_type}",
            role=sig.role, severity=sig.severity, phase=sig.phase, family=sig.family,
            path=self.info.path, line=1 if ej else hit.line, text_line=1 if ej else hit.text_line,
            offset=hit.offset, text=hit.text.strip(), raw_text=hit.raw_text, rank=g, local_rank=local,
            node_key=self.info.node_key, host=hit.host, attempt=self.attempt, time=t, time_text=hit.time_text,
            time_approx=approx, priority=priority if priority is not None else self.info.priority,
            source_order=self.info.order, exc_type=exc_type, origin_frame=x.get("origin"),
            traceback_start=x.get("tb_start"), chained=x.get("chained") or [], extra=x.get("extra") or {},
            fields=fields, builtin=sig.builtin,
        )
        if data is not None and x.get("tb_start") is None and sig.severity == "error":
            before = frames_before(data, at)
            if before:
                f.fields.setdefault("where", before)
        self.findings[agg] = f
        self.open_where_window(f, hit.key)
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


def _small(v) -> int | None:
    if isinstance(v, int) and not isinstance(v, bool):
        return v if 0 <= v < 10_000_000 else None
    if isinstance(v, str) and v.isdigit():
        return small_int(v)
    return None
