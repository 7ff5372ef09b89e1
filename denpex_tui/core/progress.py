"""How far a rank got: the training step and the checkpoint saves its own log shows.

Read from the lines themselves (one pass in C over chunks, bounded memory), for ``verify`` (did the rerun get as
far as the failure?), ``evidence`` (the step at the failure) and the failure's rhythm (how many
saves each rank completed before it failed). Step lines, as printed by the trainers:

* ``step 100/200``, ``global_step60``, ``global step 1200`` (Lightning), ``step=10, skipped=0``
  (DeepSpeed's ``steps_per_print``), Megatron's `` iteration      100/  500000 |`` and
  ``iter_0000100``, HF ``checkpoint-500``;

save lines (failure-messages.md 2.B, 2.H): a save *starts* with ``Saving checkpoint``,
``[Torch] Checkpoint <tag> is about to be saved!`` (B4), ``saving checkpoint at iteration``
(H1), ``Saving model checkpoint to`` (H6), ``Saving current state to`` (H7); it *completes*
with ``Checkpoint <tag> is ready now!`` (B7), ``successfully saved checkpoint`` (H2),
``Copying complete!`` (A10), ``saving model to '...ckpt'`` (H11) or a ``saved``/``Saved``
checkpoint line. Several lines of one save (DeepSpeed's and the script's) count once: saves are
keyed by the step they name (or the last step seen).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .lines.chunk import newlines
from .lines.reader import SourceError, read_chunks
from .patterns import LineScan

__all__ = ["Progress", "ProgressTracker", "read_progress", "STEP"]

STEP = re.compile(
    r"(?:\bglobal[_ ]step[ =:]?|\bstep[ =:]+|\bstep_0*|\biteration[ =:]+|\biter_0*|\bcheckpoint-)(\d{1,12})\b", re.I)
SAVE_START = re.compile(
    r"\bsaving checkpoint\b|is about to be saved|\bSaving model checkpoint to\b|\bSaving current state to\b", re.I)
SAVE_DONE = re.compile(
    r"is ready now!|successfully saved checkpoint|Copying complete!|\bsaved checkpoint\b|\bcheckpoint\b\S*\s+(?:\S+\s+)?saved\b"
    r"|saving model to '[^']*\.ckpt'", re.I)
_NOT_DONE = re.compile(r"\bfail|\berror\b|\bnot\b", re.I)
_MAX_LINE = 64 << 10

# Texts each rule cannot match without (lower case). On an ASCII line, lower() folds case as the
# rules' IGNORECASE does, so a line holding none of a rule's needles is no match of it, without
# running it: a 12 us search on every 'Saved checkpoint ...' line of a long run, twice.
_START_NEEDLES = ("saving checkpoint", "is about to be saved", "saving model checkpoint to", "saving current state to")
_DONE_NEEDLES = ("is ready now!", "successfully saved checkpoint", "copying complete!", "saved checkpoint",
                 "saving model to '")
_NOT_NEEDLES = ("fail", "error", "not")


def save_kind(text: str) -> tuple[bool, bool]:
    """(starts a save, completes one) for one line's text."""
    if not text.isascii():
        is_start = SAVE_START.search(text) is not None
        return is_start, not is_start and SAVE_DONE.search(text) is not None and not _NOT_DONE.search(text)
    low = text.lower()
    if any(n in low for n in _START_NEEDLES) and SAVE_START.search(text) is not None:
        return True, False
    maybe_done = any(n in low for n in _DONE_NEEDLES) or ("checkpoint" in low and "saved" in low)
    if not maybe_done or SAVE_DONE.search(text) is None:
        return False, False
    return False, not (any(n in low for n in _NOT_NEEDLES) and _NOT_DONE.search(text))


@dataclass
class Progress:
    path: str
    last_step: int | None = None
    last_step_line: int | None = None
    saves_started: list[int] = field(default_factory=list)  # keys (steps) in order
    saves_done: list[int] = field(default_factory=list)
    lines: int = 0

    @property
    def saves_completed(self) -> int:
        if self.saves_done:
            return len(self.saves_done)
        # a framework that prints only the start: a save counts once a later step was reached
        return len([k for k in self.saves_started if self.last_step is not None and self.last_step > k])

    def to_json(self) -> dict:
        return {"path": self.path, "last_step": self.last_step, "last_step_line": self.last_step_line,
                "saves_started": len(self.saves_started), "saves_completed": self.saves_completed}


