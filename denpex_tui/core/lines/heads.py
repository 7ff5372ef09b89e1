"""What a console's lines open with: each line's *head* (its launcher labels and the byte after
them) and the chunk's stream *labels*, for every line of a chunk at once.

A console (a file that interleaves ranks) opens nearly every line with one of a few labels
(``[default3]:``, ``[rank3]:``, ``  3: ``, ``[1,3]<stderr>:``, ``host: ``...). Two regular
expressions say what a line opens with: :data:`_HEAD_RULE` (the view's rank tags, through the
door once per distinct head) and :data:`_LABELS` (which streams spoke: the last-line walk, the
live engine's silence detector). Run over a whole chunk they try every line, ~25 ms per 8 MB.

The shortcut: gather each line's first :data:`_ROW` bytes as a row (numpy), group equal rows,
and decide once per distinct row. A row that opens with a torchrun label followed by a byte
that is neither a space nor ``[`` (``[default3]:2026-...``) has a head and a label decided by
those bytes alone: the pod, host and srun parts of both rules fail at its ``[``, the label
matches whole, no second label can follow, and the head takes the next byte. A row that opens
with a word not followed by ``:`` (``2026-12-04 16:58:13``, ``Traceback (most``) has no label
and its first byte is its head: host and srun need the ``:``, every other part a ``[`` or a
space. Every other line
is matched by the rules themselves, one by one; when they are more than an eighth of the
chunk, the rules run over it whole as before. ~3 ms per 8 MB console chunk; a test holds both
ways equal on every fixture and corpus console.

The line starts and rows of the last chunk are kept per thread: the history pass asks for the
labels (the pipeline), the heads and the times (the view's index) of the same chunk.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass

from denpex_tui.core.lines import npy as np

from .rows import distinct_rows, line_starts, windows

__all__ = ["line_heads", "stream_labels", "label_kind", "openings", "starts_of"]

_HEAD_RULE = (rb"(?:\[pod/[^\]\s\n]{1,300}\] )?(?:[A-Za-z0-9][\w.-]{0,62}: )?(?: {0,6}\d{1,7}: )?"
              rb"(?:\[[A-Za-z_-]{0,63}\d{1,7}\]: ?|\[\d{1,7}(?:,\d{1,7})?\]<std\w{1,4}>: ?){0,3}[^\n]?")
# A head always matches (all of it is optional) and never crosses a newline: one per line.
_HEAD = re.compile(rb"\n(" + _HEAD_RULE + rb")")  # every line's, in one pass over a chunk
# (matched after a newline, not with ^: the engine then skips to each newline at C speed)
_HEAD_AT = re.compile(_HEAD_RULE)  # one line's, at its start

_LABELS_RULE = (rb"(?:\[pod/[^\]\s]{1,300}\] )?(?:[A-Za-z][\w.-]{0,62}: )?"
                rb"(\[[A-Za-z_-]{0,63}\d{1,7}\]:|\[\d{1,7},\d{1,7}\]<std|\[\d{1,7}\]<std| {0,6}\d{1,7}: )")
_LABELS = re.compile(rb"\n" + _LABELS_RULE)
_LABELS_AT = re.compile(_LABELS_RULE)
_LABEL_NUM = re.compile(rb"\d{1,7}(?=\]:|\]<|: )")

# A torchrun label and the byte after it, neither a space (': ?' would take it, and a second
# label could follow) nor '[' (a second label), nor a newline (the line is its label).
_TORCHRUN = re.compile(rb"\[[A-Za-z_-]{0,63}\d{1,7}\]:[^\s\[]")
# A line with no label at all: a letter or digit, then a word ([\w.-]*) ended by a byte that
# is not ':' (a timestamp, 'Traceback ...', 'NCCL WARN'). No host ('name: ') and no srun task
# ('3: ') opens it, and no other label starts with one: its head is its first byte.
_PLAIN = re.compile(rb"[A-Za-z0-9][\w.-]*[^\w.:-]")
_ROW = 16  # the bytes of a line's start the shortcut looks at
_MIN_BYTES = 64 << 10  # below this, numpy's set-up costs more than the rules' pass
_OTHERS = 8  # the shortcut when at most 1/_OTHERS of the lines are matched one by one


@dataclass(slots=True)
class Openings:
    """A chunk's lines grouped by their first :data:`_ROW` bytes."""

    data: bytes
    starts: np.ndarray  # each line's start
    rows: list[bytes]  # the distinct rows
    inv: np.ndarray  # each line's row
    label: list[int]  # per row: the length of its torchrun label (through ':'); -1: no label at all
    # (the head is the first byte); -2: not a shortcut row
    others: np.ndarray  # the lines whose row is no shortcut row

    @property
    def worth(self) -> bool:
        return len(self.others) * _OTHERS <= len(self.starts)


