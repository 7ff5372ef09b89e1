"""Where each rank's stream stopped: its last progress line (a tqdm bar as last drawn, a step
line) with the counter it shows.

A log dir without the console has no launcher record: when a rank is SIGKILLed (the OOM killer,
``kill -9``) it prints nothing, and its peers print only that they lost a peer. What the log dir
does show is how far each rank got. Timestamps say it when the lines carry them
(:mod:`.streamtimes` keeps each stream's last timestamped line); a tqdm bar on every rank says it
without any time: the rank whose bar stopped at 21/400 while the others reached 28/400 stopped
first. This mixin records, per chunk, the last progress line of every rank stream present in it
(the latest chunk's record replaces an earlier one), so the mark is the same however the bytes
were cut into chunks:

* a stream's mark is its last progress line among the last :data:`WINDOW` bytes of its file
  (a rank that printed a megabyte of other output after its last counter has no mark, and its
  last timestamped line speaks for it). The window is the file's, not the chunk's: marks older
  than the window are dropped as the file grows, so an 8 MiB history chunk and a live line at a
  time give the same marks, and the search costs a few ``bytes.rfind`` over one window per chunk;
* candidate lines are found with ``bytes.rfind`` on the literals every progress line holds
  (:data:`~denpex_tui.core.lines.progress.PROGRESS_NEEDLES`), walking back from the chunk's end,
  at most :data:`MAX_HITS` candidates; a line cut at the reader's maximum length is skipped (a
  bar redrawn for hours without a newline: its last draw is not in what was kept);
* each candidate's facts come from the door (its rank and stream from
  :func:`~denpex_tui.core.lines.facts.line_facts`, its counter from
  :func:`~denpex_tui.core.lines.facts.line_progress`).
"""

from __future__ import annotations

from .lines.heads import stream_labels
from .lines.facts import PROGRESS_NEEDLES, line_facts, line_progress, shown_segment
from .lines.reader import MAX_LINE
from .model import StopMark

__all__ = ["StopMarksMixin", "MAX_HITS", "WINDOW"]

MAX_HITS = 600  # candidate lines examined per chunk, walking back from its end
WINDOW = 1 << 20  # a mark is a progress line among the last WINDOW bytes of its file


_AFTER_WORD = frozenset(b" =:_0123456789")


def _plausible(raw: bytes) -> bool:
    """Whether the line may hold a counter: a tqdm rate, or a word needle (``step``,
    ``iteration``) that a number can follow (``step 30``, ``step=5``, ``global_step60``,
    ``step_000020``; not ``step_time``). Cheaper than the counter's regex on most lines."""
    tail = raw[-4096:]
    for n in PROGRESS_NEEDLES:
        i = tail.find(n)
        while i >= 0:
            if n.endswith(b"]"):
                return True
            nxt = tail[i + len(n): i + len(n) + 2]
            if nxt and nxt[0] in _AFTER_WORD and (nxt[0] != 0x5F or nxt[1:2].isdigit()):
                return True
            i = tail.find(n, i + 1)
    return False


def _speaking(data: bytes, lo: int, labels) -> int:
    """How many of the ``labels`` open a line of ``data[lo:]`` with text after them: the streams
    that can have a mark. torchrun's failure summary opens each entry with a bare ``[1]:`` line;
    counted as streams, its labels kept the walk going to its last candidate (:data:`MAX_HITS`,
    20-30 ms) at the end of every failed torchrun console."""
    return sum(1 for lab in labels
               if any(data[s + len(lab): s + len(lab) + 1] not in (b"\n", b"\r", b"") for s in _opening(data, lab, lo)))


def _opening(data: bytes, lab: bytes, lo: int):
    """The starts of the lines of ``data[lo:]`` that open with ``lab``."""
    if lo == 0 and data.startswith(lab):
        yield 0
    key = b"\n" + lab
    i = data.find(key, max(0, lo - 1))
    while i >= 0:
        yield i + 1
        i = data.find(key, i + 1)


class StopMarksMixin:
    def record_stop_marks(self, data: bytes, offset: int) -> None:
        """The last progress line of each rank stream in this chunk (``data`` ends with a newline;
        ``self.line_no`` counts the lines up to its end)."""
        console = self.info.kind == "console"
        cutoff = offset + len(data) - WINDOW  # file offset where the window starts
        if self.stop_marks and cutoff > 0:
            for k in [k for k, m in self.stop_marks.items() if m.offset < cutoff]:
                del self.stop_marks[k]
        lo = max(0, len(data) - WINDOW)
        want = (_speaking(data, lo, stream_labels(data, since=lo)) or 1) if console else 1
        found: set = set()
        nxt = {n: data.rfind(n, lo) for n in PROGRESS_NEEDLES}
        hits = 0
        while hits < MAX_HITS and len(found) < want:
            needle, pos = max(nxt.items(), key=lambda kv: kv[1])
            if pos < 0:
                return
            hits += 1
            start = data.rfind(b"\n", 0, pos) + 1
            end = data.find(b"\n", pos)
            if end < 0:
                end = len(data)
            if start < lo:  # the line begins before the window
                return
            for n, p in nxt.items():  # every needle's next hit is before this line
                if p >= start:
                    nxt[n] = data.rfind(n, lo, start)
            raw = data[start:end]
            if not _plausible(raw):
                continue
            if len(raw) >= MAX_LINE:  # cut by the reader: its last draw was not kept
                continue
            prog = line_progress(raw)
            if prog is None:
                continue
            pre = line_facts(raw, self.year_hint)
            if pre.launcher:
                continue
            key = self._last_key(pre)
            if (console and key is None) or key in found:
                continue
            found.add(key)
            g, local = self._ranks(pre)
            self._note_key(g, local)
            seg = line_facts(shown_segment(raw)).text.strip()  # the bar as last drawn
            self.stop_marks[(self.attempt, key)] = StopMark(
                path=self.info.path, line=self.line_no - data.count(b"\n", start) + 1, offset=offset + start,
                text=seg[-300:], step=prog.step, total=prog.total, kind=prog.kind, time=pre.time,
                key_local=local, key_rank=g, node_key=self.info.node_key, attempt=self.attempt,
                priority=self.info.priority)
