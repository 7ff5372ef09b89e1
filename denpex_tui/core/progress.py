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

import re2

from .lines.reader import SourceError, read_chunks

__all__ = ["Progress", "read_progress", "STEP"]

STEP = re.compile(
    r"(?:\bglobal[_ ]step[ =:]?|\bstep[ =:]+|\bstep_0*|\biteration[ =:]+|\biter_0*|\bcheckpoint-)(\d{1,12})\b", re.I)
SAVE_START = re.compile(
    r"\bsaving checkpoint\b|is about to be saved|\bSaving model checkpoint to\b|\bSaving current state to\b", re.I)
SAVE_DONE = re.compile(
    r"is ready now!|successfully saved checkpoint|Copying complete!|\bsaved checkpoint\b|\bcheckpoint\b\S*\s+(?:\S+\s+)?saved\b"
    r"|saving model to '[^']*\.ckpt'", re.I)
_NOT_DONE = re.compile(r"\bfail|\berror\b|\bnot\b", re.I)
_MAX_LINE = 64 << 10


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
# Lines that may be save lines, found in C over whole chunks: only they are read one by one.
_SAVE_B = re.compile(rb"(?i)sav(?:e|ing)|ready now|copying complete")
_STEP_B = re.compile(STEP.pattern.encode(), re.I)


_SAVE_NEEDLES = (b"sav", b"Sav", b"SAV", b"ready now", b"Copying complete")
# the same needles as one RE2 pass over the chunk (C, one scan instead of five bytes.find walks:
# "s" is common in training logs, and each needle's walk restarted at every line's end)
_SAVE_RE2 = re2.compile(b"|".join(re.escape(n) for n in _SAVE_NEEDLES))


def _save_positions(data: bytes) -> list[int]:
    """The starts of the lines that may be save lines (one per line, in order), found by one
    RE2 pass over the chunk; only the few lines it finds cost Python work."""
    hits: list[int] = []
    last = -1
    for m in _SAVE_RE2.finditer(data):
        ls = data.rfind(b"\n", 0, m.start()) + 1
        if ls != last:
            hits.append(ls)
            last = ls
    return hits


def _last_step(buf: bytes) -> tuple[int | None, int | None]:
    """(step, offset of its line) of the last step line in ``buf`` that is not a save line."""
    end = len(buf)
    while end > 0:
        start = max(0, end - (64 << 10))
        ms = list(_STEP_B.finditer(buf, start, end))
        for m in reversed(ms):
            ls = buf.rfind(b"\n", 0, m.start()) + 1
            le = buf.find(b"\n", m.end())
            line = buf[ls : le if le >= 0 else len(buf)]
            if not _SAVE_B.search(line):
                steps = [int(x.group(1)) for x in _STEP_B.finditer(line)]
                return steps[-1], ls
        if start == 0:
            break
        end = buf.rfind(b"\n", 0, start) + 1 or start
    return None, None


def read_progress(path: str, stop_line: int | None = None) -> Progress:
    """Progress of one file, up to (not including) ``stop_line`` when given.

    One pass in C over whole chunks read by the one reader (a line longer than its bound is
    cut there, as everywhere: a progress bar that never ends costs no memory): only lines that may be save lines are decoded; a rank's step
    is its last step line before a save (and at the end), which is the step reached in a log whose
    steps only grow (a training loop's)."""
    p = Progress(path)
    started: dict[int, None] = {}
    done: dict[int, None] = {}
    line_base = 0  # lines before the current chunk
    tail = b""  # the end of the previous chunk, for a save line's step
    try:
        chunks = read_chunks(path, chunk=_CHUNK)  # the one reader: bounded lines, gzip, UTF-16
        for _off, data in chunks:
            nlines = data.count(b"\n")
            if stop_line is not None and line_base + nlines >= stop_line:
                cut = 0
                for _ in range(stop_line - 1 - line_base):
                    cut = data.find(b"\n", cut) + 1
                data, nlines, last = data[:cut], stop_line - 1 - line_base, True
            else:
                last = False
            buf = tail + data
            off0 = len(tail)
            for pos in _save_positions(data):
                ls = data.rfind(b"\n", 0, pos) + 1
                le = data.find(b"\n", pos)
                text = data[ls : le if le >= 0 else len(data)][:_MAX_LINE].decode("utf-8", "replace")
                is_start = SAVE_START.search(text) is not None
                is_done = not is_start and SAVE_DONE.search(text) is not None and not _NOT_DONE.search(text)
                if not (is_start or is_done):
                    continue
                steps = _steps(text)
                if steps:
                    key = steps[-1]
                else:
                    key, _ = _last_step(buf[max(0, off0 + ls - _BACK) : off0 + ls])
                if key is None:
                    continue
                (started if is_start else done).setdefault(key)
            step, at = _last_step(data)
            if step is not None:
                p.last_step = step if p.last_step is None else max(p.last_step, step)
                if p.last_step == step:
                    p.last_step_line = line_base + data.count(b"\n", 0, at) + 1
            line_base += nlines
            p.lines = line_base
            tail = data[-_BACK:]
            if last:
                break
    except SourceError as exc:
        raise OSError(str(exc)) from None  # unreadable here as any file is: the callers' one case
    p.saves_started = list(started)
    p.saves_done = list(done)
    return p