def _steps(text: str) -> list[int]:
    return [int(m.group(1)) for m in STEP.finditer(text)]


_CHUNK = 4 << 20
_BACK = 256 << 10  # how far back a save line looks for the step it belongs to
_WINDOW = 64 << 10  # the last step line is looked for backwards, this much at a time
_FIRST_WINDOW = 4 << 10  # (the first window: a training log's last step line is near its end)
# Lines that may be save lines, found in C over whole chunks: only they are read one by one.
_SAVE_B = re.compile(rb"(?i)sav(?:e|ing)|ready now|copying complete")
_STEP_B = re.compile(STEP.pattern.encode(), re.I)


SAVE_NEEDLES = ("sav", "Sav", "SAV", "ready now", "Copying complete")
# the lines holding one, in one pass over the chunk (the matcher's prefilter finds them in the same
# pass where it can: Matcher.CHUNK_GROUPS; else Hyperscan for a chunk of 1 MB or more: a 22 MB
# rank log in 3 ms instead of RE2's 34, a cost the history pass pays for every rank log it counts;
# RE2 below): only the few lines it finds cost Python work
_SAVES = LineScan(SAVE_NEEDLES)


def _save_positions(data: bytes) -> list[int]:
    """The starts of the lines that may be save lines (one per line, in order)."""
    return _SAVES.line_starts(data)


def _last_step(buf) -> tuple[int | None, int | None]:
    """(step, offset of its line) of the last step line in ``buf`` that is not a save line.

    Looked for backwards in windows of whole lines (:data:`_FIRST_WINDOW`, then :data:`_WINDOW`
    or more), so no step line is missed at a window's start: the answer is the same whatever the
    chunk ``buf`` is. (Each window's step texts are all found: a first window of 64 KB cost
    1.2 ms a chunk for the one line at its end.)"""
    end = len(buf)
    width = _FIRST_WINDOW
    while end > 0:
        start = buf.rfind(b"\n", 0, max(0, end - width)) + 1
        width = _WINDOW
        ms = list(_STEP_B.finditer(buf, start, end))
        for m in reversed(ms):
            ls = buf.rfind(b"\n", 0, m.start()) + 1
            le = buf.find(b"\n", m.end())
            line = buf[ls : le if le >= 0 else len(buf)]
            if not _SAVE_B.search(line):
                steps = [int(x.group(1)) for x in _STEP_B.finditer(line)]
                return steps[-1], ls
        end = start
    return None, None


