"""torchelastic's own records: the ChildFailedError failure report and error.json.

Both are launcher evidence — parsed into structured :class:`FailureEntry` records (rank, local
rank, exit code, pid, host, 1 s time, root-cause flag) — never trusted as the diagnosis.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime

from .hit import Hit
from .matcher import ANCHORS
from .model import PRIORITY_ERROR_JSON, PRIORITY_FAILURE_BLOCK, FailureEntry
from .tracebacks import TB_HEADER as _TB
from .tracebacks import _Block

__all__ = ["FailureReportMixin", "FB_START"]

_FB_FIELD = re.compile(r"^  (time|host|rank|exitcode|error_file|traceback)\s*: ?(.*)$")
_FB_ENTRY = re.compile(r"^\[(\d+)\]:\s*$")
_FB_RANK = re.compile(r"^(-?\d+)(?: \(local_rank: (\d+)\))?")
_FB_EXIT = re.compile(r"^(-?\d+)(?: \(pid: (\d+)\))?")
_FB_START = ("Failures:", ANCHORS["root-cause"])
FB_START = _FB_START


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


class FailureReportMixin:
    """torchelastic's records, for :class:`~denpex_tui.core.pipeline.SourceProcessor`."""

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
            self._open_block(_Block(key, lineno, off, e.rank, e.local, e.host, t, False,
                                    rank_override=e.rank, priority=PRIORITY_FAILURE_BLOCK))
            return
        det = self.matcher.detect(text)
        if det is not None:
                self._emit(det.sig, Hit(text, raw_text, lineno, lineno, off, e.rank, e.local, e.host, t, None, key),
                       priority=PRIORITY_FAILURE_BLOCK, fields=det.fields)

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

