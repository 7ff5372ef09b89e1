"""The per-source incremental pipeline: bytes in, findings out.

The same :class:`SourceProcessor` serves ``scan`` (history: big chunks from offset 0) and
``follow``/``watch`` (live: small chunks as lines complete). For each chunk of whole lines:

1. the prefilter finds the few lines holding a signature or anchor literal;
2. only those lines are decoded, made safe, parsed once (:func:`~denpex_tui.core.lineparse.parse_line`)
   and given to the detectors (:meth:`~denpex_tui.core.matcher.Matcher.detect`);
3. a ``Traceback`` header switches the stream into *walk mode* (:mod:`denpex_tui.core.tracebacks`);
4. torchelastic's failure report and error.json are launcher evidence
   (:mod:`denpex_tui.core.failreport`), never trusted as the diagnosis;
5. at the end of each chunk, the last timestamped line of each rank's stream is recorded
   (the evidence for hangs: which rank went silent first).

Memory is bounded: findings are aggregated per (attempt, stream, signature) with a count,
traceback blocks are capped, markers keep first and last occurrences.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Callable

from .catalog import Signature
from .lineparse import ParsedLine, parse_line, stream_labels, text_ranks
from .failreport import FB_START as _FB_START
from .failreport import FailureReportMixin, _FBEntry
from .matcher import ANCHORS, ERROR_WORDS, VERSION_RULES, Matcher
from .model import (
    FailureEntry,
    Finding,
    LastLine,
    Marker,
    SourceInfo,
)
from .text import safe_line
from .tracebacks import ORIG_TB_HEADER as _ORIG_TB
from .tracebacks import TB_HEADER as _TB
from .tracebacks import TracebackMixin, _Block

__all__ = ["SourceProcessor", "StreamKey"]

StreamKey = tuple  # ("l", local) | ("t", task) | ("h", host) | ("fb", idx) | None

_RANK_MAP = re.compile(r"global_rank_mapping=(\{.*\})")
_BACKSCAN_LINES = 400
_LASTLINE_BYTES = 1 << 20
_MAX_MARKERS_PER_KEY = 64
_MAX_UNKNOWN = 5
_LAUNCHER_LINES = ("slurmstepd", "srun: ", "pdsh@", "mpirun ", "--------------------------------------------------------------------------")
_ERROR_WORD = re.compile(r"(?i)\b(?:" + "|".join(re.escape(w) for w in ERROR_WORDS) + r")")
_NOT_ERROR_LEVELS = ("info", "debug", "warning")


def _small_int(v) -> int | None:
    if isinstance(v, int):
        return v
    if isinstance(v, str) and v.isdigit() and len(v) <= 7:
        return int(v)
    return None


class SourceProcessor(TracebackMixin, FailureReportMixin):
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
        if pre.text.startswith(_LAUNCHER_LINES):
            return None, None  # slurmstepd/srun lines come through task 0's label: the launcher's
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
        if self.info.kind == "console" and (key is None or key[0] == "h"):
            # torchelastic's failure report is the agent's (through pdsh, with its host label)
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

    # -- last lines -----------------------------------------------------------------------

    def _record_last_lines(self, data: bytes, offset: int) -> None:
        """The last timestamped line of each rank stream in this chunk (bounded backward scan,
        stopping as soon as every stream present in the chunk has been found)."""
        end = len(data)
        limit = max(0, end - _LASTLINE_BYTES)
        if self.info.kind == "console":  # one stream per label, and per rank the lines' own tags name
            want = len(stream_labels(data)) + max(len(text_ranks(data, limit)), 1 if b"[rank" in data else 0)
        else:
            want = 1
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
            if key in found or pre.text.startswith(_LAUNCHER_LINES):
                continue  # (a launcher line relayed through a task's label is not that rank's)
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