class ProgressTracker:
    """:func:`read_progress`'s rules over whole-line chunks fed in order, so that the history pass
    counts a rank's steps and saves as it reads (``scan`` reads each log once).

    The result does not depend on how the bytes were cut into chunks: a save line without a step
    looks back :data:`_BACK` bytes before it, whatever chunk they came in (the last ``_BACK``
    bytes are kept), and the step reached is the last step line's. A tracker of a range of a file
    (``at_start=False``) joins onto the tracker of the range before it (:meth:`join`): a save line
    in its first ``_BACK`` bytes whose step was not found in the range waits for the bytes before
    it, in the order it came (:attr:`_early`), so the joined count is what one read gives."""

    def __init__(self, path: str, *, at_start: bool = True) -> None:
        self.path = path
        self.lines = 0
        self.bytes = 0
        self.last_step: int | None = None
        self.last_step_line: int | None = None
        self.started: dict[int, None] = {}  # keys (steps) in the order first seen
        self.done: dict[int, None] = {}
        self._tail: bytes | bytearray = b""  # the last _BACK bytes fed (or more, trimmed lazily)
        # a range's first _BACK bytes, and its save lines there: (is_start, key or None, offset);
        # None: at the file's start (nothing before it to wait for)
        self._head: bytearray | None = None if at_start else bytearray()
        self._early: list[tuple[bool, int | None, int]] | None = None if at_start else []

    def feed(self, data: bytes, saves: list[int] | None = None, lines: int | None = None) -> None:
        """Whole lines (ending with a newline), the ones after what was fed before. ``saves``:
        the starts of its lines that hold a :data:`SAVE_NEEDLES` text, when the prefilter's pass
        found them (else they are looked for here); ``lines``: how many lines ``data`` holds,
        when the caller counted them already."""
        if not data:
            return
        base = self.bytes
        for ls in (saves if saves is not None else _save_positions(data)):
            le = data.find(b"\n", ls)
            text = data[ls : le if le >= 0 else len(data)][:_MAX_LINE].decode("utf-8", "replace")
            is_start, is_done = save_kind(text)
            if not (is_start or is_done):
                continue
            steps = _steps(text)
            if steps:
                key = steps[-1]
            elif ls >= _BACK:
                key, _ = _last_step(data[ls - _BACK : ls])
            else:
                key, _ = _last_step(self._tail[max(0, len(self._tail) - (_BACK - ls)):] + data[:ls])
            if self._early is not None and base + ls < _BACK:
                self._early.append((is_start, key, base + ls))  # key None: its step may be before the range
            elif key is not None:
                (self.started if is_start else self.done).setdefault(key)
        total = newlines(data) if lines is None else lines
        step, at = _last_step(data)
        if step is not None:
            self.last_step, self.last_step_line = step, self.lines + total - newlines(data, at) + 1
        self.lines += total
        self.bytes += len(data)
        if self._head is not None and len(self._head) < _BACK:
            self._head += data[: _BACK - len(self._head)]
        self._keep_tail(data)

    def _keep_tail(self, data: bytes | bytearray) -> None:
        if len(data) >= _BACK:
            self._tail = bytes(data[-_BACK:])
            return
        if not isinstance(self._tail, bytearray):
            self._tail = bytearray(self._tail)
        self._tail += data  # small pieces: appended, the front dropped now and then
        if len(self._tail) > 4 * _BACK:
            del self._tail[:-_BACK]

    def join(self, b: ProgressTracker) -> None:
        """Add ``b``, the tracker of the range right after this one's, in place."""
        base = self.bytes
        early: list[tuple[bool, int | None, int]] = []
        for is_start, key, at in b._early or ():
            if key is None and (self._early is None or base + at >= _BACK):
                # its look-back, now with the bytes before the range
                window = self._tail[max(0, len(self._tail) - (_BACK - at)):] + bytes((b._head or b"")[:at])
                key, _ = _last_step(window)
                if key is None:
                    continue
            early.append((is_start, key, base + at))
        if self._early is not None and base < _BACK:
            # this range's start waits too, and all its saves are there: b's first ones follow them
            self._early.extend(early)
        else:
            for is_start, key, _at in early:
                (self.started if is_start else self.done).setdefault(key)  # type: ignore[arg-type]
        for k in b.started:
            self.started.setdefault(k)
        for k in b.done:
            self.done.setdefault(k)
        if b.last_step is not None:
            self.last_step, self.last_step_line = b.last_step, self.lines + (b.last_step_line or 0)
        if self._head is not None and len(self._head) < _BACK:
            self._head += (b._head or b"")[: _BACK - len(self._head)]
        self._keep_tail(b._tail)
        self.lines += b.lines
        self.bytes += b.bytes

    def result(self) -> Progress:
        """The progress so far (a range not joined: as if the file started there)."""
        started: dict[int, None] = {}
        done: dict[int, None] = {}
        for is_start, key, _at in self._early or ():
            if key is not None:
                (started if is_start else done).setdefault(key)
        for k in self.started:
            started.setdefault(k)
        for k in self.done:
            done.setdefault(k)
        return Progress(self.path, self.last_step, self.last_step_line, list(started), list(done), self.lines)

    def __getstate__(self) -> dict:
        d = dict(self.__dict__)
        d["_tail"] = bytes(self._tail[-_BACK:])  # what a join needs, not a whole chunk
        return d


def read_progress(path: str, stop_line: int | None = None) -> Progress:
    """Progress of one file, up to (not including) ``stop_line`` when given.

    One pass in C over whole chunks read by the one reader (a line longer than its bound is
    cut there, as everywhere: a progress bar that never ends costs no memory), through a
    :class:`ProgressTracker`: only lines that may be save lines are decoded; a rank's step is its
    last step line before a save (and at the end), which is the step reached in a log whose steps
    only grow (a training loop's)."""
    t = ProgressTracker(path)
    try:
        for _off, data in read_chunks(path, chunk=_CHUNK):  # the one reader: bounded lines, gzip, UTF-16
            if stop_line is not None and t.lines + data.count(b"\n") >= stop_line:
                cut = 0
                for _ in range(stop_line - 1 - t.lines):
                    cut = data.find(b"\n", cut) + 1
                t.feed(data[:cut])
                break
            t.feed(data)
    except SourceError as exc:
        raise OSError(str(exc)) from None  # unreadable here as any file is: the callers' one case
    return t.result()