_LAST = threading.local()


def openings(data: bytes, starts: np.ndarray | None = None) -> Openings:
    """The chunk's line starts and rows (kept for the thread's next question on the same
    ``data`` object); ``starts``: its line starts, when the caller has them already."""
    o = getattr(_LAST, "o", None)
    if o is not None and o.data is data and (starts is None or len(o.starts) == len(starts)):
        return o
    if starts is None:
        starts = line_starts(data)
    rows, inv = distinct_rows(windows(np.frombuffer(data, dtype=np.uint8), starts, _ROW))
    label = []
    for r in rows:
        m = _TORCHRUN.match(r)
        label.append(m.end() - 1 if m else -1 if _PLAIN.match(r) else -2)
    simple = np.array(label, dtype=np.int64) != -2
    o = Openings(data, starts, rows, inv, label, np.flatnonzero(~simple[inv]))
    _LAST.o = o
    return o


def starts_of(data: bytes) -> np.ndarray:
    """The chunk's line starts: kept ones when this thread looked at ``data`` already."""
    o = getattr(_LAST, "o", None)
    return o.starts if o is not None and o.data is data else line_starts(data)


def _shortcut(data: bytes) -> Openings | None:
    if len(data) < _MIN_BYTES or not data.endswith(b"\n"):
        return None
    o = openings(data)
    return o if o.worth else None


def line_heads(data: bytes, starts: np.ndarray) -> tuple[np.ndarray, list[bytes]]:
    """Each line's head, as its number in the list of the chunk's distinct heads."""
    n = len(starts)
    o = _shortcut(data) if n else None
    if o is None or len(o.starts) != n:
        heads = _HEAD.findall(b"\n" + data)[:n]  # (the empty match after the final newline: cut)
        first = dict.fromkeys(heads)
        for i, k in enumerate(first):
            first[k] = i
        return np.fromiter(map(first.__getitem__, heads), dtype=np.int64, count=len(heads)), list(first)
    ids: dict[bytes, int] = {}
    of_row = np.array([ids.setdefault(r[:max(k, 0) + 1], len(ids)) if k != -2 else -1 for r, k in zip(o.rows, o.label)],
                      dtype=np.int64)
    codes = of_row[o.inv]
    for i in o.others.tolist():
        codes[i] = ids.setdefault(_HEAD_AT.match(data, int(o.starts[i])).group(0), len(ids))
    return codes, list(ids)


def stream_labels(data: bytes, since: int = 0) -> dict[bytes, int]:
    """Launcher labels at line starts in ``data`` -> the number they carry. ``[defaultN]:``
    gives a local rank, ``[rankN]:`` and mpirun's ``[j,N]<stderr>:`` a global one, srun's
    ``  N: `` a task id; the label itself says which (see :func:`label_kind`). ``since``: of
    the lines that start there or after."""
    if since > 0:
        since = data.find(b"\n", since - 1) + 1 or len(data)  # the first line starting there or after
    o = _shortcut(data)
    if o is None:
        labels = set(_LABELS.findall(b"\n" + data[since:] if since else b"\n" + data))
    else:
        first = int(np.searchsorted(o.starts, since)) if since else 0
        rows = np.distinct(o.inv[first:]).tolist() if first else range(len(o.rows))
        labels = {o.rows[j][:o.label[j]] for j in rows if o.label[j] > 0}
        others = o.others[np.searchsorted(o.others, first):] if first else o.others
        for i in others.tolist():
            m = _LABELS_AT.match(data, int(o.starts[i]))
            if m is not None:
                labels.add(m.group(1))
    out: dict[bytes, int] = {}
    for lab in labels:
        m = _LABEL_NUM.search(lab)
        if m:
            out[lab] = int(m.group(0))
    return out


def label_kind(label: bytes) -> str:
    """'local' ([defaultN]:), 'rank' ([rankN]:, mpirun), or 'task' (srun)."""
    if label.startswith(b"[rank") or label.endswith(b"<std"):
        return "rank"
    if label.startswith(b"["):
        return "local"
    return "task"
